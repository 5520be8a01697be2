"""Every failure in the store with its reason: the report's section of its own for what
did not complete (DLBench's '-' cells, with the why beside them)."""

from __future__ import annotations

import time
from pathlib import Path

from dlperf.core.store import Store
from dlperf.report.base import Filters, Section
from dlperf.report.tables import Table, machine_label

#: what each failure reason means, for the section's caption
REASONS = {
    "crash": "the worker process died (a signal or a non-zero exit)",
    "oom": "out of memory (over --memory-limit, or killed by the system)",
    "timeout": "ran past --timeout",
    "unsupported": "the framework or the machine cannot run this configuration",
    "error": "the worker raised an error",
    "interrupted": "stopped by Ctrl-C or a kill; the next sweep measures it again",
    "budget": "training ended its step or time budget before the target",
}


def failures_section(store: Store, out: Path, filters: Filters) -> Section | None:
    """The newest result of every run that failed, of every kind (DLBench steps, training,
    parallel runs, peak kernels), with its reason and message."""
    failed = [r for r in store.results(kind=None, **filters.where()) if not r.ok]
    if not failed:
        return None
    several = len({r.machine_id for r in failed}) > 1
    rows, values = [], []
    for r in sorted(failed, key=lambda r: (r.spec.kind, r.spec.label())):
        f = r.failure
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.finished_at)) if r.finished_at else "-"
        line = [r.spec.kind, r.spec.label(), *([machine_label(r.machine_id)] if several else []),
                f.reason if f else "failed", (f.message if f else "")[:300], when]
        rows.append(line)
        values.append(line[:-1] + [r.finished_at])
    reasons = sorted({r.failure.reason for r in failed if r.failure})
    return Section("failures", "Failures", tables=[Table(
        title=f"Every failed run ({len(failed)})",
        headers=["kind", "configuration", *(["machine"] if several else []), "reason",
                 "message", "when"],
        rows=rows, values=values,
        footnotes=[f"{k}: {REASONS[k]}" for k in reasons if k in REASONS])],
        text="The newest result of each run that did not complete. DLBench's table shows "
        "them as '-'; 'dlperf sweep --retry-failed' runs them again.")
