"""The input-pipeline model against every step measured here on a pipeline: the predicted
stall share beside the measured one (in points), the time per mini-batch, and the
smallest stall-free loader-worker count beside the one the runs show. The step on data
in place is the kernel model's (``kinds.calibrate.prediction``), the loader's cost this
machine's loader calibration (``kinds.dataflow.calibration``), whose runs are never the
ones compared. Imports no framework.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

from dlperf.core import environment
from dlperf.core.aggregate import ConfigResult, aggregate
from dlperf.core.errors import UsageError
from dlperf.core.store import Store
from dlperf.inputs.options import InputOptions
from dlperf.kinds.calibrate.prediction import predict_for_spec, why_not
from dlperf.kinds.calibrate.validate import kept_its_cores, measured, p90, undisturbed_s
from dlperf.kinds.dataflow import calibration
from dlperf.kinds.dataflow.analysis import stall_share
from dlperf.kinds.dataflow.plan import has_pipeline, input_of
from dlperf.kinds.dataflow.prediction import measured_storage, with_input
from dlperf.perfmodel.input_pipeline import STALL_FREE_SHARE, InputPrediction
from dlperf.perfmodel.machine_fits import MachineFits
from dlperf.perfmodel.result import Prediction

#: targets (issue 32): stall share within 5 points at the median; the smallest stall-free
#: worker count within one of the measured
STALL_POINTS_TARGET = 5.0
WORKERS_TARGET = 1


@dataclass(frozen=True)
class StallCase:
    row: ConfigResult
    prediction: Prediction
    measured_share: float
    measured_s: float
    #: the input model alone: the same pipeline on the step measured here on synthetic
    #: data (the floor) instead of the kernel model's step (None: no floor measured)
    on_floor: InputPrediction | None = None

    @property
    def points(self) -> float:
        """Predicted minus measured stall share, in percentage points."""
        assert self.prediction.input is not None
        return (self.prediction.input.stall_share - self.measured_share) * 100

    @property
    def floor_points(self) -> float | None:
        """The same with the measured floor as the step (the input model's own error)."""
        if self.on_floor is None:
            return None
        return (self.on_floor.stall_share - self.measured_share) * 100

    @property
    def stalled(self) -> bool:
        """A case where the pipeline matters: either side's stall share above the
        stall-free threshold (the others agree on nearly nothing)."""
        assert self.prediction.input is not None
        return max(self.measured_share, self.prediction.input.stall_share) > STALL_FREE_SHARE

    @property
    def error(self) -> float:
        return self.prediction.time_s / self.measured_s - 1


@dataclass(frozen=True)
class WorkerCount:
    """One pipeline measured at several loader-worker counts: the smallest whose measured
    stall share is at most STALL_FREE_SHARE, and the model's."""

    label: str
    measured: dict[int, float]  # workers -> measured stall share
    smallest_measured: int | None  # None: none of the counts measured
    predicted: int | None

    @property
    def off_by(self) -> int | None:
        if self.predicted is None or self.smallest_measured is None:
            return None
        return self.predicted - self.smallest_measured


def cases(store: Store, cal: MachineFits, *, networks=(), frameworks=()
          ) -> tuple[list[StallCase], list[tuple[ConfigResult, str]]]:
    """Every step measured here on an input pipeline, predicted; and those left out, with
    the reason."""
    costs = calibration.costs(store)
    cores = len(environment.usable_cpus())
    storage = measured_storage(store)
    rows = aggregate(store.results(kind="step", status="ok", network=list(networks) or None,
                                   framework=list(frameworks) or None,
                                   machine_id=environment.machine_id()))
    out, skipped = [], []
    for row in rows:
        spec = row.spec
        if not has_pipeline(spec) or not row.median_s:
            continue
        share = stall_share(row)
        plain = spec.model_copy(update={"options": type(spec.options)()})
        why = why_not(plain, cal)
        if why is None and share is None:
            why = "no stall was recorded"
        p = predict_for_spec(plain, cal) if why is None else None
        if p is None:
            skipped.append((row, why or "the model cannot predict it"))
            continue
        kw = dict(framework=spec.framework, params=spec.params, threads=spec.threads,
                  cores=cores, storage=storage)
        try:
            on_model = with_input(p, input_of(spec), costs, **kw)
        except UsageError as e:
            skipped.append((row, str(e)))
            continue
        floor = floor_s(measured(store, plain))
        on_floor = with_input(p.model_copy(update={"time_s": floor}), input_of(spec),
                              costs, **kw).input if floor else None
        out.append(StallCase(row, on_model, share, row.median_s,  # type: ignore[arg-type]
                             on_floor))
    return out, skipped


#: a floor whose busiest process kept less than this share of its threads busy lost its
#: cores to other work: it would put the step too slow, and is not used
FLOOR_BUSY = 0.8


def floor_s(row: ConfigResult | None) -> float | None:
    """The synthetic-data step of ``row`` from its least disturbed processes, or None
    when none kept its cores busy (judged on the CPU accounting, never on the time)."""
    if row is None or not row.median_s or not kept_its_cores(row, FLOOR_BUSY):
        return None
    return undisturbed_s(row)


def _pipeline_key(c: StallCase) -> tuple:
    s, o = c.row.spec, input_of(c.row.spec)
    rest = o.model_dump(exclude={"loader_workers"})
    return (s.network, s.size, s.framework, s.threads, s.batch_size, s.device,
            tuple(sorted(rest.items())))


def worker_counts(found: list[StallCase]) -> list[WorkerCount]:
    """The pipelines measured at two or more loader-worker counts, from 0: the smallest
    stall-free count measured and predicted."""
    out = []
    for _, group in itertools.groupby(sorted(found, key=_pipeline_key), key=_pipeline_key):
        g = sorted(group, key=lambda c: input_of(c.row.spec).loader_workers)
        counts = {input_of(c.row.spec).loader_workers: c.measured_share for c in g}
        if len(counts) < 2 or 0 not in counts:
            continue
        free = [w for w, share in sorted(counts.items()) if share <= STALL_FREE_SHARE]
        first = g[0].row.spec
        out.append(WorkerCount(
            label=_label(first, input_of(first)), measured=counts,
            smallest_measured=free[0] if free else None,
            predicted=_predicted_free(g)))
    return out


def _predicted_free(group: list[StallCase]) -> int | None:
    """The smallest count of the group whose predicted stall share is at most
    STALL_FREE_SHARE (the measured side's rule), else the model's own count beyond them."""
    for c in group:
        ip = c.prediction.input
        if ip is not None and ip.stall_share <= STALL_FREE_SHARE:
            return ip.workers
    last = group[-1].prediction.input
    return last.stall_free_workers if last is not None else None


def _label(spec, opts: InputOptions) -> str:
    rest = opts.model_copy(update={"loader_workers": 0}).describe().replace(" w0", "")
    return (f"{spec.network} {spec.framework} x{spec.threads} b{spec.batch_size} {rest}")


def summarize(cases: list[StallCase], counts: list[WorkerCount]) -> dict:
    """The figures the targets are set on: over every case, over the stalled ones (where
    either side's stall share passes the stall-free threshold: the rest agree on nearly
    nothing), and with the measured floor as the step (the input model alone)."""
    points = [abs(c.points) for c in cases]
    stalled = [abs(c.points) for c in cases if c.stalled]
    floor = [abs(c.floor_points) for c in cases if c.stalled and c.floor_points is not None]
    off = [w.off_by for w in counts if w.off_by is not None]
    return {
        "n": len(cases), "median_abs_points": statistics.median(points),
        "p90_abs_points": p90(points),
        "stalled": len(stalled),
        "stalled_median_abs_points": statistics.median(stalled) if stalled else None,
        "stalled_on_floor": len(floor),
        "stalled_on_floor_median_abs_points": statistics.median(floor) if floor else None,
        "median_abs_time_error": statistics.median(abs(c.error) for c in cases),
        "worker_counts": len(counts), "worker_counts_within_one": sum(
            1 for x in off if abs(x) <= 1), "worker_counts_compared": len(off)}
