"""The runs that time shapes of a calibration again, once every kernel run has run
(``dlperf.api.calibrate``):
- each shape that took far longer at more threads than at fewer
  (``perfmodel.thread_consistency``): what the second timing does not explain, the
  calibration's fit reads (``plan.local_calibration``);
- every shape of an op that the calibration's runs timed at other speeds
  (``perfmodel.run_speed``: the grid's run and a run scoped to a network, minutes or days
  apart), in one run, so that the op's curve stands on one machine's speed. Which of the
  two runs was off, their shared shapes do not say, and need not: timed again in one
  run, every shape of the op comes from the newest timing, and the runs agree.
"""

from __future__ import annotations

from collections.abc import Sequence

from dlperf.core import environment
from dlperf.core.spec import RunSpec
from dlperf.core.store import Store
from dlperf.kinds.calibrate.options import KernelOptions, KernelPart
from dlperf.kinds.calibrate.plan import MIN_TIME_S, RETIMED_RUN, Stored, load
from dlperf.kinds.peak.rates import versions as library_versions
from dlperf.perfmodel.kernels import MACHINE_OPS, REVISION
from dlperf.perfmodel.thread_consistency import slower_by_configuration

Shapes = dict[str, list[tuple[int, ...]]]


def specs(store: Store, frameworks: Sequence[str], device: str = "cpu",
          precision: str = "fp32", threads: Sequence[int] | None = None) -> list[RunSpec]:
    """Per (framework, thread count) of ``frameworks``: a run that times again its shapes
    slower at more threads than at fewer and not timed again since (``RETIMED_RUN``), and,
    at ``threads`` (every count when None), one that times again every shape of the ops
    its runs disagree on (``KernelOptions.together``); briefly, as the whole grid is, at
    least three calls each."""
    stored = [s for s in load(store, device=device)
              if s.precision == precision and s.framework in frameworks]
    packages = environment.packages()
    out = []
    for key, ops in _slower(stored).items():
        out.append(_spec(key, ops, packages, together=False))
    for s in stored:
        if (threads is None or s.threads in threads) and (ops := _disagreeing(s)):
            out.append(_spec(s.key, ops, packages, together=True))
    return out


def _slower(stored: Sequence[Stored]) -> dict[tuple[str, int, str, str], Shapes]:
    """Per entry, per op, its shapes slower at more threads and not timed again."""
    again = {s.key: s.timed_again for s in stored}
    slower = slower_by_configuration({s.key: s.samples.items for s in stored},
                                     environment.physical_cores())
    todo: dict[tuple[str, int, str, str], Shapes] = {}
    for (fw, dev, prec), shapes in sorted(slower.items()):
        for x in shapes:
            key = (fw, x.threads, dev, prec)
            if (x.op, x.shape) not in again.get(key, {}):
                todo.setdefault(key, {}).setdefault(x.op, []).append(x.shape)
    return dict(sorted(todo.items()))


def _disagreeing(s: Stored) -> Shapes:
    """Per op its runs timed at other speeds (``Stored.run_speeds``), every shape of it."""
    return {op: [x.shape for x in s.samples.of_op(op) if x.world == 1]
            for op in sorted(s.run_speeds) if op not in MACHINE_OPS}


def _spec(key: tuple[str, int, str, str], ops: Shapes, packages: dict[str, str | None],
          together: bool) -> RunSpec:
    fw, threads, dev, prec = key
    o = KernelOptions(parts=tuple(KernelPart(op=op, shapes=tuple(shapes))
                                  for op, shapes in ops.items()),
                      min_time_s=MIN_TIME_S, versions=library_versions(fw, packages),
                      revision=REVISION, together=together)
    return RunSpec(kind="kernel", network=RETIMED_RUN, framework=fw, device=dev,
                   threads=threads, batch_size=1, precision=prec, options=o)
