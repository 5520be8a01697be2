"""The parallel section's rows: one per stored configuration (``ConfigResult``), its typed
options and outcome, and how rows compare (the one-worker baseline, speed-up, the pairs
with and without a straggler). Used by its tables (``report.parallel``) and plots
(``report.parallel_plots``)."""

from __future__ import annotations

import json

from dlperf.core import units
from dlperf.core.aggregate import ConfigResult, aggregate
from dlperf.core.spec import RunResult
from dlperf.kinds.parallel.options import (
    STRATEGIES,
    ParallelOptions,
    ParallelOutcome,
    Training,
)


def rows_from(results: list) -> list[ConfigResult]:
    return aggregate(r for r in results if r.spec.kind == "parallel")


def opts(row: ConfigResult) -> ParallelOptions:
    return row.spec.options


def outcome(row: ConfigResult) -> ParallelOutcome:
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


def family(row: ConfigResult) -> tuple:
    """What must match for two runs to be compared across worker counts or delays."""
    o = opts(row)
    s = row.spec
    return (s.network, s.size, json.dumps(s.params, sort_keys=True), s.batch_size, s.device,
            o.data, o.target_accuracy, o.target_loss, o.lr, s.seed)


def name_of(row: ConfigResult) -> str:
    s = row.spec
    return s.network if s.size in ("full", "") else f"{s.network} [{s.size}]"


def layout(row: ConfigResult) -> str:
    o = opts(row)
    if o.strategy == "mixed":
        return f"{o.groups} group{'s' if o.groups > 1 else ''}"
    if o.strategy == "pipeline":
        return f"{o.micro_batches} micro-batches"
    if o.strategy == "hybrid":
        return (f"{o.groups} groups x {o.stages} stages, {o.hybrid_within} within, "
                f"{o.micro_batches} micro-batches")
    return variant(row)


def variant(row: ConfigResult) -> str:
    """What sets an async run apart beyond its worker count: its exchange period and its
    dedicated servers ('' for plain async beside rank 0)."""
    o = opts(row)
    parts = [f"every {o.push_every} steps"] if o.push_every != 1 else []
    if o.servers:
        parts.append(f"{o.servers} server{'s' if o.servers > 1 else ''}")
    return ", ".join(parts)


def setting(row: ConfigResult) -> tuple:
    """The strategy's settings besides the worker count (what a baseline must share)."""
    o = opts(row)
    return (o.strategy, o.push_every, o.servers, o.hybrid_within)


def baseline(row: ConfigResult, rows: list[ConfigResult]) -> ConfigResult | None:
    """The one-worker run of the same strategy and workload, without a straggler: with as
    many threads as each of this run's workers (one processing unit against N of them),
    else with as many as this run has in total (the same cores in one process), else the
    one with the most threads."""
    o = opts(row)
    cands = [r for r in rows if r.measured and opts(r).workers == 1
             and setting(r) == setting(row) and not opts(r).straggler_delay_s
             and family(r) == family(row)]
    if not cands:
        return None
    for threads in (row.spec.threads, row.spec.threads * o.workers):
        same = [r for r in cands if r.spec.threads == threads]
        if same:
            return same[-1]
    return sorted(cands, key=lambda r: r.spec.threads)[-1]


def speedup(row: ConfigResult, rows: list[ConfigResult]) -> tuple[float | None, float | None]:
    """(speed-up, efficiency) against one worker: t(1) / t(N) and that over N."""
    base = baseline(row, rows)
    if base is None or not row.measured or not base.median_s or not row.median_s:
        return None, None
    s = base.median_s / row.median_s
    return s, s / opts(row).workers


def threads_text(row: ConfigResult) -> str:
    e = outcome(row)
    o = opts(row)
    total = e.total_threads or row.spec.threads * o.workers
    cores = e.physical_cores
    servers = f" + {o.servers}x{row.spec.threads} servers" if o.servers else ""
    text = f"{o.workers}x{row.spec.threads}{servers} = {total}"
    return f"{text} / {cores} cores" if cores else text


def pct(x: float | None) -> str:
    return units.percent(x)


def order(row: ConfigResult) -> tuple:
    o = opts(row)
    return (name_of(row), row.spec.batch_size, STRATEGIES.index(o.strategy), o.servers,
            o.push_every, o.workers, o.groups, o.micro_batches, o.straggler_delay_s)


def straggler_pairs(rows: list[ConfigResult]) -> list[tuple[ConfigResult, ConfigResult]]:
    """(without, with) a straggler, for every configuration measured both ways."""
    plain: dict[tuple, ConfigResult] = {}
    for r in rows:
        o = opts(r)
        if r.measured and not o.straggler_delay_s and not o.data:
            plain[(family(r), setting(r), o.workers, o.groups, o.micro_batches,
                   r.spec.threads)] = r
    pairs = []
    for r in rows:
        o = opts(r)
        if r.measured and o.straggler_delay_s and not o.data:
            base = plain.get((family(r), setting(r), o.workers, o.groups, o.micro_batches,
                              r.spec.threads))
            if base is not None:
                pairs.append((base, r))
    return sorted(pairs, key=lambda p: order(p[1]))
