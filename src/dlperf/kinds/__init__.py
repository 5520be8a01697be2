"""The kinds of run, one package each (``kinds/<name>/``: its options and outcome, its run
body, planner, analysis and report sections), and the one registry of them, ``KINDS``,
that core, the worker, the runner and the report read.

Adding a kind: one package with an entry ``KIND`` (``dlperf.kinds.kind.Kind``) and its
line here. Nothing here imports a framework. The stored kind strings ("kernel" for a
calibration run, "profile" for ``dlperf explain``, "loader" and "storage" for data flow)
stay as they were, whatever the package is called.
"""

from __future__ import annotations

from dlperf.core.payload import Diagnostics, Frozen, Payload
from dlperf.kinds import calibrate, dataflow, explain, inference, parallel, peak, step, train
from dlperf.kinds.calibrate.options import KernelOptions, KernelOutcome
from dlperf.kinds.dataflow.options import (
    DataflowOutcome,
    LoaderOptions,
    StorageOptions,
    StorageOutcome,
)
from dlperf.kinds.explain.options import ProfileOptions, ProfileOutcome
from dlperf.kinds.inference.options import InferenceOptions, InferenceOutcome
from dlperf.kinds.kind import Kind
from dlperf.kinds.parallel.options import ParallelOptions, ParallelOutcome
from dlperf.kinds.peak.options import KernelRate, Peak, PeakOptions
from dlperf.kinds.step.options import StepOptions, StepOutcome
from dlperf.kinds.train.options import TrainOptions, TrainOutcome

#: kind -> its entry, in report order
KINDS: dict[str, Kind] = {
    "step": step.KIND,
    "peak": peak.KIND,
    "inference": inference.KIND,
    "train": train.KIND,
    "parallel": parallel.KIND,
    "loader": dataflow.LOADER,      # an input pipeline alone
    "storage": dataflow.STORAGE,    # a storage's read bandwidth
    "kernel": calibrate.KIND,       # the performance model's calibration kernels
    "profile": explain.KIND,        # one network's steps under the framework's profiler
}


def report_sections(predictor=None) -> list:
    """Every kind's report sections, in the order of ``KINDS``."""
    return [b for k in KINDS.values() if k.sections for b in k.sections(predictor)]


__all__ = ["KINDS", "DataflowOutcome", "Diagnostics", "Frozen", "InferenceOptions",
           "InferenceOutcome", "KernelOptions", "KernelOutcome", "KernelRate", "Kind",
           "LoaderOptions", "ParallelOptions", "ParallelOutcome",
           "Payload", "Peak", "PeakOptions", "ProfileOptions", "ProfileOutcome",
           "StepOptions", "StepOutcome", "StorageOptions", "StorageOutcome", "TrainOptions",
           "TrainOutcome", "report_sections"]
