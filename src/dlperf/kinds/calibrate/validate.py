"""The model against the store: every measured step and parallel configuration of this
machine with its prediction and error, the error by network, framework, threads, batch
size and strategy, and the worst cases with the term that dominates them.

Two models are compared. ``kernels``: the kernel curves alone, fitted on no network at
all. ``lono`` (leave one network out): the same, times per-framework factors on its
compute, memory and overhead terms (``perfmodel.correct``) fitted on the measurements of
every other network, never the one predicted, in the form (none, one factor, one per
term) that carries over best between those other networks (``correct.choose_factors``);
``lofo`` leaves the whole family out (fcn5 and fcn8 together, lstm32 and lstm64
together), which is stricter. ``untimed``:
each network of a calibration scoped to networks predicted with its own layer shapes held
out of it (``untimed_cases``), as a network the calibration never timed is predicted.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from dlperf import workloads
from dlperf.core import environment, speed_probe
from dlperf.core.aggregate import ConfigResult, aggregate
from dlperf.core.spec import RunSpec
from dlperf.core.store import Store
from dlperf.inputs.options import InputOptions
from dlperf.kinds.calibrate.plan import load, runtime_baselines, worker_runtimes
from dlperf.kinds.calibrate.plan import local_calibration as plan_calibration
from dlperf.kinds.calibrate.prediction import predict_for_spec, why_not
from dlperf.kinds.parallel.options import THROUGH_A_SERVER
from dlperf.perfmodel import catalogue
from dlperf.perfmodel.correct import Factors, choose_factors
from dlperf.perfmodel.fit import LocalFit, grid_misses
from dlperf.perfmodel.machine_fits import (
    MachineFits,
    beyond_cores_text,
    trains_measured,
    worker_baseline,
)
from dlperf.perfmodel.memory import MemoryBreakdown
from dlperf.perfmodel.result import MemoryMargin, Prediction
from dlperf.workloads.base import Layer

MODES = ("kernels", "lono", "lofo", "untimed")
#: a process whose threads were kept busy less than this share of the row's busiest
#: process lost its cores to other work: its time is not this configuration's
UNDISTURBED = 0.9
GROUPS = ("network", "framework", "threads", "batch", "strategy")
TERM_NAMES = {"compute_s": "compute-bound products", "memory_s": "memory-bound passes",
              "overhead_s": "per-op overheads", "communication_s": "communication",
              "bubble_s": "pipeline bubble", "straggler_s": "straggler", "input_s": "input"}


#: the link a GPU of this machine copies its batches over, for the input pipeline's
#: host-to-device copy (the catalogue's PCIe 4.0 x16)
LOCAL_GPU_LINK = "pcie4x16"


def _identity(spec: RunSpec) -> dict:
    """What must agree for a measurement to be of the same configuration: the identity
    without the measurement settings."""
    ident = spec.identity()
    ident.pop("measurement", None)
    return ident


def measured(store: Store, spec: RunSpec) -> ConfigResult | None:
    """The stored measurement of ``spec``'s configuration on this machine (any settings;
    the most recent where several were measured), or None."""
    rows = aggregate(store.results(kind=spec.kind, status="ok", network=spec.network,
                                   framework=spec.framework, threads=spec.threads,
                                   batch_size=spec.batch_size, device=spec.device,
                                   machine_id=environment.machine_id()))
    same = [r for r in rows if r.median_s and _identity(r.spec) == _identity(spec)]
    return max(same, key=lambda r: max(x.finished_at or 0 for x in r.ok), default=None)


def undisturbed_s(row: ConfigResult) -> float | None:
    """The row's time per mini-batch from its least disturbed processes: where the row has
    several, those whose CPU time per second (``Metrics.cpu_util``) is within
    ``UNDISTURBED`` of the busiest's; their median. A process that lost its cores to other
    work shows less CPU time, whatever its speed, so the choice never looks at the time."""
    ok = [r for r in row.ok if r.metrics]
    utils = [r.metrics.cpu_util for r in ok if r.metrics.cpu_util]  # type: ignore[union-attr]
    if len(ok) < 2 or len(utils) < len(ok):
        return row.median_s
    best = max(utils)
    keep = [r.metrics.median_s for r in ok if r.metrics.cpu_util >= UNDISTURBED * best]  # type: ignore[union-attr,operator]
    return statistics.median(keep)


def busy_share(row: ConfigResult) -> float | None:
    """CPU seconds per second per thread of the row's busiest process (1: every thread
    busy all the time; well below: the cores were taken, or the framework idles)."""
    utils = [r.metrics.cpu_util for r in row.ok if r.metrics and r.metrics.cpu_util]
    return max(utils) / row.spec.threads if utils else None


def kept_its_cores(row: ConfigResult, busy: float) -> bool:
    """Whether the row's busiest process kept at least ``busy`` of its threads busy (a
    tenth less with several threads, whose framework idles some between ops); True where
    the CPU time was not recorded. Judged on the CPU accounting, never on the time."""
    share = busy_share(row)
    return share is None or share >= busy * (1 if row.spec.threads == 1 else 0.9)


def group_key(spec: RunSpec, group: str, strategy: str = "single") -> str:
    """The value of ``group`` (network, framework, threads, batch, strategy, precision,
    device) a case is summarised under."""
    return {"network": spec.network if spec.size in ("full", "") else
            f"{spec.network}[{spec.size}]", "framework": framework(spec),
            "threads": str(spec.threads), "batch": str(spec.batch_size),
            "strategy": strategy, "precision": spec.precision, "device": spec.device}[group]


@dataclass(frozen=True)
class Case:
    """One measured configuration with its prediction."""

    row: ConfigResult
    measured_s: float
    prediction: Prediction
    corrected_s: float | None = None  # with factors fitted on other networks
    factors: Factors | None = None
    #: per part of the machine's speed probe, the measurement's time over the
    #: calibration's (``core.speed_probe.ratios``; empty: either was not probed)
    speed_ratio: dict[str, float] = field(default_factory=dict)
    #: whether the calibration that predicts it timed its network's layer shapes
    #: (``shapes_timed``; False: a skeleton of the grid stood in)
    timed: bool = True
    #: the kinds of its layers a whole grid's curves are known to miss, its own shapes
    #: not timed, and the command that times them (``step_grid_missed``; None: none)
    missed: GridMiss | None = None

    @property
    def drift(self) -> tuple[str, float] | None:
        """The probe's part that moved most from the calibration to the measurement, and
        by how much (``core.speed_probe.drift``)."""
        return speed_probe.largest_move(self.speed_ratio)

    @property
    def drifted(self) -> bool:
        """Measured while the machine ran at another speed than when it was calibrated:
        the error is partly the machine's, not the model's."""
        return speed_probe.moved(self.drift)

    @property
    def at_measured_speed_error(self) -> float | None:
        """The kernels-alone error with the prediction taken to the machine's speed when
        the step ran (``core.speed_probe.at_speed``: nothing fitted, the probe's ratios
        alone); None where not probed at both ends."""
        b = self.prediction.breakdown
        t = self.prediction.time_s
        at = speed_probe.at_speed(b.compute_s + b.overhead_s, b.memory_s,
                                  t - b.compute_s - b.overhead_s - b.memory_s,
                                  self.speed_ratio)
        return None if at is None else at / self.measured_s - 1

    @property
    def predicted_s(self) -> float:
        return self.prediction.time_s if self.corrected_s is None else self.corrected_s

    @property
    def error(self) -> float:
        """Predicted over measured, less 1: +0.2 predicts 20% too slow."""
        return self.predicted_s / self.measured_s - 1

    def key(self, group: str) -> str:
        s = self.row.spec
        return group_key(s, group, self.prediction.strategy if s.kind == "parallel"
                         else "single")


def cases(store: Store, calibration: MachineFits, *,
          kinds: Sequence[str] = ("step", "parallel"), networks: Sequence[str] = ()
          ) -> tuple[list[Case], list[tuple[ConfigResult, str]]]:
    """Every measured configuration of this machine (of ``networks``, all when empty)
    that the model predicts, and the others with the reason they are left out."""
    mine = environment.machine_id()
    rows = aggregate([r for k in kinds for r in store.results(kind=k, status="ok",
                                                              machine_id=mine)
                      if not networks or r.spec.network in networks])
    out, skipped = [], []
    for row in rows:
        if not row.median_s:
            continue
        if (why := why_not(row.spec, calibration)) is not None:
            skipped.append((row, why))
            continue
        p = predict_for_spec(row.spec, calibration)
        if p is None:
            skipped.append((row, "the model cannot predict this workload"))
        else:
            out.append(Case(row, undisturbed_s(row) or row.median_s, p,
                            speed_ratio=speed_ratios(row, calibration),
                            timed=step_shapes_timed(calibration, row.spec),
                            missed=step_grid_missed(calibration, row.spec)))
    return out, skipped


def speed_ratios(row: ConfigResult, calibration: MachineFits) -> dict[str, float]:
    """Per part of the machine's speed probe, ``row``'s processes' time (the median of
    their probes) over the calibration's that predicts it (``core.speed_probe.ratios``)."""
    s = row.spec
    fit = calibration.find(framework(s), s.threads, s.device, s.precision)
    probes = [r.metrics.speed_probe for r in row.ok if r.metrics and r.metrics.speed_probe]
    return speed_probe.ratios(speed_probe.typical(probes), fit.speed_probe) if fit else {}


def machine_drift(row: ConfigResult, calibration: MachineFits) -> tuple[str, float] | None:
    """How far the machine's speed probe moved between the calibration that predicts
    ``row`` and ``row``'s own processes (``core.speed_probe.drift``)."""
    return speed_probe.largest_move(speed_ratios(row, calibration))


def catalogue_cases(store: Store, device: str, *, machine_id: str | None = None
                    ) -> tuple[list[Case], list[tuple[ConfigResult, str]]]:
    """Every single-device step measured on ``machine_id`` (this machine by default; 'all'
    for every machine in the store) on a device of the catalogue entry's kind, predicted
    from the catalogue entry alone (as ``dlperf predict`` does: a GPU from the reference
    GPU's curves scaled to its datasheet, a CPU from its datasheet and the public
    efficiency factors; no calibration of this machine): how far to trust the model for
    hardware that was not calibrated, on hardware that was measured."""
    from dlperf.core.errors import UsageError
    from dlperf.perfmodel import catalogue, predict

    dev = catalogue.device(device)
    where = {} if machine_id == "all" else {"machine_id": machine_id or environment.machine_id()}
    rows = aggregate(store.results(kind="step", status="ok", device=dev.kind, **where))
    out, skipped = [], []
    for row in rows:
        s = row.spec
        if not row.median_s:
            continue
        if s.options.model_dump(exclude_defaults=True):
            skipped.append((row, "the model knows no input pipeline"))
            continue
        try:
            p = predict(s.network, device=dev.name, size=s.size, params=dict(s.params),
                        batch_size=s.batch_size, precision=s.precision)
        except UsageError as e:
            skipped.append((row, str(e)))
            continue
        out.append(Case(row, undisturbed_s(row) or row.median_s, p))
    return out, skipped


@dataclass(frozen=True)
class MemoryCase:
    """One measured configuration's peak memory beside the memory model's: the process's
    peak resident memory on a CPU, the allocator's peak on a GPU."""

    row: ConfigResult
    measured_bytes: float
    predicted: MemoryBreakdown
    #: the files' pages the run's process held beyond those its calibration's did (the
    #: libraries', ``environment.file_resident_bytes``); None where either is not known
    file_drift: float | None = None

    @property
    def error(self) -> float:
        """Predicted over measured, less 1: +0.1 predicts 10% too much."""
        return self.predicted.total / self.measured_bytes - 1

    @property
    def drifted(self) -> bool:
        """Whether the page cache's state moved the run's files' pages by more than
        ``FILE_DRIFT`` of its peak from the calibration's."""
        return self.file_drift is not None and \
            abs(self.file_drift) > FILE_DRIFT * self.measured_bytes

    @property
    def own_pages_error(self) -> float | None:
        """The error with the run's own files' pages in the baseline in place of its
        calibration's (None where either is not known): the network's and the framework's
        memory alone, the page cache's state set aside."""
        if self.file_drift is None:
            return None
        return (self.predicted.total + self.file_drift) / self.measured_bytes - 1

    def key(self, group: str) -> str:
        return group_key(self.row.spec, group)


#: the share of a run's peak by which its files' pages may differ from its calibration's
#: before the run is said to be measured in another state of the page cache: under half
#: the memory model's 5% target. A library installed moments before maps more of its
#: files than once its pages were read back (PyTorch at import: 133 MiB against 75;
#: docs/measurement.md), a step's peak moving by as much
FILE_DRIFT = 0.02


#: the fewest measured steps of one framework whose error is that framework's margin
MARGIN_CASES = 5


def memory_margins(cases: Sequence[MemoryCase]) -> dict[str | None, tuple[float, int]]:
    """The memory model's 90th-percentile |error| over ``cases`` and their number: per
    framework with at least ``MARGIN_CASES`` of them, and over all (key None). A batch
    chosen to fit leaves it as margin: the step time's advice quotes the same percentile,
    and a framework's peak can sit well above the median's (TensorFlow's allocator: one
    process of a configuration at 725 MiB in use, the next at 944)."""
    by: dict[str | None, list[float]] = {None: [abs(c.error) for c in cases]}
    for c in cases:
        by.setdefault(framework(c.row.spec), []).append(abs(c.error))
    return {fw: (p90(errs), len(errs)) for fw, errs in by.items()
            if errs and (fw is None or len(errs) >= MARGIN_CASES)}


def margin_for(margins: Mapping[str | None, tuple[float, int]] | None,
               fw: str | None) -> MemoryMargin | None:
    """The margin a batch of framework ``fw`` chosen to fit leaves (``memory_margins``):
    that framework's error where it has enough steps, else all frameworks'; None where no
    step was measured."""
    if not margins:
        return None
    own = fw is not None and fw in margins
    if not own and None not in margins:
        return None
    error, n = margins[fw] if own else margins[None]
    steps = f"{n} {fw} steps" if own else f"{n} steps of all frameworks"
    return MemoryMargin(error=error, basis=f"the memory model's 90th percentile |error| over "
                        f"the {steps} measured here (dlperf validate --memory)")


def device_margins(store: Store, device: str = "cpu",
                   runtimes: dict[tuple[str, ...], float] | None = None
                   ) -> dict[str | None, tuple[float, int]] | None:
    """``memory_margins`` over the runs measured on this machine's ``device`` (None: none
    there), each predicted with the calibrated runtimes (``memory_cases``; ``runtimes``:
    ``plan.runtime_baselines``, read here where not given)."""
    if runtimes is None:
        runtimes = runtime_baselines(store)
    # the margin is the error as predicted: no run's files' pages are read for it
    cases = [c for c in memory_cases(store, runtimes, workers=worker_runtimes(store),
                                     files={})[0]
             if c.row.spec.device == device]
    return memory_margins(cases) if cases else None


def memory_cases(store: Store, baselines: dict[tuple[str, ...], float], *,
                 networks: Sequence[str] = (), frameworks: Sequence[str] = (),
                 workers: dict[tuple[str, str, str], float] | None = None,
                 files: dict[tuple[str, str], float] | None = None
                 ) -> tuple[list[MemoryCase], list[tuple[ConfigResult, str]]]:
    """Every step and data-parallel run measured on this machine (of ``networks`` and
    ``frameworks``, all when empty) with its predicted peak memory per process
    (``perfmodel.memory``; the framework's runtime baseline from the calibration,
    ``plan.runtime_baselines``, and a parallel worker's, ``plan.worker_runtimes``, where
    given: never from the run itself), and the runs left out with why. A step on a CPU
    carries how far its files' pages moved from the calibration's (``files``:
    ``plan.runtime_file_pages``, read from the store where not given)."""
    from dlperf.kinds.calibrate.plan import runtime_file_pages
    from dlperf.kinds.dataflow.plan import has_pipeline

    if files is None:
        files = runtime_file_pages(store)

    rows = [*aggregate(store.results(kind="step", status="ok",
                                     machine_id=environment.machine_id())),
            *aggregate(store.results(kind="parallel", status="ok",
                                     machine_id=environment.machine_id()))]
    out, skipped = [], []
    for row in rows:
        s = row.spec
        if (networks and s.network not in networks) or \
                (frameworks and framework(s) not in frameworks):
            continue
        # a step on a GPU: its allocator's peak; else (and a parallel run's worker): resident
        gpu_step = s.kind == "step" and s.device == "gpu"
        measured = row.device_peak_bytes if gpu_step else row.peak_rss_bytes
        if not measured:
            continue
        if has_pipeline(s):
            skipped.append((row, "on an input pipeline (its loader's memory is not modelled)"))
            continue
        strategy = getattr(s.options, "strategy", None) if s.kind == "parallel" else None
        baseline = 0.0 if s.device == "gpu" else worker_baseline(
            framework(s), s.device, strategy, baselines, workers or {}, s.network,
            getattr(s.options, "workers", None) if strategy else None)
        if baseline is None:
            skipped.append((row, f"{framework(s)}'s runtime baseline is not calibrated here "
                                 f"(dlperf calibrate --frameworks {framework(s)})"))
            continue
        got = predicted_memory(s, baseline)
        if isinstance(got, str):
            skipped.append((row, got))
            continue
        own, calibrated = row.file_rss_bytes, files.get((framework(s), s.device))
        drift = own - calibrated if s.kind == "step" and not gpu_step and own and \
            calibrated else None
        out.append(MemoryCase(row, float(measured), got, drift))
    return out, skipped


def predicted_memory(spec: RunSpec, baseline: float) -> MemoryBreakdown | str:
    """The predicted peak of a step (``perfmodel.memory.step_memory``) or of a data-parallel
    run's worker (``worker_memory``), or why it is not predicted."""
    from dlperf.perfmodel.memory import step_memory

    if spec.kind == "parallel":
        return worker_memory(spec, baseline)
    _, _, cfg = workloads.resolve(spec.network, spec.size, dict(spec.params))
    return step_memory(cfg.layers(), spec.batch_size, spec.precision, baseline=baseline,
                       on_device=spec.device == "gpu", framework=spec.framework)


def worker_memory(spec: RunSpec, baseline: float) -> MemoryBreakdown | str:
    """The predicted peak of a parallel run's fullest process (``perfmodel.memory``: DDP's
    buckets for sync and a group's all-reduce, the shards of fsdp, a pipeline's stage,
    the parameter server's share on rank 0 under async and mixed), or why it is not
    predicted."""
    from dlperf.kinds.parallel.options import ParallelOptions
    from dlperf.perfmodel.memory import worker_step_memory

    o = spec.options
    assert isinstance(o, ParallelOptions)
    if o.strategy not in ("sync", "fsdp", "pipeline", "async", "mixed"):
        return f"strategy '{o.strategy}': its memory is not validated yet"
    if o.servers or o.push_every != 1:
        return ("a parameter server on ranks of its own, or pushes every few steps: its "
                "memory is not validated yet")
    if o.data:
        return "a training run on real data (its data set's memory is not modelled)"
    _, _, cfg = workloads.resolve(spec.network, spec.size, dict(spec.params))
    if o.strategy == "pipeline":
        return stage_memory(cfg.layers(), spec.batch_size, spec.precision, o.workers,
                            o.micro_batches, baseline)
    group = o.workers // o.groups if o.strategy == "mixed" and o.groups else None
    return worker_step_memory(cfg.layers(), spec.batch_size // o.workers, spec.precision,
                              o.strategy, o.workers, group, baseline=baseline)


def stage_memory(layers: list[Layer], batch: int, precision: str, stages: int,
                 micro_batches: int, baseline: float) -> MemoryBreakdown:
    """The peak of a GPipe pipeline's fullest stage as ``dlperf predict`` gives it: the
    stages cut as ``perfmodel.partition.pipeline_stages`` cuts them, each keeping every
    micro-batch's activations of its layers (the whole batch's) and adding its
    micro-batches' gradients into one (``perfmodel.memory.accumulated``)."""
    from dlperf.perfmodel.memory import accumulated, step_memory
    from dlperf.perfmodel.partition import pipeline_stages

    parts = [[layers[i] for i in idx] for idx in pipeline_stages(layers, stages)]
    return max((accumulated(step_memory(part, batch, precision, baseline=baseline), part,
                            micro_batches) for part in parts), key=lambda m: m.total)


def case_label(spec: RunSpec) -> str:
    """The spec's label and what else tells two measured configurations apart in a table
    of cases: the workload's parameters ('side=128') and settings other than the
    defaults ('quick settings')."""
    from dlperf.core.settings import settings_name

    extra = [f"{k}={v}" for k, v in sorted(spec.params.items())]
    name = settings_name(spec.measurement)
    if name != "default":
        extra.append(f"{name} settings")
    return spec.label() + (f" ({', '.join(extra)})" if extra else "")


def family(network: str) -> str:
    return workloads.WORKLOADS[network].family if network in workloads.WORKLOADS else network


def corrected(all_cases: Sequence[Case], mode: str) -> list[Case]:
    """``mode`` 'kernels': the cases as they are. 'lono'/'lofo': each single-device case
    corrected by its framework's factors fitted on the single-device cases of the other
    networks (families), never its own, in the form chosen on those alone
    (``correct.choose_factors``)."""
    if mode not in ("lono", "lofo"):  # the model as it is
        return list(all_cases)
    hold: Callable[[Case], str] = ((lambda c: c.row.spec.network) if mode == "lono"
                                   else (lambda c: family(c.row.spec.network)))
    single = [c for c in all_cases if c.row.spec.kind == "step"]
    # one choice and fit per framework and network (family) held out, whose cases share it
    fitted: dict[tuple[str, str], Factors] = {}
    out = []
    for c in all_cases:
        if c.row.spec.kind != "step":
            out.append(c)
            continue
        key = (c.row.spec.framework, hold(c))
        if key not in fitted:
            train = [x for x in single if x.row.spec.framework == key[0] and hold(x) != key[1]]
            fitted[key] = choose_factors([(x.prediction.breakdown, x.measured_s) for x in train],
                                         [x.row.spec.network for x in train])
        f = fitted[key]
        out.append(replace(c, corrected_s=f.apply(c.prediction.breakdown), factors=f))
    return out


def p90(values: Sequence[float]) -> float:
    return float(np.percentile(np.asarray(values, float), 90)) if values else float("nan")


@dataclass(frozen=True)
class Summary:
    group: str
    value: str
    n: int
    median_abs: float
    p90_abs: float
    median_signed: float


def summarize(cs: Sequence[Case | MemoryCase], group: str | None = None) -> list[Summary]:
    """Median and 90th percentile of the absolute error, per value of ``group`` (all
    cases together when None)."""
    keys: dict[str, list[Case]] = {}
    for c in cs:
        keys.setdefault(c.key(group) if group else "all", []).append(c)
    return [Summary(group or "all", k, len(v), statistics.median(abs(c.error) for c in v),
                    p90([abs(c.error) for c in v]), statistics.median(c.error for c in v))
            for k, v in keys.items()]


def drift_line(cs: Sequence[Case]) -> str | None:
    """One line on the machine's own speed: how many cases were measured while the speed
    probe was more than ``speed_probe.DRIFT`` off the calibration's, and the error of the
    others; None where no case was probed at both ends."""
    probed = [c for c in cs if c.drift is not None]
    if not probed:
        return None
    moved = [c for c in probed if c.drifted]
    steady = [c for c in probed if not c.drifted]
    text = (f"machine speed: {len(moved)} of {len(probed)} probed configurations measured "
            f"while the speed probe was more than {speed_probe.DRIFT:.0%} off the "
            f"calibration's")
    if moved:
        far = max(moved, key=lambda c: abs(c.drift[1]))  # type: ignore[index]
        text += f" (at most: {speed_probe.describe(far.drift)})"  # type: ignore[arg-type]
    if moved and steady:
        (s,) = summarize(steady)
        text += (f"; the other {s.n}: median |error| {s.median_abs:.1%}, p90 "
                 f"{s.p90_abs:.1%}")
    if moved:
        text += "; calibrate again ('dlperf calibrate --force') and measure them at one speed"
    return text


def file_pages_line(cs: Sequence[MemoryCase]) -> str | None:
    """One line on the page cache's state: how many runs' processes held their libraries'
    files resident by more than ``FILE_DRIFT`` of their peak apart from the calibration's,
    the error of the others, and of all with each run's own files' pages in the baseline;
    None where no run recorded them beside its calibration."""
    known = [c for c in cs if c.file_drift is not None]
    if not known:
        return None
    moved = [c for c in known if c.drifted]
    text = (f"library pages: {len(moved)} of {len(known)} runs held their files' pages "
            f"resident more than {FILE_DRIFT:.0%} of their peak apart from the "
            "calibration's processes")
    if moved:
        far = max(moved, key=lambda c: abs(c.file_drift))  # type: ignore[arg-type]
        text += (f" (at most {far.file_drift / 2**20:+.0f} MiB: the page cache's state, a "  # type: ignore[operator]
                 "library installed or written moments before mapping more of its files)")
        if steady := [c for c in known if not c.drifted]:
            (s,) = summarize(steady)
            text += f"; the other {s.n}: median |error| {s.median_abs:.1%}, p90 {s.p90_abs:.1%}"
    own = sorted(abs(e) for c in known if (e := c.own_pages_error) is not None)
    return text + (f"; with each run's own files' pages in the baseline: median |error| "
                   f"{statistics.median(own):.1%}, p90 {p90(own):.1%} (n={len(own)})")


def at_speed_line(cs: Sequence[Case]) -> str | None:
    """One line: the kernels-alone error with each prediction taken to the machine's
    speed when its step ran (``Case.at_measured_speed_error``), beside the error as
    predicted, over the same cases; None where none was probed at both ends (or the
    cases are corrected by fitted factors, which already absorb some of the speed)."""
    both = [(c.error, e) for c in cs
            if c.corrected_s is None and (e := c.at_measured_speed_error) is not None]
    if not both:
        return None
    as_is = sorted(abs(a) for a, _ in both)
    at = sorted(abs(b) for _, b in both)
    return (f"at each step's own machine speed (the compute and per-op terms scaled by the "
            f"speed probe's compute ratio, the memory passes by its memory ratio; nothing "
            f"fitted): median |error| {statistics.median(at):.1%}, p90 {p90(at):.1%}, "
            f"against {statistics.median(as_is):.1%} and {p90(as_is):.1%} as predicted "
            f"(n={len(both)})")


def worst(cs: Sequence[Case], n: int = 5) -> list[Case]:
    return sorted(cs, key=lambda c: abs(c.error), reverse=True)[:n]


def dominant(p: Prediction) -> tuple[str, float]:
    """The breakdown term with the largest share of the predicted time."""
    b = p.breakdown.model_dump()
    term = max(b, key=lambda k: b[k])
    return term, b[term] / p.time_s if p.time_s else 0.0


def explain(c: Case) -> str:
    """One line: which way the model is off, what dominates the prediction, and its
    largest layers."""
    term, share = dominant(c.prediction)
    top = sorted(c.prediction.layers, key=lambda x: x.time_s, reverse=True)[:2]
    layers = ", ".join(f"{x.name} ({x.time_s / c.prediction.time_s:.0%})" for x in top)
    way = "too slow" if c.error > 0 else "too fast"
    text = (f"predicts {abs(c.error):.0%} {way}; {TERM_NAMES.get(term, term)} make "
            f"{share:.0%} of the prediction")
    if layers:
        text += f"; largest layers {layers}"
    if c.row.between_cv and c.row.between_cv > 0.1:
        text += f"; the measurement itself varies {c.row.between_cv:.0%} between processes"
    if c.drifted:
        text += f"; {speed_probe.describe(c.drift)}"  # type: ignore[arg-type]
    warn = [w for w in c.row.warnings if "unstable" in w or "settle" in w]
    if warn:
        text += "; measured unsteadily"
    return text


def as_defined(spec: RunSpec) -> bool:
    """Whether ``spec`` runs its network as defined (``workloads.as_defined``)."""
    return workloads.as_defined(spec.network, spec.size, spec.params)


def shapes_timed(fit: LocalFit, spec: RunSpec) -> bool:
    """Whether ``fit`` timed the layer shapes of ``spec``'s step: its whole grid, or a scope
    naming the network, as defined, at that batch."""
    return fit.scope is None or (as_defined(spec) and fit.covers(spec.network, spec.batch_size))


def grid_missed(fit: LocalFit, spec: RunSpec, layers: Sequence[Layer]) -> list[str]:
    """The kinds of ``spec``'s layers that ``fit``, a whole grid, predicts from curves known
    to miss them (``perfmodel.fit.grid_misses``) without having timed the network's own
    shapes at that batch; empty otherwise (a scoped fit says so in its own note)."""
    if fit.scope is not None or not as_defined(spec) \
            or fit.timed_exactly(spec.network, spec.batch_size):
        return []
    return grid_misses(fit.framework, fit.device, fit.threads, (x.op for x in layers))


def step_shapes_timed(calibration: MachineFits, spec: RunSpec) -> bool:
    """Whether the fit of ``calibration`` that predicts ``spec`` timed its layer shapes
    (``shapes_timed``); a parallel run, or a configuration no fit predicts, counts as
    timed (nothing stands in for it)."""
    fit = calibration.find(framework(spec), spec.threads, spec.device, spec.precision)
    return fit is None or spec.kind != "step" or shapes_timed(fit, spec)


def stands_on_skeleton(calibration: MachineFits, spec: RunSpec) -> bool:
    """Whether the fit that predicts ``spec`` holds the skeleton of the grid
    (``LocalFit.skeleton``), which a network whose shapes it did not time is predicted
    from: a calibration scoped without it (``calibrate --skeleton once``, another
    framework's) has only its networks' own shapes, and its curves past them are guesses."""
    fit = calibration.find(framework(spec), spec.threads, spec.device, spec.precision)
    return fit is not None and fit.skeleton


@dataclass(frozen=True)
class GridMiss:
    """The kinds of a step's layers a whole grid's curves miss (``grid_missed``), and the
    command that times the network's own shapes (``grid_missed_command``)."""

    kinds: tuple[str, ...]
    command: str


def step_grid_missed(calibration: MachineFits, spec: RunSpec) -> GridMiss | None:
    """What the fit of ``calibration`` that predicts ``spec``'s step misses; None for a
    parallel run, a configuration no fit predicts, or one the grid does not miss."""
    fit = calibration.find(framework(spec), spec.threads, spec.device, spec.precision)
    if fit is None or spec.kind != "step":
        return None
    _, _, cfg = workloads.resolve(spec.network, spec.size, dict(spec.params))
    kinds = grid_missed(fit, spec, cfg.layers())
    return GridMiss(tuple(kinds), grid_missed_command(fit, spec)) if kinds else None


def missed_legend(cases: Sequence[Case]) -> str | None:
    """The legend of the '?' a table of ``cases`` marks the ones predicted from a whole
    grid's curves known to miss their layers (``Case.missed``), with the command that
    times their own shapes; None where none is."""
    missed = [c.missed for c in cases if c.missed]
    if not missed:
        return None
    commands = dict.fromkeys(m.command for m in missed)
    return (f"? predicted from the whole grid's curves, which miss the "
            f"{' and '.join(dict.fromkeys(k for m in missed for k in m.kinds))} there "
            f"({len(missed)} configuration{'s' if len(missed) != 1 else ''}, "
            f"docs/prediction.md): {'; '.join(commands)} time{'s' if len(commands) == 1 else ''} "
            "their own shapes")


def grid_missed_command(fit: LocalFit, spec: RunSpec) -> str:
    """The command that times ``spec``'s network's own shapes at its batch for ``fit``'s
    framework and thread count (what ``dlperf predict`` runs first)."""
    return (f"'dlperf calibrate --frameworks {fit.framework} --threads {fit.threads} "
            f"--networks {spec.network} --batch-size {spec.batch_size}'")


def untimed_cases(store: Store) -> list[Case]:
    """Each step of a network that a scoped calibration timed the shapes of, predicted with
    those shapes held out of it (``plan.without_network``): the model's error on a network
    whose layers the calibration never timed, as it predicts a network neither measured
    nor calibrated for here. Empty where every calibration timed the whole grid."""
    scoped = {label.split("@")[0] for s in load(store, device=None) if s.scope
              for label in s.scope}
    out: list[Case] = []
    for net in sorted(scoped):
        held = plan_calibration(store, device=None, hold_out=net)
        out += cases(store, held, kinds=("step",), networks=(net,))[0]
    return out


def predictor(store: Store) -> Callable[[ConfigResult], tuple[float, float | None] | None] | None:
    """The report's model for this machine (``report.tables.Predictor``), or None when the
    store holds no calibration of it. A row of this machine gets the kernel-calibrated
    prediction and, as the validated error, the 90th percentile of the model's absolute
    error on the other networks measured here with the same framework, device and
    precision (at least two of them, ``other_steps_errors``; else None, 'not
    validated yet'), so that 'within it' is a check, not an echo.
    A row of another machine gets none: this machine's curves say nothing of it. A row
    whose network's shapes the calibration did not time (scoped to other networks) gets
    instead the error on the networks predicted with their own shapes held out
    (``untimed_cases``, read from the store again when first needed): the kind of
    prediction it is (``predict_row.timed`` says which); none where its calibration has
    no skeleton of the grid to predict it from (``stands_on_skeleton``)."""
    cal = plan_calibration(store, device=None)
    if not cal.fits:
        return None
    found, _ = cases(store, cal)
    mine = environment.machine_id()
    path, untimed = store.path, []

    def timed(spec: RunSpec) -> bool:
        return step_shapes_timed(cal, spec)

    def predict_row(row: ConfigResult) -> tuple[float, float | None] | None:
        if row.machine_id not in (None, mine):
            return None
        is_timed = timed(row.spec)
        if not is_timed and not stands_on_skeleton(cal, row.spec):
            return None
        p = predict_for_spec(row.spec, cal)
        if p is None:
            return None
        if not is_timed and not untimed:
            with Store(path) as again:
                untimed.append(untimed_cases(again))
        errors = other_steps_errors(found if is_timed else untimed[0], row.spec)
        return p.time_s, (p90(errors) if len(errors) >= 2 else None)

    predict_row.timed = timed  # type: ignore[attr-defined]
    predict_row.missed = lambda spec: step_grid_missed(cal, spec)  # type: ignore[attr-defined]

    # what a table of its predictions marks: the calibrations other processes disturbed or
    # timed unsteadily, and the rows measured while the machine ran at another speed than
    # calibrated
    predict_row.disturbed = {(f.framework, f.threads): f"{f.framework} x{f.threads}: "  # type: ignore[attr-defined]
                             f"{f.quality()}" for f in cal.fits if f.doubtful}
    predict_row.drift = lambda row: (  # type: ignore[attr-defined]
        machine_drift(row, cal) if row.machine_id in (None, mine) else None)
    # the rows past the cores, predicted with the cores' calibration: (threads, cores)
    predict_row.beyond_cores = lambda row: (  # type: ignore[attr-defined]
        (row.spec.threads, at) if row.machine_id in (None, mine) and row.spec.kind == "step"
        and (at := cal.beyond_cores(row.spec.framework, row.spec.threads, row.spec.device,
                                    row.spec.precision)) else None)
    return predict_row


def other_steps_errors(pool: Sequence[Case], spec: RunSpec) -> list[float]:
    """The absolute errors a step prediction of ``spec`` is vouched for by: of the steps in
    ``pool`` with its framework, device and precision, of other networks (so that a
    measured configuration never vouches for itself). The DLBench table's 'validated
    error' column and ``dlperf predict``'s validated line (``trust.time_error``) both read
    it."""
    return [abs(c.error) for c in pool
            if c.row.spec.kind == "step" and c.row.spec.network != spec.network
            and framework(c.row.spec) == framework(spec) and c.row.spec.device == spec.device
            and c.row.spec.precision == spec.precision]


def framework(spec: RunSpec) -> str:
    """The framework whose kernels predict ``spec`` (parallel runs are PyTorch workers)."""
    return "torch" if spec.kind == "parallel" else spec.framework


def validation(store: Store, mode: str, *, kinds: Sequence[str] = ("step", "parallel"),
               catalogue: str | None = None, machine_id: str | None = None,
               networks: Sequence[str] = (), frameworks: Sequence[str] = ()
               ) -> tuple[list[Case], list[tuple[ConfigResult, str]]]:
    """What ``dlperf validate`` prints: the cases (of ``networks`` and ``frameworks``
    when given), corrected as ``mode`` says (``corrected``), and the rows left out with
    their reason. ``catalogue``: each step predicted from that catalogue entry alone, on
    ``machine_id``'s measurements ('all': every machine's); else from this machine's
    calibration, a one-line UsageError when the store has none."""
    from dlperf.core.errors import UsageError

    if catalogue:
        found, skipped = catalogue_cases(store, catalogue, machine_id=machine_id)
    else:
        cal = plan_calibration(store, device=None)  # each run's own device
        if not cal.fits:
            raise UsageError("this machine has no calibration in the store; run 'dlperf "
                             "calibrate' first (about 17 minutes on 2 cores)")
        if mode == "untimed":
            found, skipped = untimed_cases(store), []
            if not found:
                raise UsageError("no step here of a network a calibration timed the shapes "
                                 "of (dlperf calibrate --networks NET, then dlperf sweep of "
                                 "NET): nothing to hold its shapes out of")
        else:
            found, skipped = cases(store, cal, kinds=kinds)
    found = [c for c in found if (not networks or c.row.spec.network in networks)
             and (not frameworks or c.key("framework") in frameworks)]
    return corrected(found, mode), skipped


def predict_here(store: Store, network: str, *, device: str = "cpu", framework: str = "torch",
                 threads: int = 1, strategy: str = "single", devices: int = 1,
                 size: str | None = None, batch_size: int | None = None,
                 precision: str = "fp32", nodes: int = 1, groups: int | None = None,
                 micro_batches: int | None = None, straggler_s: float = 0.0,
                 params: dict | None = None, link: str | None = None,
                 inter_link: str | None = None, collective: str = "ring",
                 inputs: InputOptions | None = None, auto_workers: bool = False,
                 calibration: MachineFits | None = None
                 ) -> tuple[Prediction, ConfigResult | None]:
    """``dlperf predict`` on this machine's ``device`` (cpu or gpu): the prediction from its
    calibration at ``framework``, ``threads`` and ``precision`` (``strategy`` other than
    single: PyTorch workers at fp32, as ``dlperf parallel`` runs them), and the stored
    measurement of the same configuration (``measured``; None when there is none). A
    one-line UsageError when the machine is not calibrated for it. ``inputs``: the step on
    that input pipeline (``kinds.dataflow.prediction.with_input``), ``auto_workers`` with
    the smallest loader-worker count that removes its stall. ``calibration``: the store's
    calibration of ``device`` where the caller has loaded it already."""
    from dlperf.core import framework_table
    from dlperf.core.errors import UsageError
    from dlperf.kinds.calibrate.plan import check_precision
    from dlperf.kinds.parallel.make import make_spec
    from dlperf.perfmodel import predict

    fw = framework_table.info(framework).name
    params = dict(params or {})
    wl, resolved, _ = workloads.resolve(network, size, params)  # a bad name first
    check_precision(precision, device, [fw])  # (never calibrated)
    cal = calibration if calibration is not None else plan_calibration(store, device=device)
    if strategy == "single":
        m = cal.model(fw, threads, device, precision=precision, network=wl.name)
        spec = RunSpec(network=wl.name, size=resolved, framework=fw, device=device,
                       threads=threads, precision=precision, params=params,
                       batch_size=batch_size or wl.default_batch)
    else:
        if fw != "torch":
            raise UsageError("parallel strategies run PyTorch workers here (dlperf parallel); "
                             "use --framework torch")
        if precision != "fp32":
            raise UsageError("parallel strategies run at fp32 here (dlperf parallel); "
                             "--precision applies to one device here, or to catalogue devices")
        m = cal.model(fw, threads, device, workers=devices, strategy=strategy,
                      network=wl.name)
        spec = make_spec(network, strategy=strategy, workers=devices, size=size,
                         batch_size=batch_size, threads=threads, groups=groups,
                         micro_batches=micro_batches, straggler_delay_s=straggler_s,
                         nodes=nodes, params=params, device=device)
    p = predict(network, device=m.device, efficiencies=m.efficiencies, size=size,
                batch_size=batch_size, precision=precision, devices=devices, nodes=nodes,
                strategy=strategy, link=link or m.link, inter_link=inter_link or m.link,
                collective=collective, groups=groups, micro_batches=micro_batches,
                straggler_s=straggler_s, params=params, baseline_bytes=m.baseline_bytes or 0.0,
                cores=cal.cores, server_drift=strategy in THROUGH_A_SERVER,
                memory_margin=margin_for(device_margins(store, device), fw))
    if m.baseline_bytes is None:
        p = p.model_copy(update={"notes": [*p.notes, (
            f"memory: {fw}'s runtime baseline here is not calibrated yet (the peak counts "
            f"the network alone); 'dlperf calibrate --frameworks {fw}' measures it")]})
    elif device == "cpu" and strategy == "single" and not trains_measured(fw, device,
                                                                           cal.baselines):
        p = p.model_copy(update={"notes": [*p.notes, (
            f"memory: the baseline is {fw}'s libraries alone: its runtime when training, "
            f"tens to hundreds of MiB more, is measured by a one-thread calibration, which "
            f"this store lacks or made before dlperf measured it; 'dlperf calibrate "
            f"--frameworks {fw} --threads 1 --force' measures it")]})
    p = _with_utilisation(p, spec)
    if strategy == "single" and not shapes_timed(m.fit, spec):
        p = p.model_copy(update={"notes": [*p.notes, (
            f"shapes: this calibration did not time {wl.name} [{resolved}]'s layer shapes at "
            f"batch {spec.batch_size} (a skeleton of the grid stands in; its error: 'dlperf "
            "validate --held-out-shapes')" + (
                f"; 'dlperf calibrate --networks {wl.name} --batch-size {spec.batch_size}' "
                "times them" if as_defined(spec) else
                "; a calibration times the shapes of a network as defined, not of another "
                "size or parameter"))]})
    if strategy == "single" and (missed := grid_missed(m.fit, spec, wl.layers())):
        p = p.model_copy(update={"notes": [*p.notes, (
            f"shapes: the whole grid's curves miss {fw}'s {' and '.join(missed)} at "
            f"{m.fit.threads} threads (docs/prediction.md), and this calibration did not time "
            f"{wl.name}'s own at batch {spec.batch_size}; {grid_missed_command(m.fit, spec)} "
            "times them ('dlperf predict' does so first)")]})
    if strategy == "single" and m.fit.threads < threads:  # the cores' fit stands in
        p = p.model_copy(update={"notes": [*p.notes, "threads: "
                                           + beyond_cores_text(threads, m.fit.threads)]})
    if device == "cpu" and (note := speed_now(m.fit.speed_probe)):
        p = p.model_copy(update={"notes": [*p.notes, note]})
    if inputs is not None and not inputs.synthetic:
        p, spec = _on_pipeline(store, p, spec, inputs, auto_workers)
    return p, measured(store, spec)


def speed_now(calibrated: dict[str, float]) -> str | None:
    """A prediction's note on the machine's speed now against its calibration's: the
    speed probe timed here and now (``core.speed_probe``); None where the calibration
    has none."""
    move = speed_probe.drift(speed_probe.measure(), calibrated) if calibrated else None
    if move is None:
        return None
    if not speed_probe.moved(move):
        return (f"machine speed: as when calibrated (the speed probe within "
                f"{abs(move[1]):.0%})")
    return (f"machine speed: {speed_probe.describe(move)}: the machine runs at another "
            f"speed now, and a step run now would be off the prediction the same way, by "
            f"as much or more ('dlperf calibrate --force' calibrates at today's speed)")


def _on_pipeline(store: Store, p: Prediction, spec: RunSpec, inputs: InputOptions,
                 auto_workers: bool) -> tuple[Prediction, RunSpec]:
    """``p`` on the input pipeline ``inputs`` with this machine's loader costs, and the
    spec of that run (whose measurement is set beside it)."""
    from dlperf.kinds.dataflow.calibration import costs
    from dlperf.kinds.dataflow.plan import on_pipeline
    from dlperf.kinds.dataflow.prediction import measured_storage, with_input

    on_gpu = spec.device == "gpu"
    p = with_input(p, inputs, costs(store), framework=spec.framework,
                   params=spec.params, threads=1 if on_gpu else spec.threads,
                   cores=len(environment.usable_cpus()), auto_workers=auto_workers,
                   host_link_bytes_per_s=catalogue.link(LOCAL_GPU_LINK).bytes_per_s
                   if on_gpu else None, storage=measured_storage(store))
    if on_gpu:
        p = p.model_copy(update={"notes": [*p.notes, (
            f"the host-to-device copy at {LOCAL_GPU_LINK}'s rate (the catalogue's; 'dlperf "
            "dataflow h2d' measures this GPU's)")]})
    chosen = inputs.model_copy(update={"loader_workers": p.input.workers}) \
        if p.input is not None else inputs
    return p, on_pipeline(spec, chosen)


def _with_utilisation(p: Prediction, spec: RunSpec) -> Prediction:
    """A prediction for this machine with its MFU against the device's peak at the
    run's precision (a CPU's theoretical peak: ``kinds.step.utilisation``)."""
    from dlperf.kinds.step.utilisation import device_peak, utilisation

    if spec.kind != "step":  # workers share this machine's cores: no one device's peak
        return p
    peak, what = device_peak(spec, {})
    mfu, _ = utilisation(p.flops_per_step, None, p.time_s, peak)
    return p.model_copy(update={"mfu": mfu, "mfu_peak": what})


#: the parallel model's targets on the DLBench networks at their own size (issue 32;
#: docs/prediction.md): the median |error| of all parallel runs of a worker count, and of
#: each strategy's
PARALLEL_TARGET, STRATEGY_TARGET = 0.10, 0.15


@dataclass(frozen=True)
class Target:
    """One median |error| against its target: ``scope`` names the cases ('2 workers',
    '2 workers, sync', 'all workers')."""

    scope: str
    n: int
    median_abs: float
    target: float

    @property
    def met(self) -> bool:
        return self.median_abs <= self.target

    def text(self) -> str:
        return (f"{self.scope}: median |error| {self.median_abs:.1%} (n={self.n}), target "
                f"<= {self.target:.0%}: {'met' if self.met else 'missed'}")


def workers(spec: RunSpec) -> int:
    """The workers of a parallel run (1 for a step)."""
    return getattr(spec.options, "workers", 1) if spec.kind == "parallel" else 1


def parallel_targets(cs: Sequence[Case]) -> list[Target]:
    """The parallel cases of full-size networks (tiny ones are a few milliseconds of the
    harness's per-step Python, shown apart) against the targets: per worker count, all
    strategies together (``PARALLEL_TARGET``) and each strategy (``STRATEGY_TARGET``),
    then every worker count together."""
    full = [c for c in cs if c.row.spec.kind == "parallel" and c.row.spec.size in ("full", "")]
    out: list[Target] = []
    for n in (sorted({workers(c.row.spec) for c in full}) + [0]) if full else []:
        mine = [c for c in full if n == 0 or workers(c.row.spec) == n]
        scope = f"{n} workers" if n else "all workers"
        (total,) = summarize(mine)
        out.append(Target(scope, total.n, total.median_abs, PARALLEL_TARGET))
        out += [Target(f"{scope}, {s.value}", s.n, s.median_abs, STRATEGY_TARGET)
                for s in sorted(summarize(mine, "strategy"), key=lambda s: s.value)]
    return out


def parallel_target_lines(cs: Sequence[Case]) -> list[str]:
    """What ``dlperf validate`` and the bench print under the parallel cases: every
    ``parallel_targets`` line, and the tiny networks' median apart."""
    targets = parallel_targets(cs)
    if not targets:
        return []
    lines = [f"parallel targets (DLBench networks at their own size): median |error| <= "
             f"{PARALLEL_TARGET:.0%} per worker count, <= {STRATEGY_TARGET:.0%} per strategy"]
    lines += [("  " if "," not in t.scope else "    ") + t.text() for t in targets]
    tiny = [c for c in cs if c.row.spec.kind == "parallel" and c.row.spec.size not in
            ("full", "")]
    if tiny:
        (t,) = summarize(tiny)
        lines.append(f"  tiny networks, apart (no target): median |error| {t.median_abs:.1%} "
                     f"(n={t.n})")
    return lines
