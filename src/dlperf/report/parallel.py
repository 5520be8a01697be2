"""The parallel-training section of the report, from the store alone (runs nothing).

Tables: the strategy comparison (time per mini-batch, speed-up and efficiency against one
worker, the split of the step into compute, communication, waiting and server work,
staleness, threads against physical cores), time to a target on real data, and the
straggler effect. Plots: scaling against workers (time per mini-batch, speed-up,
efficiency), the communication share, held-out error against training time (the guide's
"time until the destined error rate"), and the slowdown one slow worker causes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dlperf import units  # noqa: E402
from dlperf.kinds.parallel import (  # noqa: E402
    STRATEGIES,
    ParallelOptions,
    ParallelOutcome,
    Parts,
    Training,
)
from dlperf.report.analysis import Row, aggregate  # noqa: E402
from dlperf.report.base import Filters, Section  # noqa: E402
from dlperf.report.plots import grid, save  # noqa: E402
from dlperf.report.tables import Table  # noqa: E402
from dlperf.spec import RunResult  # noqa: E402
from dlperf.store import Store  # noqa: E402


# ----------------------------------------------------------------------------- rows
def rows_from(results: list) -> list[Row]:
    return aggregate(r for r in results if r.spec.kind == "parallel")


def opts(row: Row) -> ParallelOptions:
    return row.spec.options


def outcome(row: Row) -> ParallelOutcome:
    """The newest successful repetition's outcome (or the newest repetition's); a run
    with none (a failure before any rank reported) reads as empty."""
    src = row.ok or row.results
    o = src[-1].outcome if src else None
    if isinstance(o, ParallelOutcome):
        return o
    return ParallelOutcome(strategy=opts(row).strategy, workers=opts(row).workers)


def training(r: RunResult) -> Training | None:
    o = r.outcome
    return o.training if isinstance(o, ParallelOutcome) else None


def curve(r: RunResult) -> list[tuple[float, float]]:
    """(training time, held-out accuracy) of a run, from its evaluations (a failed run's
    from those logged before it failed)."""
    tr = training(r)
    if tr is not None:
        return [(c.train_s, c.accuracy) for c in tr.curve]
    o = r.outcome
    partial = o.partial if isinstance(o, ParallelOutcome) else None
    return [(e["train_s"], e["accuracy"]) for e in (partial.evals if partial else [])]


def _family(row: Row) -> tuple:
    """What must match for two runs to be compared across worker counts or delays."""
    o = opts(row)
    s = row.spec
    return (s.network, s.size, json.dumps(s.params, sort_keys=True), s.batch_size, s.device,
            o.data, o.target_accuracy, o.target_loss, o.lr, s.seed)


def _name(row: Row) -> str:
    s = row.spec
    return s.network if s.size in ("full", "") else f"{s.network} [{s.size}]"


def _shape(row: Row) -> str:
    o = opts(row)
    if o.strategy == "mixed":
        return f"{o.groups} group{'s' if o.groups > 1 else ''}"
    if o.strategy == "pipeline":
        return f"{o.micro_batches} micro-batches"
    return ""


def baseline(row: Row, rows: list[Row]) -> Row | None:
    """The one-worker run of the same strategy and workload, without a straggler: with as
    many threads as each of this run's workers (one processing unit against N of them),
    else with as many as this run has in total (the same cores in one process), else the
    one with the most threads."""
    o = opts(row)
    cands = [r for r in rows if r.measured and opts(r).workers == 1
             and opts(r).strategy == o.strategy and not opts(r).straggler_delay_s
             and _family(r) == _family(row)]
    if not cands:
        return None
    for threads in (row.spec.threads, row.spec.threads * o.workers):
        same = [r for r in cands if r.spec.threads == threads]
        if same:
            return same[-1]
    return sorted(cands, key=lambda r: r.spec.threads)[-1]


def speedup(row: Row, rows: list[Row]) -> tuple[float | None, float | None]:
    """(speed-up, efficiency) against one worker: t(1) / t(N) and that over N."""
    base = baseline(row, rows)
    if base is None or not row.measured or not base.median_s or not row.median_s:
        return None, None
    s = base.median_s / row.median_s
    return s, s / opts(row).workers


def _threads_text(row: Row) -> str:
    e = outcome(row)
    o = opts(row)
    total = e.total_threads or row.spec.threads * o.workers
    cores = e.physical_cores
    text = f"{o.workers}x{row.spec.threads} = {total}"
    return f"{text} / {cores} cores" if cores else text


def _pct(x: float | None) -> str:
    return units.percent(x)


def _order(row: Row) -> tuple:
    o = opts(row)
    return (_name(row), row.spec.batch_size, STRATEGIES.index(o.strategy), o.workers,
            o.groups, o.micro_batches, o.straggler_delay_s)


# ----------------------------------------------------------------------------- tables
def comparison_table(rows: list[Row], all_rows: list[Row] | None = None) -> Table:
    """Strategy comparison: one line per configuration on synthetic data."""
    all_rows = all_rows or rows
    headers = ["network", "strategy", "workers", "layout", "batch", "threads (total / cores)",
               "time/mini-batch", "speed-up", "efficiency", "vs", "compute", "comm", "wait",
               "server", "staleness mean/max", "straggler"]
    out, values, notes = [], [], []
    for row in sorted(rows, key=_order):
        o, e = opts(row), outcome(row)
        head = [_name(row), o.strategy, str(o.workers), _shape(row), str(row.spec.batch_size),
                _threads_text(row)]
        strag = f"+{units.seconds(o.straggler_delay_s)} on rank {o.straggler_rank}" \
            if o.straggler_delay_s else ""
        if not row.measured:
            notes.append(f"{' '.join(head[:4])}: {row.failure}")
            out.append(head + [f"-[{len(notes)}]"] + [""] * 8 + [strag])
            values.append([*head, None] + [None] * 8 + [strag])
            continue
        sp, eff = speedup(row, all_rows)
        base = baseline(row, all_rows)
        vs = f"1x{base.spec.threads}" if base is not None else ""
        shares = e.breakdown.shares if e.breakdown else Parts()
        st = e.staleness
        stale = f"{st.mean:.2f} / {st.max}" if st else ""
        parts = [getattr(shares, p) for p in ("compute", "comm", "wait", "server")]
        out.append(head + [units.seconds(row.median_s), f"{sp:.2f}x" if sp else "-",
                           _pct(eff), vs, *(_pct(v) for v in parts), stale, strag])
        values.append([*head, row.median_s, sp, eff, vs, *parts,
                       st.mean if st else None, strag])
    return Table(
        title="Parallel strategies: time per mini-batch",
        headers=headers, rows=out, values=values,
        footnotes=[f"[{i}] {n}" for i, n in enumerate(notes, 1)],
        caption="Time to consume one global mini-batch (median). Speed-up and efficiency "
        "against one worker of the same strategy ('vs': its workers x threads): with the "
        "threads of one of these workers if stored, else with all of their threads. Shares of each worker's "
        "step, averaged over workers: compute (the straggler's delay included), comm (blocked "
        "transferring), wait (blocked until other workers arrive, or on the server's lock), "
        "server (the parameter server applying or copying the weights). DDP's all-reduce "
        "overlapping the backward pass is not counted as blocked; see docs/parallel.md.",
    )


def target_table(rows: list[Row]) -> Table:
    headers = ["network", "data", "strategy", "workers", "layout", "batch", "target",
               "reached", "time to target", "mini-batches", "final accuracy", "final loss",
               "time/mini-batch"]
    out, values = [], []
    for row in sorted(rows, key=_order):
        o = opts(row)
        src = row.results[-1]
        tr = training(src)
        target = " ".join(t for t in (
            f"acc>={o.target_accuracy:g}" if o.target_accuracy is not None else "",
            f"loss<={o.target_loss:g}" if o.target_loss is not None else "") if t)
        head = [_name(row), str(o.data), o.strategy, str(o.workers), _shape(row),
                str(row.spec.batch_size), target or "-"]
        if tr is None:
            f = src.failure
            out.append(head + [f"- ({f.reason}: {f.message[:60]})" if f else "-"] + [""] * 5)
            values.append(head + [None] * 6)
            continue
        final, tts = tr.final, tr.time_to_target_s
        out.append(head + ["yes" if tr.reached else "no", units.seconds(tts),
                           f"{tr.steps_to_target:.0f}" if tr.steps_to_target else "-",
                           f"{final.accuracy:.3f}" if final else "-",
                           f"{final.loss:.3f}" if final else "-",
                           units.seconds(src.metrics.median_s if src.metrics else None)])
        values.append(head + [tr.reached, tts, tr.steps_to_target,
                              final.accuracy if final else None, final.loss if final else None,
                              src.metrics.median_s if src.metrics else None])
    return Table(
        title="Time to target on real data", headers=headers, rows=out, values=values,
        caption="Held-out accuracy and loss, evaluated every few mini-batches. Lockstep "
        "strategies: training time (evaluation pauses excluded); asynchronous ones: wall "
        "time (the other workers keep training while rank 0 evaluates).")


def straggler_pairs(rows: list[Row]) -> list[tuple[Row, Row]]:
    """(without, with) a straggler, for every configuration measured both ways."""
    plain: dict[tuple, Row] = {}
    for r in rows:
        o = opts(r)
        if r.measured and not o.straggler_delay_s and not o.data:
            plain[(_family(r), o.strategy, o.workers, o.groups, o.micro_batches,
                   r.spec.threads)] = r
    pairs = []
    for r in rows:
        o = opts(r)
        if r.measured and o.straggler_delay_s and not o.data:
            base = plain.get((_family(r), o.strategy, o.workers, o.groups, o.micro_batches,
                              r.spec.threads))
            if base is not None:
                pairs.append((base, r))
    return sorted(pairs, key=lambda p: _order(p[1]))


def straggler_table(rows: list[Row]) -> Table:
    headers = ["network", "strategy", "workers", "layout", "delay", "time/mini-batch",
               "with straggler", "slowdown", "delay passed on"]
    out, values = [], []
    for base, slow in straggler_pairs(rows):
        o = opts(slow)
        slowdown = slow.median_s / base.median_s
        passed = (slow.median_s - base.median_s) / o.straggler_delay_s
        out.append([_name(slow), o.strategy, str(o.workers), _shape(slow),
                    units.seconds(o.straggler_delay_s), units.seconds(base.median_s),
                    units.seconds(slow.median_s), f"{slowdown:.2f}x", _pct(passed)])
        values.append([_name(slow), o.strategy, o.workers, _shape(slow), o.straggler_delay_s,
                       base.median_s, slow.median_s, slowdown, passed])
    return Table(
        title="Straggler: one slow worker", headers=headers, rows=out, values=values,
        caption="The last worker's compute is slowed by the delay every step. 'Delay passed "
        "on': the increase of the time per mini-batch as a share of the delay (100%: every "
        "worker waited the full delay, as synchronous training must).")


# ----------------------------------------------------------------------------- plots
_MARK = {"sync": "o", "async": "s", "mixed": "^", "pipeline": "D"}


def scaling_plot(rows: list[Row], path: Path) -> Path | None:
    """Time per mini-batch, speed-up and efficiency against workers, one line per strategy
    (synthetic data, no straggler), one row of panels per network and batch."""
    panels: dict[tuple, dict[tuple, dict[int, Row]]] = defaultdict(lambda: defaultdict(dict))
    for r in sorted(rows, key=_order):
        o = opts(r)
        if r.measured and not o.data and not o.straggler_delay_s:
            # one curve per strategy and threads per worker: each worker a processing unit
            panels[(_name(r), r.spec.batch_size)][(o.strategy, r.spec.threads)][o.workers] = r
    panels = {k: v for k, v in panels.items() if any(len(c) > 1 for c in v.values())}
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 3, figsize=(13.5, 3.6 * len(panels)), squeeze=False)
    for (name, batch), ax_row in zip(sorted(panels), axes, strict=True):
        by = panels[(name, batch)]
        wmax = 1
        for (strat, threads) in sorted(by, key=lambda k: (STRATEGIES.index(k[0]), k[1])):
            pts = sorted(by[(strat, threads)].items())
            xs = [w for w, _ in pts]
            wmax = max(wmax, *xs)
            sp = [speedup(r, rows) for _, r in pts]
            kw = {"marker": _MARK.get(strat, "o"),
                  "label": f"{strat}, {threads} thread{'s' if threads > 1 else ''}/worker"}
            ax_row[0].plot(xs, [r.median_s for _, r in pts], **kw)
            if len(pts) < 2:
                continue  # a lone one-worker point: its speed-up is 1 by definition
            ax_row[1].plot([x for x, s in zip(xs, sp, strict=True) if s[0]],
                           [s[0] for s in sp if s[0]], **kw)
            ax_row[2].plot([x for x, s in zip(xs, sp, strict=True) if s[1]],
                           [s[1] for s in sp if s[1]], **kw)
        ax_row[1].plot([1, wmax], [1, wmax], ls="--", color="grey", label="ideal")
        ax_row[2].axhline(1.0, ls="--", color="grey")
        for ax, ylabel in zip(ax_row, ("time per mini-batch (s)", "speed-up vs 1 worker",
                                       "efficiency"), strict=True):
            ax.set_xlabel("workers")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{name}, batch {batch}")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    return save(fig, path)


def comm_share_plot(rows: list[Row], path: Path) -> Path | None:
    """Stacked bars: each configuration's step split into compute, comm, wait, server."""
    chosen = [r for r in sorted(rows, key=_order)
              if r.measured and not opts(r).data and outcome(r).breakdown]
    if not chosen:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(chosen) + 1.5))
    labels, left = [], [0.0] * len(chosen)
    colors = {"compute": "C0", "comm": "C1", "wait": "C3", "server": "C2"}
    for part in ("compute", "comm", "wait", "server"):
        vals = [getattr(outcome(r).breakdown.shares, part) or 0.0 for r in chosen]
        ax.barh(range(len(chosen)), vals, left=left, color=colors[part], label=part)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    for r in chosen:
        o = opts(r)
        strag = f" +{o.straggler_delay_s:g}s" if o.straggler_delay_s else ""
        labels.append(f"{_name(r)} {o.strategy} {o.workers}x{r.spec.threads} {_shape(r)}"
                      f"{strag}".strip())
    ax.set_yticks(range(len(chosen)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("share of the step")
    ax.set_xlim(0, 1)
    ax.legend(fontsize=7, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    return save(fig, path)


def target_plot(rows: list[Row], path: Path) -> Path | None:
    """Held-out error rate against training time, one curve per run, target dashed."""
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        if opts(r).data and curve(r.results[-1]):
            groups[(_name(r), opts(r).data, r.spec.batch_size)].append(r)
    if not groups:
        return None
    fig, axes = grid(len(groups))
    for ax, (key, rs) in zip(axes, sorted(groups.items()), strict=True):
        target = None
        for r in sorted(rs, key=_order):
            o = opts(r)
            points = curve(r.results[-1])
            ax.plot([t for t, _ in points], [1 - acc for _, acc in points],
                    marker=_MARK.get(o.strategy, "o"), markersize=3,
                    label=f"{o.strategy} {o.workers}x{r.spec.threads} {_shape(r)}".strip())
            target = o.target_accuracy if o.target_accuracy is not None else target
        if target is not None:
            ax.axhline(1 - target, ls="--", color="grey", label=f"target {1 - target:.0%} error")
        ax.set_title(f"{key[0]} on {key[1]}, batch {key[2]}")
        ax.set_xlabel("training time (s)")
        ax.set_ylabel("held-out error rate")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return save(fig, path)


def straggler_plot(rows: list[Row], path: Path) -> Path | None:
    pairs = straggler_pairs(rows)
    if not pairs:
        return None
    fig, ax = plt.subplots(figsize=(7, 0.4 * len(pairs) + 1.5))
    labels = []
    for k, (base, slow) in enumerate(pairs):
        o = opts(slow)
        ax.barh(k, slow.median_s / base.median_s, color=f"C{STRATEGIES.index(o.strategy)}")
        labels.append(f"{_name(slow)} {o.strategy} {o.workers}x{slow.spec.threads} "
                      f"{_shape(slow)} +{o.straggler_delay_s:g}s".replace("  ", " "))
    ax.axvline(1.0, color="grey", ls="--")
    ax.set_yticks(range(len(pairs)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time per mini-batch with a straggler / without")
    return save(fig, path)


# ----------------------------------------------------------------------------- section
def parallel_section(store: Store, out: Path, filters: Filters) -> Section | None:
    rows = rows_from(store.results(kind="parallel", **filters.where()))
    if not rows:
        return None
    synthetic = [r for r in rows if not opts(r).data]
    real = [r for r in rows if opts(r).data]
    tables = []
    if synthetic:
        tables.append(comparison_table(synthetic, rows))
    if real:
        tables.append(target_table(real))
    if straggler_pairs(rows):
        tables.append(straggler_table(rows))
    images = [p for p in (
        scaling_plot(rows, out / "parallel_scaling.png"),
        comm_share_plot(rows, out / "parallel_comm_share.png"),
        target_plot(rows, out / "parallel_time_to_target.png"),
        straggler_plot(rows, out / "parallel_straggler.png"),
    ) if p]
    over = [r for r in rows if outcome(r).oversubscribed]
    text = ("Workers run under torchrun (gloo on CPUs, NCCL on GPUs). The threads column "
            "gives workers x threads per worker = total threads, against the physical cores.")
    if over:
        text += (f" {len(over)} configuration{'s' if len(over) > 1 else ''} ran more threads "
                 "than physical cores (the workers competed for cores).")
    return Section("parallel", "Parallel training: strategies, scaling, communication",
                   tables=tables, images=images, text=text)
