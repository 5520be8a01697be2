"""Kind "peak": the machine's fp32 peak, the best rate of several libraries' large kernels
at a thread count (``rates``: planning, reuse and the share of peak; ``run``: the
worker's body)."""

from __future__ import annotations

from dlperf.kinds.kind import Kind
from dlperf.kinds.peak.options import PeakOptions


def _run(*args):
    from dlperf.kinds.peak.run import run_peak

    return run_peak(*args)


KIND = Kind(options=PeakOptions, run=_run, memory_limited=False)
