"""The runs that time again each shape of a calibration that took far longer at more
threads than at fewer (``perfmodel.thread_consistency``), once every kernel run has run
(``dlperf.api.calibrate``); what they do not explain, the calibration's fit reads
(``plan.local_calibration``)."""

from __future__ import annotations

from collections.abc import Sequence

from dlperf.core import environment
from dlperf.core.spec import RunSpec
from dlperf.core.store import Store
from dlperf.kinds.calibrate.options import KernelOptions, KernelPart
from dlperf.kinds.calibrate.plan import MIN_TIME_S, RETIMED_RUN, load
from dlperf.kinds.peak.rates import versions as library_versions
from dlperf.perfmodel.kernels import REVISION
from dlperf.perfmodel.thread_consistency import slower_by_configuration


def specs(store: Store, frameworks: Sequence[str], device: str = "cpu",
          precision: str = "fp32") -> list[RunSpec]:
    """One run per (framework, thread count) of ``frameworks`` that times again its
    shapes slower at more threads than at fewer and not timed again since
    (``RETIMED_RUN``): briefly, as the whole grid is, at least three calls each."""
    stored = load(store, device=device)
    again = {(s.framework, s.threads): s.timed_again for s in stored
             if s.precision == precision}
    slower = slower_by_configuration(
        {s.key: s.samples.items for s in stored
         if s.framework in frameworks and s.precision == precision},
        environment.physical_cores())
    packages = environment.packages()
    out = []
    for (fw, dev, prec), shapes in slower.items():
        todo: dict[int, dict[str, list[tuple[int, ...]]]] = {}
        for x in shapes:
            if (x.op, x.shape) not in again.get((fw, x.threads), {}):
                todo.setdefault(x.threads, {}).setdefault(x.op, []).append(x.shape)
        for t, ops in sorted(todo.items()):
            o = KernelOptions(parts=tuple(KernelPart(op=op, shapes=tuple(shapes))
                                          for op, shapes in ops.items()),
                              min_time_s=MIN_TIME_S, versions=library_versions(fw, packages),
                              revision=REVISION)
            out.append(RunSpec(kind="kernel", network=RETIMED_RUN, framework=fw, device=dev,
                               threads=t, batch_size=1, precision=prec, options=o))
    return out
