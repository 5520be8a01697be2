"""Report section of the inference runs (kind "inference", ``dlperf run --mode
inference``): latency per query against batch size and threads, and what it shows."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from dlperf.core import units
from dlperf.core.aggregate import ConfigResult, aggregate
from dlperf.kinds.inference.options import InferenceOutcome
from dlperf.report.base import Filters, Section
from dlperf.report.tables import Table, sort_rows

QUANTILES = ("p50_s", "p95_s", "p99_s")


def outcomes(row: ConfigResult) -> list[InferenceOutcome]:
    return [r.outcome for r in row.ok if isinstance(r.outcome, InferenceOutcome)]


def quantity(row: ConfigResult, key: str) -> float | None:
    """One outcome number of a configuration: the median over its worker processes."""
    vals = [getattr(o, key) for o in outcomes(row) if getattr(o, key) is not None]
    return statistics.median(vals) if vals else None


def _who(row: ConfigResult) -> str:
    s = row.spec
    size = "" if s.size in ("full", "") else f" ({s.size})"
    dev = "" if s.device == "cpu" else f" {s.device}"
    prec = "" if s.precision == "fp32" else f" {s.precision}"
    return f"{s.network}{size} {s.framework}/{s.variant}{dev}{prec}"


def latency_table(rows: list[ConfigResult]) -> Table:
    """One line per (network, framework, threads, batch): latency quantiles, throughput."""
    headers = ["network / framework", "threads", "batch", "median", "p95", "p99",
               "queries/s", "samples/s", "processes", "status"]
    out, values = [], []
    for row in sort_rows(rows):
        q = {k: quantity(row, k) for k in (*QUANTILES, "queries_per_s", "samples_per_s")}
        status = "ok" if row.measured else (row.failure or "failed")[:70]
        out.append([_who(row), str(row.spec.threads), str(row.spec.batch_size),
                    *[units.seconds(q[k]) for k in QUANTILES],
                    f"{q['queries_per_s']:.4g}" if q["queries_per_s"] else "-",
                    f"{q['samples_per_s']:.4g}" if q["samples_per_s"] else "-",
                    str(row.processes), status])
        values.append([_who(row), row.spec.threads, row.spec.batch_size,
                       *[q[k] for k in QUANTILES], q["queries_per_s"], q["samples_per_s"],
                       row.processes, status])
    modes = sorted({o.mode for row in rows for o in outcomes(row) if o.mode})
    return Table(
        title="Inference: latency per query against batch size and threads",
        headers=headers, rows=out, values=values,
        caption="Forward passes only, in each framework's inference mode; one query is one "
        "forward pass over the batch. Latency quantiles over the timed queries (after the "
        "same warm-up as a training step); queries/s = 1 / mean latency.",
        footnotes=[f"inference mode: {m}" for m in modes])


def finding(rows: list[ConfigResult]) -> str:
    """One sentence from the data: for the network measured at the most batch sizes, what
    batching buys in samples/s and costs in latency, and what threads do at batch 1."""
    groups: dict[str, dict[tuple[int, int], ConfigResult]] = defaultdict(dict)
    for row in rows:
        if row.measured and quantity(row, "p50_s"):
            groups[_who(row)][(row.spec.threads, row.spec.batch_size)] = row
    if not groups:
        return ""
    who, cells = max(groups.items(), key=lambda kv: len({b for _, b in kv[1]}))
    t = min(th for th, _ in cells)
    batches = sorted(b for th, b in cells if th == t)
    parts = []
    if len(batches) > 1:
        lo, hi = cells[(t, batches[0])], cells[(t, batches[-1])]
        parts.append(
            f"{who} at {t} thread{'s' if t > 1 else ''}: batch {batches[-1]} serves "
            f"{quantity(hi, 'samples_per_s') / quantity(lo, 'samples_per_s'):.2g}x the "
            f"samples/s of batch {batches[0]} at {quantity(hi, 'p50_s') / quantity(lo, 'p50_s'):.2g}x"
            " its median latency")
    b = batches[0]
    threads = sorted(th for th, bb in cells if bb == b)
    if len(threads) > 1:
        one, many = cells[(threads[0], b)], cells[(threads[-1], b)]
        ratio = quantity(one, "p50_s") / quantity(many, "p50_s")
        parts.append(f"{threads[-1]} threads instead of {threads[0]} change the batch-{b} "
                     f"median latency by a factor {1 / ratio:.2g} ({'faster' if ratio > 1 else 'slower'})")
    return ("Found: " + "; ".join(parts) + ".") if parts else ""


def latency_plot(rows: list[ConfigResult], path: Path) -> Path | None:
    """Median latency (p99 dashed) and samples/s against batch size, one line per
    (network, framework, threads)."""
    lines: dict[str, list[tuple[int, float, float, float]]] = defaultdict(list)
    for row in rows:
        p50, p99, sps = (quantity(row, k) for k in ("p50_s", "p99_s", "samples_per_s"))
        if p50 and p99 and sps:
            lines[f"{_who(row)} t{row.spec.threads}"].append((row.spec.batch_size, p50, p99, sps))
    if not lines:
        return None
    from dlperf.report.plots import plain_log_axes, plt, save

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, (label, pts) in enumerate(sorted(lines.items())):
        pts.sort()
        xs = [p[0] for p in pts]
        a.plot(xs, [p[1] for p in pts], marker="o", color=f"C{i}", label=label)
        a.plot(xs, [p[2] for p in pts], ls="--", color=f"C{i}")
        b.plot(xs, [p[3] for p in pts], marker="o", color=f"C{i}", label=label)
    all_x = [p[0] for pts in lines.values() for p in pts]
    for ax in (a, b):
        plain_log_axes(ax, all_x)
        ax.set_xlabel("batch per query")
        ax.grid(True, alpha=0.3)
    a.set_ylabel("latency per query (s)")
    a.set_title("median (dashed: p99)")
    b.set_ylabel("samples/s")
    b.set_title("throughput")
    b.legend(fontsize=7)
    return save(fig, path)


def inference_section(store, out: Path, filters: Filters) -> Section | None:
    rows = aggregate(store.results(kind="inference", **filters.where()))
    if not rows:
        return None
    img = latency_plot(rows, out / "inference_latency.png")
    return Section("inference", "Inference: latency per query (use after training)",
                   tables=[latency_table(rows)], images=[img] if img else [],
                   text=" ".join(x for x in (finding(rows), "Run with 'dlperf run --mode "
                                             "inference --batch-size 1,8,64 --threads 1,2'.")
                                 if x))
