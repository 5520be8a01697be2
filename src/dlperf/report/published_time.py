"""The catalogue's time predictions against the GPU steps dlperf ships
(``report.published``: published measurements and steps dlperf measured on a lent GPU):
the error ``dlperf advise`` quotes beside a catalogue GPU's predicted time, as
``dlperf validate --published`` shows it. Nothing is fitted on these rows.

A prediction's error is that of its kind: one GPU (the strategy 'single') or synchronous
data parallelism over several (the published 2, 4 and 8 A100 rows), each by what the
prediction stands on (the reference GPU's curves scaled to the entry, or the datasheet
roofline with public efficiency factors); the other strategies have no published steps,
and their error stays "not validated yet".
"""

from __future__ import annotations

import functools

from dlperf.core.stats import quantile
from dlperf.perfmodel import catalogue
from dlperf.perfmodel.result import Prediction
from dlperf.perfmodel.scaled import NOTE as SCALED_NOTE

#: what advice says the error stands on
BASIS = ("the error: the catalogue's 90th percentile |error| over the published and "
         "lent-GPU steps of its kind (dlperf validate --published)")


def _p90(errors: list[float]) -> float:
    return quantile(sorted(abs(e) for e in errors), 0.9)


@functools.cache
def time_errors() -> dict[tuple[str, bool], float]:
    """(strategy, scaled curves or not) -> the 90th percentile |error| over the shipped
    steps of that kind: 'single' over the one-GPU rows of both sets, 'sync' over the
    published multi-GPU rows."""
    from dlperf.reference import measured_gpu, published_gpu
    from dlperf.report.published import published_cases

    cases = [*published_cases(published_gpu()), *published_cases(measured_gpu())]
    out = {}
    for strategy, rows in (("single", [c for c in cases if c.row.gpus == 1]),
                           ("sync", [c for c in cases if c.row.gpus > 1])):
        if rows:
            out[(strategy, True)] = _p90([c.error for c in rows])
            out[(strategy, False)] = _p90([c.factors_error for c in rows])
    return out


def scaled(p: Prediction) -> bool:
    """Whether ``p`` stands on a calibrated GPU's curves scaled to its device."""
    return any(n.startswith(SCALED_NOTE) for n in p.notes)


def catalogue_error(p: Prediction) -> float | None:
    """The validated error (90th percentile |error|) of a catalogue GPU prediction of
    ``p``'s kind, or None where no shipped step is of that kind: advice's ``ErrorLookup``
    for catalogue hardware."""
    if catalogue.gpu(p.device) is None:
        return None
    return time_errors().get((p.strategy, scaled(p)))
