"""Whether the runs of one calibration (a framework at a thread count) timed the same
shapes alike.

A calibration is often more than one run: the whole grid, then the shapes of a network
that ``dlperf calibrate --networks`` or ``dlperf predict`` adds later, each in a worker of
its own, minutes or days apart. A scoped run times the skeleton of the grid beside its
networks' shapes (``network_kernels.scoped_grid``), so two runs share shapes, and those
tell their speeds apart op by op. On a 2-vCPU AMD EPYC guest (2026-11-30) a scoped PyTorch
run nine minutes after the grid's timed the 14 products both timed at a median of 1.42
times the grid's (its memory passes at 0.80) while its speed probe moved 13%; the shapes
it alone timed, a pipeline's micro-batches, then predicted the 4-stage pipelines 19-20%
too slow, and the same day's next calibration, whose runs agreed, 4-14% off. Taking each
run to one speed by the shared shapes was tried and not kept (docs/prediction.md): which
of two runs is the disturbed one, the shapes do not say. So every shape of an op they
disagree on is timed again in one run (``kinds.calibrate.retime``), whose timings replace
both; a disagreement left is reported with the calibration's quality, and its
predictions say so. Framework-free.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from dlperf.perfmodel.kernels import KernelSample

#: the fewest shapes of an op two runs must share for their ratio to be read
MIN_SHARED = 5
#: runs whose shared shapes of an op differ by more than this at the median disagree:
#: the speed probe's own threshold for a machine at another speed (``speed_probe.DRIFT``)
DISAGREE = 0.15


def _key(s: KernelSample) -> tuple:
    return s.op, tuple(s.shape), s.world


def op_ratios(run: Sequence[KernelSample], reference: Sequence[KernelSample]
              ) -> dict[str, float]:
    """Per op, the median of ``run``'s time over ``reference``'s at the shapes both timed,
    where they share at least ``MIN_SHARED``."""
    ref = {_key(s): s.median_s for s in reference}
    by: dict[str, list[float]] = {}
    for s in run:
        if (r := ref.get(_key(s))) and s.median_s > 0:
            by.setdefault(s.op, []).append(s.median_s / r)
    return {op: statistics.median(v) for op, v in by.items() if len(v) >= MIN_SHARED}


def disagreement(runs: Sequence[Sequence[KernelSample]]) -> dict[str, float]:
    """Per op, the ratio furthest from 1 of another run's times to those of the run with
    the most shapes (the first of them where several have as many), over the shapes both
    timed, where it
    lies more than ``DISAGREE`` from 1 (above 1: the other run slower); empty where the
    runs agree or there is one."""
    if len(runs) < 2:
        return {}
    ref = max(range(len(runs)), key=lambda i: (len(runs[i]), -i))
    out: dict[str, float] = {}
    for i, run in enumerate(runs):
        if i == ref:
            continue
        for op, r in op_ratios(run, runs[ref]).items():
            if abs(r - 1) > DISAGREE and abs(r - 1) > abs(out.get(op, 1.0) - 1):
                out[op] = r
    return out
