"""Advice as tables: one per piece of hardware (topic, subject, advice, number, source),
and a side-by-side table of time to train when several are compared. The report's advice
section gives this machine's advice for every task it has measured a candidate of."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlperf.advice import TASKS, Advice, HardwareAdvice, Recommendation, advise
from dlperf.advice.common import duration
from dlperf.core import environment, units
from dlperf.core.aggregate import ConfigResult, aggregate
from dlperf.core.store import Store
from dlperf.report.base import Filters, Section
from dlperf.report.tables import Table

TOPICS = {"network": "network and size", "framework": "framework", "threads":
           "processing unit and threads", "allocator": "memory allocator",
           "devices": "devices and synchronisation", "data": "input and storage",
           "batch": "largest mini-batch"}


def number(r: Recommendation) -> str:
    if r.value is None:
        return "-"
    if r.unit == "h":
        return duration(r.value)
    if r.unit == "s":
        return units.seconds(r.value)
    if r.unit == "% of the step":
        return f"{units.percent(r.value / 100)} of the step"
    if r.unit in ("samples", "threads"):
        return f"{r.value:.0f} {r.unit.removesuffix('s') if r.value == 1 else r.unit}"
    return f"{r.value:.4g} {r.unit}"


def hardware_table(h: HardwareAdvice, title: str | None = None) -> Table:
    order = list(TOPICS)
    recs = sorted(h.recommendations, key=lambda r: order.index(r.topic))
    return Table(title=title or f"Advice for {h.hardware}",
                 headers=["topic", "advice", "number", "source"],
                 rows=[[TOPICS[r.topic], r.advice, number(r), r.source.describe()] for r in recs],
                 values=[[TOPICS[r.topic], r.advice, r.value, r.kind] for r in recs],
                 footnotes=list(h.notes))


def comparison_table(a: Advice) -> Table | None:
    """Time to train of each candidate on each piece of hardware, side by side."""
    if len(a.hardware) < 2:
        return None
    subjects = list(dict.fromkeys(r.subject for h in a.hardware for r in h.of("network")))
    rows, values = [], []
    for s in subjects:
        cells = [next((r for r in h.of("network") if r.subject == s), None) for h in a.hardware]
        rows.append([s] + [f"{number(c)} ({c.kind})" if c and c.value is not None else "-"
                           for c in cells])
        values.append([s] + [c.value if c else None for c in cells])
    return Table(title=f"Time to train, side by side ({a.samples:,} samples x {a.epochs:g} epochs)",
                 headers=["network", *[h.hardware for h in a.hardware]], rows=rows,
                 values=values, caption="Each number says whether it was measured here or "
                 "predicted by the model; '-': neither (the per-hardware tables give the "
                 "command that measures it).")


def advice_tables(a: Advice) -> list[Table]:
    tables = [hardware_table(h) for h in a.hardware]
    comp = comparison_table(a)
    return ([comp] if comp else []) + tables


def rows_here(store: Store) -> list[ConfigResult]:
    """This machine's step, parallel, loader and storage rows, failures included: what
    advice reads."""
    here = environment.machine_id()
    return [r for kind in ("step", "parallel", "loader", "storage")
            for r in aggregate(store.results(kind=kind, machine_id=here))]


def advice_section(store: Store, out: Path, filters: Filters,
                   inputs: dict[str, Any] | None = None) -> Section | None:
    """The advice for each task with a candidate measured here. ``inputs``: what else
    ``advise`` reads (``dlperf.api.advice_inputs``: the model, the validated errors);
    without them, the measured rows alone."""
    inputs = inputs or {"rows": rows_here(store)}
    rows = inputs["rows"]
    measured = {r.spec.network for r in rows if r.measured}
    tables = []
    for t in TASKS.values():
        if not measured & {c.network for c in t.candidates}:
            continue
        a = advise(t.name, samples=t.example_samples, epochs=t.example_epochs, **inputs)
        tables.append(hardware_table(a.hardware[0], f"{t.name} ({t.example})"))
    if not tables:
        return None
    return Section("advice", "Advice for this machine", tables=tables,
                   text="For each task with a candidate network measured here, at the data "
                   "size named in the table's title. Every number says where it comes from. "
                   "'dlperf advise --task TASK --samples N --epochs E --hardware "
                   "this,a100-40gb:8' gives the advice for your data and compares hardware.")
