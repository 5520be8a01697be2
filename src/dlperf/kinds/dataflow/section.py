"""The data-flow section: how long training waits for its data, from the store alone.

A *sweep group* is one configuration (network, framework, threads, batch, input mode,
format, cache, ...) measured at several loader-worker counts and prefetch depths; its
floor is the same configuration on synthetic data (the processor-bound time, nothing to
wait for). For each point: time per mini-batch, its ratio to the floor, the stall (time
blocked in the pipeline's next()) and its share of the step, the training step alone,
the loader's work per batch, the loader's throughput measured alone, and how many
processes share how many CPUs (oversubscription). ``whatif`` turns a group into the
sentences a person asks for: how much of each step waits with N workers, whether
prefetching removes it, where the floor is reached, whether workers past the CPUs hurt.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from dlperf.core import units
from dlperf.core.aggregate import ConfigResult, aggregate
from dlperf.core.spec import RunSpec
from dlperf.core.store import Store
from dlperf.inputs.options import InputOptions
from dlperf.kinds.dataflow.analysis import (
    GONE,
    loader_rate,
    median_of,
    outcomes,
    stall_share,
)
from dlperf.kinds.dataflow.options import StorageOptions, StorageOutcome
from dlperf.kinds.dataflow.plan import has_pipeline, input_of
from dlperf.kinds.step.options import StepOptions
from dlperf.report.base import Filters, Section
from dlperf.report.tables import Table


@dataclass
class Point:
    workers: int
    prefetch: int
    step: ConfigResult
    loader: ConfigResult | None = None

    @property
    def share(self) -> float | None:
        return stall_share(self.step)

    @property
    def stall_s(self) -> float | None:
        return median_of([o.stall_mean_s for o in outcomes(self.step)])

    @property
    def compute_s(self) -> float | None:
        return median_of([o.compute_median_s for o in outcomes(self.step)])

    @property
    def prep_s(self) -> float | None:
        return median_of([o.prep.total_s if o.prep else None for o in outcomes(self.step)])

    @property
    def loader_rate(self) -> float | None:
        return loader_rate(self.loader) if self.loader is not None else None

    @property
    def cpus(self) -> int | None:
        vals = [len(o.loader_cpus) for o in outcomes(self.step) if o.loader_cpus]
        return max(vals) if vals else None


@dataclass
class Group:
    spec: RunSpec  # the first point's spec
    opts: InputOptions  # its input settings
    machine_id: str | None
    floor: ConfigResult | None = None
    points: list[Point] = field(default_factory=list)

    @property
    def title(self) -> str:
        s, o = self.spec, self.opts
        what = f"disk {o.data_format}" if o.input == "disk" else o.input
        extra = (" cold" if o.cache == "cold" else "") + (
            f" +{o.sample_delay_s * 1e3:g} ms/sample" if o.sample_delay_s else "")
        dev = f"{s.threads} thread{'s' if s.threads != 1 else ''}" if s.device == "cpu" else s.device
        return f"{s.network} {s.framework}/{s.variant}, {dev}, batch {s.batch_size}, {what}{extra}"

    def point(self, workers: int, prefetch: int) -> Point | None:
        return next((p for p in self.points if (p.workers, p.prefetch) == (workers, prefetch)), None)


def _key(spec: RunSpec, machine: str | None, **options_update) -> tuple[str | None, str]:
    """(machine, config id) of ``spec`` with its options changed: the identity of a
    whole sweep group (workers and prefetch dropped), of its floor, of its loader run."""
    opts = {k: v for k, v in input_of(spec).to_options().items() if k not in options_update}
    opts.update({k: v for k, v in options_update.items() if v is not None})
    return machine, spec.model_copy(update={"options": StepOptions.model_validate(opts),
                                            "repeat": 0, "kind": "step"}).config_id


def groups(store: Store, filters: Filters = Filters()) -> list[Group]:
    where = filters.where()
    steps = aggregate(store.results(kind="step", **where))
    loaders = {(r.machine_id, r.spec.model_copy(update={"kind": "step"}).config_id): r
               for r in aggregate(store.results(kind="loader", **where))}
    floors = {(r.machine_id, r.spec.config_id): r for r in steps
              if not input_of(r.spec).to_options()}
    out: dict[tuple, Group] = {}
    for r in steps:
        if not has_pipeline(r.spec):
            continue
        o = input_of(r.spec)
        key = _key(r.spec, r.machine_id, loader_workers=None, prefetch=None)
        g = out.get(key)
        if g is None:
            floor = floors.get((r.machine_id,
                                r.spec.model_copy(update={"options": StepOptions()}).config_id))
            g = out[key] = Group(r.spec, o, r.machine_id, floor)
        g.points.append(Point(o.loader_workers, o.prefetch, r,
                              loaders.get((r.machine_id, r.spec.config_id))))
    for g in out.values():
        g.points.sort(key=lambda p: (p.workers, p.prefetch))
    return list(out.values())


# ----------------------------------------------------------------------------- table
def _cpu_cell(g: Group, p: Point) -> str:
    n = p.cpus
    if n is None:
        return "-"
    busy = g.spec.threads + p.workers
    return f"{g.spec.threads}+{p.workers} on {n}" + (" (over)" if busy > n else "")


def sweep_table(g: Group) -> Table:
    floor = g.floor.median_s if g.floor is not None and g.floor.measured else None
    headers = ["loader workers", "prefetch", "time per mini-batch", "vs synthetic",
               "waiting for data", "stall share", "training step", "loader work/batch",
               "loader alone", "processes on CPUs"]
    rows, values = [], []
    if floor is not None:
        rows.append(["synthetic", "-", units.seconds(floor), "1.00x", "-", "-",
                     units.seconds(floor), "-", "-", f"{g.spec.threads}+0"])
        values.append([None, None, floor, 1.0, None, None, floor, None, None, None])
    for p in g.points:
        t = p.step.median_s
        if t is None:
            rows.append([str(p.workers), str(p.prefetch), f"- ({p.step.failure_reason})"]
                        + ["-"] * 7)
            values.append([p.workers, p.prefetch] + [None] * 8)
            continue
        ratio = t / floor if floor else None
        rate = p.loader_rate
        rows.append([str(p.workers), str(p.prefetch), units.seconds(t),
                     f"{ratio:.2f}x" if ratio else "-", units.seconds(p.stall_s),
                     units.percent(p.share), units.seconds(p.compute_s), units.seconds(p.prep_s),
                     f"{rate:.4g} samples/s" if rate else "-", _cpu_cell(g, p)])
        values.append([p.workers, p.prefetch, t, ratio, p.stall_s, p.share, p.compute_s,
                       p.prep_s, rate, None])
    notes = [
        "waiting for data: mean time per step blocked in the pipeline's next(); stall share: "
        "its sum over the sum of step times. training step: the step without the wait. "
        "loader work/batch: read + decode + augment + collate, summed over the batch's "
        "samples (CPU work, spread over the workers). loader alone: the same pipeline in a "
        "process that trains nothing. processes on CPUs: training threads + loader "
        "processes on the CPUs they may use; (over): more than CPUs, they compete.",
    ]
    return Table(title=f"Data flow: {g.title}", headers=headers, rows=rows, values=values,
                 footnotes=notes + whatif(g))


# ----------------------------------------------------------------------------- what-if
def _unit(g: Group) -> str:
    return "the GPU" if g.spec.device == "gpu" else "the CPU"


def _workers(n: int) -> str:
    return f"{n} loader worker{'s' if n != 1 else ''}"


def whatif(g: Group) -> list[str]:
    """The sweep in sentences (each from the measured numbers of this group)."""
    lines = []
    measured = [p for p in g.points if p.step.measured and p.share is not None]
    if not measured:
        return ["no point of this sweep was measured"]
    for w in sorted({p.workers for p in measured}):
        row = sorted((p for p in measured if p.workers == w), key=lambda p: p.prefetch)
        first = row[0]
        text = (f"with {_workers(w)}" + (f" and prefetch {first.prefetch}" if first.prefetch else "")
                + f" {_unit(g)} would wait {first.share:.0%} of each step")
        later = [p for p in row[1:]]
        if first.share >= GONE and later:
            best = min(later, key=lambda p: p.share)
            if best.share < GONE:
                text += f"; prefetching {best.prefetch} batches removes it ({best.share:.0%})"
            elif best.share < 0.8 * first.share:
                text += f"; prefetching {best.prefetch} batches reduces it to {best.share:.0%}"
            else:
                text += (f"; prefetching {best.prefetch} batches does not help "
                         f"({best.share:.0%})") + _why(g, best)
        lines.append(text)
    lines += _floor_lines(g, measured)
    return lines


def _why(g: Group, p: Point) -> str:
    """Why prefetching did not help, from the loader measured alone: a buffer hides the
    loader's jitter, not a loader slower than the step."""
    rate, compute = p.loader_rate, p.compute_s
    if not rate or not compute:
        return ""
    per_batch = g.spec.batch_size / rate
    if per_batch > compute:
        return (f": alone, the loader delivers a batch every {units.seconds(per_batch)}, "
                f"slower than the {units.seconds(compute)} step; more loader workers (and "
                "CPUs for them) would help, a deeper buffer would not")
    return (f": alone, the loader delivers a batch every {units.seconds(per_batch)}, faster "
            f"than the {units.seconds(compute)} step; beside training it is slowed, likely by "
            "sharing CPUs with it")


def _floor_lines(g: Group, measured: list[Point]) -> list[str]:
    lines = []
    floor = g.floor.median_s if g.floor is not None and g.floor.measured else None
    best = min(measured, key=lambda p: p.step.median_s)
    if floor:
        reach = [p for p in measured if p.step.median_s <= floor * (1 + GONE)]
        if reach:
            p = min(reach, key=lambda p: (p.workers, p.prefetch))
            lines.append(f"the synthetic-data floor ({units.seconds(floor)} per mini-batch) is "
                         f"reached (within {GONE:.0%}) with {_workers(p.workers)} and prefetch "
                         f"{p.prefetch}")
        else:
            lines.append(f"the synthetic-data floor ({units.seconds(floor)}) is not reached: "
                         f"best {units.seconds(best.step.median_s)} "
                         f"({best.step.median_s / floor:.2f}x) with {_workers(best.workers)} "
                         f"and prefetch {best.prefetch}")
    lines += _oversubscribed(g, measured)
    return lines


def _oversubscribed(g: Group, measured: list[Point]) -> list[str]:
    """Do training steps slow down when training threads + loader processes outnumber
    the CPUs? The median training step of those points against the others'."""
    def busy(p: Point) -> bool:
        return bool(p.cpus) and g.spec.threads + p.workers > p.cpus

    over = [p.compute_s for p in measured if busy(p) and p.compute_s]
    fits = [p.compute_s for p in measured if not busy(p) and p.compute_s]
    if not over or not fits:
        return []
    a, b = statistics.median(over), statistics.median(fits)
    cpus = max(p.cpus for p in measured if busy(p))
    if a > b * (1 + GONE):
        return [f"oversubscribed: with more processes than the {cpus} CPUs (training threads "
                f"+ loader workers), the training step takes a median {units.seconds(a)}, "
                f"{a / b:.2f}x its {units.seconds(b)} without: the loader processes compete "
                "with training for the CPUs (unless the machine was busy: see the warnings)"]
    return [f"more processes than the {cpus} CPUs did not slow the training step (median "
            f"{units.seconds(a)} against {units.seconds(b)} without)"]


# ----------------------------------------------------------------------------- storage
def storage_rows(store: Store) -> list[ConfigResult]:
    """Every storage measured (its newest result), failures included."""
    return aggregate(store.results(kind="storage"))


def storage_table(rows: list[ConfigResult]) -> Table:
    headers = ["path", "tool", "sequential", "random", "blocks", "how the cache was kept out"]
    cells, values = [], []
    for r in rows:
        res = (r.ok or r.results)[-1]
        o = res.outcome if isinstance(res.outcome, StorageOutcome) else None
        path = r.spec.options.path if isinstance(r.spec.options, StorageOptions) else ""
        if o is None:
            f = res.failure
            cells.append([path, r.spec.framework, f"- ({f.reason if f else 'failed'})", "-", "-",
                          f.message[:80] if f else ""])
            values.append([path, None, None, None, None, None])
            continue
        cells.append([path, o.tool, f"{o.seq_bytes_per_s / 1e6:.0f} MB/s",
                      f"{o.rand_bytes_per_s / 1e6:.0f} MB/s",
                      f"{units.nbytes(o.seq_block)} / {units.nbytes(o.rand_block)}", o.method])
        values.append([path, o.tool, o.seq_bytes_per_s, o.rand_bytes_per_s, None, o.method])
    return Table(title="Storage read bandwidth (cold)", headers=headers, rows=cells,
                 values=values, caption="Each file read once sequentially and once in random "
                 "order, past the page cache (MB = 1e6 bytes).")


# ----------------------------------------------------------------------------- section
def dataflow_section(store: Store, out: Path, filters: Filters) -> Section | None:
    from dlperf.kinds.dataflow.plots import sweep_plot

    gs = groups(store, filters)
    st = storage_rows(store)
    if not gs and not st:
        return None
    tables = [sweep_table(g) for g in gs]
    if st:
        tables.append(storage_table(st))
    images = [p for i, g in enumerate(gs[:8])
              if (p := sweep_plot(g, out / f"dataflow_{i + 1}.png"))]
    return Section("dataflow", "Data flow: waiting for data", tables=tables, images=images,
                   text="Training on real input pipelines (docs/dataflow.md): time per "
                   "mini-batch and the share of it spent waiting for data, against loader "
                   "workers and prefetching, beside the synthetic-data floor.")


def run_lines(row: ConfigResult, loader: ConfigResult | None) -> list[str]:
    """What ``dlperf run --input ...`` prints below the time per mini-batch."""
    outs = outcomes(row)
    if not outs:
        return []
    o, opts = outs[-1], input_of(row.spec)
    share = stall_share(row)
    lines = [f"  input                {opts.describe()}"
             + (f" ({o.data_set}, {units.nbytes(o.data_set_bytes)})" if o.data_set else
                f" ({units.nbytes(o.data_set_bytes)} in memory)"),
             f"  waiting for data     {units.seconds(median_of([x.stall_mean_s for x in outs]))} "
             f"per step (median {units.seconds(median_of([x.stall_median_s for x in outs]))}): "
             f"{units.percent(share)} of the step time",
             f"  training step        {units.seconds(median_of([x.compute_median_s for x in outs]))}"
             " per step without the wait"]
    if o.prep is not None:
        p = o.prep
        lines.append(f"  loader work          {units.seconds(p.total_s)} per batch: read "
                     f"{units.seconds(p.read_s)}, decode {units.seconds(p.decode_s)}, augment "
                     f"{units.seconds(p.augment_s)}, collate {units.seconds(p.collate_s)}")
    compute = median_of([x.compute_median_s for x in outs])
    if loader is not None and loader.measured:
        rate = loader_rate(loader) or 0.0
        line = f"  loader alone         {rate:.4g} samples/s with no training"
        if compute:
            need = row.spec.batch_size / compute  # what the step alone would consume
            line += (f"; the training step alone takes {need:.4g} samples/s: " +
                     ("the loader keeps up" if rate >= need else
                      "the loader cannot keep up (more workers or a cheaper format)"))
        lines.append(line)
    elif loader is not None:
        lines.append(f"  loader alone         not measured: {loader.failure}")
    if o.eviction:
        lines.append(f"  cache                {o.eviction}")
    lines += [f"  note                 {n}" for n in o.notes]
    return lines


def dataflow_lines(row: ConfigResult, db: str | Path | None) -> list[str]:
    """``run_lines`` for a row of ``dlperf run``, its loader run read from the store."""
    if not has_pipeline(row.spec):
        return []
    with Store(db) as store:
        loader_id = row.spec.model_copy(update={"kind": "loader"}).config_id
        found = aggregate(r for r in store.results(kind="loader", config_id=loader_id)
                          if r.machine_id == row.machine_id)
    return run_lines(row, found[0] if found else None)
