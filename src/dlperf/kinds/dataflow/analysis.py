"""What a data-flow run's results say: its data-flow figures, the share of the step spent
waiting for data, a loader's rate. Read by the report's section, by advice and by the
command line."""

from __future__ import annotations

import statistics

from dlperf.core.aggregate import ConfigResult
from dlperf.core.spec import RunResult
from dlperf.kinds.dataflow.options import DataflowOutcome
from dlperf.kinds.step.options import StepOutcome
from dlperf.perfmodel.input_pipeline import STALL_FREE_SHARE

#: a stall share below this counts as gone; a time within this of the floor reaches it
#: (the input-pipeline model's stall-free threshold, the same figure)
GONE = STALL_FREE_SHARE


def dataflow_of(result: RunResult) -> DataflowOutcome | None:
    """The data-flow figures of a step run on a pipeline or of a loader run (None for
    others)."""
    o = result.outcome
    if isinstance(o, DataflowOutcome):
        return o
    return o.dataflow if isinstance(o, StepOutcome) else None


def outcomes(row: ConfigResult) -> list[DataflowOutcome]:
    return [o for r in row.ok if (o := dataflow_of(r)) is not None]


def stall_share(row: ConfigResult) -> float | None:
    vals = [o.stall_share for o in outcomes(row)]
    return statistics.median(vals) if vals else None


def loader_rate(row: ConfigResult) -> float | None:
    """Samples/s of a loader run: over the wall time of its timed batches (not the
    batch over the median time, which bursts of batches from several workers inflate)."""
    return median_of([o.loader_samples_per_s for o in outcomes(row)])


def median_of(vals: list[float | None]) -> float | None:
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None
