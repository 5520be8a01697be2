"""The parallel-training section of the report, from the store alone (runs nothing).

Tables: the strategy comparison (time per mini-batch, speed-up and efficiency against one
worker, the split of the step into compute, communication, waiting and server work,
staleness, threads against physical cores), time to a target on real data, and the
straggler effect. Plots: scaling against workers (time per mini-batch, speed-up,
efficiency), the communication share, held-out error against training time (the guide's
"time until the destined error rate"), and the slowdown one slow worker causes.
"""

from __future__ import annotations

from pathlib import Path

from dlperf.core import units
from dlperf.core.aggregate import ConfigResult
from dlperf.core.store import Store
from dlperf.kinds.parallel.analysis import (
    baseline,
    layout,
    name_of,
    opts,
    order,
    outcome,
    pct,
    rows_from,
    speedup,
    straggler_pairs,
    threads_text,
    training,
)
from dlperf.kinds.parallel.factors import factor_tables, factor_text, period_plot, servers_plot
from dlperf.kinds.parallel.options import Parts
from dlperf.kinds.parallel.plots import (
    comm_share_plot,
    scaling_plot,
    straggler_plot,
    target_plot,
)
from dlperf.report.base import Filters, Section
from dlperf.report.tables import Table


# ----------------------------------------------------------------------------- tables
def comparison_table(rows: list[ConfigResult], all_rows: list[ConfigResult] | None = None) -> Table:
    """Strategy comparison: one line per configuration on synthetic data."""
    all_rows = all_rows or rows
    headers = ["network", "strategy", "workers", "layout", "batch", "threads (total / cores)",
               "time/mini-batch", "speed-up", "efficiency", "vs", "compute", "comm", "wait",
               "server", "staleness mean/max", "straggler"]
    out, values, notes = [], [], []
    for row in sorted(rows, key=order):
        o, e = opts(row), outcome(row)
        head = [name_of(row), o.strategy, str(o.workers), layout(row), str(row.spec.batch_size),
                threads_text(row)]
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
                           pct(eff), vs, *(pct(v) for v in parts), stale, strag])
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


def target_table(rows: list[ConfigResult]) -> Table:
    headers = ["network", "data", "strategy", "workers", "layout", "batch", "target",
               "reached", "time to target", "mini-batches", "final accuracy", "final loss",
               "time/mini-batch"]
    out, values = [], []
    for row in sorted(rows, key=order):
        o = opts(row)
        src = row.results[-1]
        tr = training(src)
        target = " ".join(t for t in (
            f"acc>={o.target_accuracy:g}" if o.target_accuracy is not None else "",
            f"loss<={o.target_loss:g}" if o.target_loss is not None else "") if t)
        head = [name_of(row), str(o.data), o.strategy, str(o.workers), layout(row),
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


def straggler_table(rows: list[ConfigResult]) -> Table:
    headers = ["network", "strategy", "workers", "layout", "delay", "time/mini-batch",
               "with straggler", "slowdown", "delay passed on"]
    out, values = [], []
    for base, slow in straggler_pairs(rows):
        o = opts(slow)
        slowdown = slow.median_s / base.median_s
        passed = (slow.median_s - base.median_s) / o.straggler_delay_s
        out.append([name_of(slow), o.strategy, str(o.workers), layout(slow),
                    units.seconds(o.straggler_delay_s), units.seconds(base.median_s),
                    units.seconds(slow.median_s), f"{slowdown:.2f}x", pct(passed)])
        values.append([name_of(slow), o.strategy, o.workers, layout(slow), o.straggler_delay_s,
                       base.median_s, slow.median_s, slowdown, passed])
    return Table(
        title="Straggler: one slow worker", headers=headers, rows=out, values=values,
        caption="The last worker's compute is slowed by the delay every step. 'Delay passed "
        "on': the increase of the time per mini-batch as a share of the delay (100%: every "
        "worker waited the full delay, as synchronous training must).")


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
    tables += factor_tables(rows)
    images = [p for p in (
        scaling_plot(rows, out / "parallel_scaling.png"),
        comm_share_plot(rows, out / "parallel_comm_share.png"),
        target_plot(rows, out / "parallel_time_to_target.png"),
        straggler_plot(rows, out / "parallel_straggler.png"),
        period_plot(rows, out / "parallel_period.png"),
        servers_plot(rows, out / "parallel_servers.png"),
    ) if p]
    over = [r for r in rows if outcome(r).oversubscribed]
    text = ("Workers run under torchrun (gloo on CPUs, NCCL on GPUs). The threads column "
            "gives workers x threads per worker = total threads, against the physical cores.")
    if over:
        text += (f" {len(over)} configuration{'s' if len(over) > 1 else ''} ran more threads "
                 "than physical cores (the workers competed for cores).")
    if found := factor_text(rows):
        text += " Found: " + found
    return Section("parallel", "Parallel training: strategies, scaling, communication",
                   tables=tables, images=images, text=text)
