"""Kind "kernel": the performance model's calibration kernels (``dlperf calibrate``), one
op's grid of shapes timed one after another in one worker.

The options and the outcome are defined beside the kernels' FLOPs, bytes and grids in
``dlperf.perfmodel.kernels``, which the model (framework-free, below this layer) reads
without going through a run; this module names them as a kind's payload.
"""

from __future__ import annotations

from dlperf.perfmodel.kernels import KernelOptions, KernelOutcome, KernelPart, KernelSample

__all__ = ["KernelOptions", "KernelOutcome", "KernelPart", "KernelSample"]
