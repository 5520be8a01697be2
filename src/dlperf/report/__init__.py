"""Reports: rendered from the store alone; nothing here runs a benchmark.

A report is a list of sections (``sections()``, in report order); each section has
tables and plots, and a section with no data is not built. ``render`` writes every
section's tables as Markdown, CSV and JSON, its plots as PNG, and one self-contained
HTML page and one Markdown file holding them all (``htmlpage``), into one folder.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

from dlperf import environment, workloads
from dlperf.dataflow.plan import has_pipeline
from dlperf.errors import UsageError
from dlperf.report import exporters, htmlpage, plots
from dlperf.report.aggregate import over_peak_note
from dlperf.report.base import Filters, Report, Section, step_rows
from dlperf.report.machines import machine_names
from dlperf.report.tables import Predictor, detail_table, dlbench_table
from dlperf.spec import RunResult
from dlperf.store import Store

__all__ = ["Filters", "Predictor", "Report", "Section", "render", "sections", "step_rows"]


def dlbench_section(store: Store, out: Path, filters: Filters,
                    predictor: Predictor | None = None) -> Section | None:
    # the DLBench networks only, on synthetic data; the guide's families and the runs on
    # input pipelines have their own sections
    rows = [r for r in step_rows(store, filters)
            if (wl := workloads.WORKLOADS.get(r.spec.network)) and wl.group == "dlbench"
            and not has_pipeline(r.spec)]
    if not rows:
        return None
    imgs = [p for p in (
        plots.table_bars(rows, out / "dlbench_table.png"),
        plots.batch_size_curves(rows, out / "batch_size.png"),
    ) if p]
    machines = machine_names(store, [r.results[0] for r in rows])
    return Section("dlbench", "DLBench: time per mini-batch",
                   tables=[dlbench_table(rows, machines=machines, predictor=predictor),
                           detail_table(rows, machines=machines)], images=imgs)


def sections(predictor: Predictor | None = None) -> list[Callable[[Store, Path, Filters],
                                                                   Section | None]]:
    """Every section builder, in report order: add a section here. ``predictor`` (a
    performance model, see ``tables.Predictor``) adds predicted times beside the measured
    ones and a section comparing the two; without one neither appears."""
    from dlperf.report import (
        advice,
        dataflow,
        experiments,
        failures,
        inference,
        machines,
        parallel,
        prediction,
        reference,
        threads,
    )

    return [machines.environment_section,
            functools.partial(dlbench_section, predictor=predictor),
            threads.thread_section, threads.ranking_section,
            inference.inference_section, *experiments.sections(), parallel.parallel_section,
            dataflow.dataflow_section,
            functools.partial(prediction.prediction_section, predictor=predictor),
            reference.reference_section, advice.advice_section, failures.failures_section]


def render(store: Store, out_dir: str | Path, filters: Filters = Filters(),
           predictor: Predictor | None = None) -> Report:
    """Every section with data, as tables (Markdown, CSV, JSON), plots (PNG), one
    self-contained ``report.html`` and one ``report.md``, into ``out_dir``."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"cannot write the report to {out}: {e}") from None
    built = [s for build in sections(predictor) if (s := build(store, out, filters))]
    files: list[Path] = []
    for sec in built:
        for i, t in enumerate(sec.tables):
            stem = sec.name if i == 0 else f"{sec.name}_{_slug(t.title)}"
            for ex in exporters.EXPORTERS:
                p = out / f"{stem}.{ex.suffix}"
                p.write_text(ex.render(t))
                files.append(p)
        files.extend(sec.images)
    files.append(write_raw_json(store, out / "results.json", filters))
    m = environment.machine()
    subtitle = (f"This machine: {m['cpu_model']}, {m['physical_cores']} cores / "
                f"{m['logical_cpus']} CPUs, {m['memory_bytes'] / 2**30:.0f} GiB; "
                f"store {store.path}")
    files.append(htmlpage.write_markdown(out, built, subtitle))
    files.append(htmlpage.write_html(out, built, subtitle))
    return Report(out, built, files)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")[:40]


def capped_share(r: RunResult) -> RunResult:
    """A result stored by an older dlperf may have a share of peak above 1: exported as 1,
    with a warning saying so (the achieved and peak rates themselves are kept)."""
    m = r.metrics
    if m is None or m.peak_share is None or m.peak_share <= 1.0:
        return r
    note = over_peak_note(m.achieved_flops, m.peak_flops)
    return r.model_copy(update={"metrics": m.model_copy(update={"peak_share": 1.0}),
                                "warnings": [*r.warnings, note]})


def write_raw_json(store: Store, path: Path, filters: Filters = Filters()) -> Path:
    """Every stored result (latest per run) as JSON, with the environments they ran in."""
    results = [capped_share(r) for r in store.results(kind=None, **filters.where())]
    envs = {r.env_id: store.environment(r.env_id) for r in results if r.env_id}
    path.write_text(json.dumps({"results": [r.model_dump() for r in results],
                                "environments": envs}, indent=1, default=str))
    return path
