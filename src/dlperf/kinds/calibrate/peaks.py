"""Inside a kernel worker: its framework's peak kernels (``kinds.peak``), timed after the
calibration's shapes at the worker's thread count, each as the peak run a worker of its
own would have made (the same spec, timing and result).

A study's first runs need the machine's peak at their thread counts; measured in workers of
their own, the four kernels at 1 and 2 threads took 38 s of the main job on 2 cores, about
half of it eight framework starts. The calibration that precedes the study has the
framework loaded and the CPUs held already. The peak kernels come after every shape and
after the last speed probe, so they change nothing the calibration measured.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from dlperf.core import environment
from dlperf.core.spec import RunSpec
from dlperf.kinds.peak.rates import DEFAULT_SIZE, KERNELS, kernel_specs

if TYPE_CHECKING:
    from dlperf.backends.base import Backend


def wanted(device: str, precision: str, threads: int) -> bool:
    """Whether a kernel run times its framework's peak kernels: on a CPU at fp32 (the peak
    is fp32's), at no more threads than CPUs (the peak past them is the one at all of them,
    ``engine.runner.peak_threads``)."""
    return device == "cpu" and precision == "fp32" and threads <= len(environment.usable_cpus())


def peak_runs(spec: RunSpec, backend: Backend, base: dict[str, Any]) -> tuple[dict, ...]:
    """The peak runs of ``spec``'s framework at its thread count, as JSON, those that
    measured a rate; one that failed is left to the peak's own worker later."""
    from dlperf.kinds.peak.run import run_peak  # the worker's: times as a step is

    mine = [k for k in KERNELS if k[0] == spec.framework]
    out = []
    for s in kernel_specs(spec.threads, spec.device, DEFAULT_SIZE, environment.packages(),
                          kernels=mine):
        r = run_peak(s, backend, lambda _event: None, {**base, "started_at": time.time()})
        if r.ok:
            out.append(r.model_dump(mode="json"))
    return tuple(out)
