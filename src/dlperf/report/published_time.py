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
import statistics
from typing import NamedTuple

from dlperf.core.stats import quantile
from dlperf.perfmodel import catalogue
from dlperf.perfmodel.result import Prediction
from dlperf.perfmodel.scaled import NOTE as SCALED_NOTE

#: what advice says the error stands on
BASIS = ("the error: the catalogue's 90th percentile |error| over the published and "
         "lent-GPU steps of its kind (dlperf validate --published)")


class TimeError(NamedTuple):
    """The catalogue's |error| over one kind of shipped GPU step."""

    median: float
    p90: float
    n: int


def _summary(errors: list[float]) -> TimeError:
    mags = sorted(abs(e) for e in errors)
    return TimeError(statistics.median(mags), quantile(mags, 0.9), len(mags))


@functools.cache
def time_errors() -> dict[tuple[str, bool], TimeError]:
    """(strategy, scaled curves or not) -> the error over the shipped steps of that kind:
    'single' over the one-GPU rows of both sets, 'sync' over the published multi-GPU
    rows."""
    from dlperf.reference import measured_gpu, published_gpu
    from dlperf.report.published import published_cases

    cases = [*published_cases(published_gpu()), *published_cases(measured_gpu())]
    out = {}
    for strategy, rows in (("single", [c for c in cases if c.row.gpus == 1]),
                           ("sync", [c for c in cases if c.row.gpus > 1])):
        if rows:
            out[(strategy, True)] = _summary([c.error for c in rows])
            out[(strategy, False)] = _summary([c.factors_error for c in rows])
    return out


def scaled(p: Prediction) -> bool:
    """Whether ``p`` stands on a calibrated GPU's curves scaled to its device."""
    return any(n.startswith(SCALED_NOTE) for n in p.notes)


def catalogue_error(p: Prediction) -> float | None:
    """The validated error (90th percentile |error|) of a catalogue GPU prediction of
    ``p``'s kind, or None where no shipped step is of that kind: advice's ``ErrorLookup``
    for catalogue hardware."""
    dev = catalogue.devices().get(p.device)
    if dev is None or dev.kind != "gpu":
        return None
    err = time_errors().get((p.strategy, scaled(p)))
    return err.p90 if err else None
