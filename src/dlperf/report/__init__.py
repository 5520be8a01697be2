"""Reports: rendered from the store alone; nothing here runs a benchmark.

A report is a list of sections; each section has tables and plots. ``render`` writes
every section's tables as Markdown, CSV and JSON, its plots as PNG, and one HTML page
holding them all, into one folder.
"""

from __future__ import annotations

import base64
import html
import json
import time
from collections.abc import Callable
from pathlib import Path

from dlperf import environment, workloads
from dlperf.errors import UsageError
from dlperf.kinds.dataflow import InputOptions
from dlperf.report import exporters, plots
from dlperf.report.aggregate import ConfigResult, aggregate, over_peak_note
from dlperf.report.base import Filters, Report, Section
from dlperf.report.tables import detail_table, dlbench_table
from dlperf.spec import RunResult
from dlperf.store import Store


def step_rows(store: Store, filters: Filters = Filters()) -> list[ConfigResult]:
    return aggregate(store.results(kind="step", **filters.where()))


def dlbench_section(store: Store, out: Path, filters: Filters) -> Section | None:
    # the DLBench networks only, on synthetic data; the guide's families and the runs on
    # input pipelines have their own sections
    rows = [r for r in step_rows(store, filters)
            if (wl := workloads.WORKLOADS.get(r.spec.network)) and wl.group == "dlbench"
            and not (isinstance(r.spec.options, InputOptions) and r.spec.options.has_pipeline)]
    if not rows:
        return None
    imgs = [p for p in (
        plots.table_bars(rows, out / "dlbench_table.png"),
        plots.batch_size_curves(rows, out / "batch_size.png"),
        plots.thread_scaling(rows, out / "thread_scaling.png", environment.physical_cores()),
    ) if p]
    machines = machine_names(store, rows)
    return Section("dlbench", "DLBench: time per mini-batch",
                   tables=[dlbench_table(rows, machines=machines),
                           detail_table(rows, machines=machines)], images=imgs)


def machine_names(store: Store, rows: list[ConfigResult]) -> dict[str, str]:
    """Machine id -> 'CPU model, N cores, M GiB' from the environments the rows ran in."""
    names: dict[str, str] = {}
    for row in rows:
        r = row.results[0]
        if row.machine_id and row.machine_id not in names and r.env_id:
            m = (store.environment(r.env_id) or {}).get("machine")
            if m:
                names[row.machine_id] = (f"{m.get('cpu_model')}, {m.get('physical_cores')} "
                                         f"cores, {m.get('memory_bytes', 0) / 2**30:.0f} GiB")
    return names


def sections() -> list[Callable[[Store, Path, Filters], Section | None]]:
    """Every section builder, in report order: add a section here."""
    from dlperf.report import dataflow, experiments, inference, parallel

    return [dlbench_section, inference.inference_section, *experiments.sections(),
            parallel.parallel_section, dataflow.dataflow_section]


def render(store: Store, out_dir: str | Path, filters: Filters = Filters()) -> Report:
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"cannot write the report to {out}: {e}") from None
    built = [s for build in sections() if (s := build(store, out, filters))]
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
    files.append(_write_html(out, built, store))
    return Report(out, built, files)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")[:40]


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;margin:1em 0;font-size:14px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,td:nth-child(2),th{text-align:left}
.caption,.notes{color:#555;font-size:13px} img{max-width:100%}"""


def _write_html(out: Path, sections: list[Section], store: Store) -> Path:
    e = html.escape
    m = environment.machine()
    env = (f"{m['cpu_model']}, {m['physical_cores']} cores / {m['logical_cpus']} CPUs, "
           f"{m['memory_bytes'] / 2**30:.0f} GiB; store {store.path}")
    parts = [f"<!doctype html><meta charset='utf-8'><title>dlperf report</title><style>{_CSS}</style>",
             f"<h1>dlperf report</h1><p>{e(env)}<br>generated {time.strftime('%Y-%m-%d %H:%M')}</p>"]
    if not sections:
        parts.append("<p>The store holds no results yet: run <code>dlperf sweep</code> or "
                     "<code>dlperf reproduce dlbench --quick</code>.</p>")
    for sec in sections:
        parts.append(f"<h1>{e(sec.title)}</h1>")
        if sec.text:
            parts.append(f"<p>{e(sec.text)}</p>")
        parts += [exporters.to_html(t) for t in sec.tables]
        for img in sec.images:
            data = base64.b64encode(img.read_bytes()).decode()
            parts.append(f"<p><img alt='{e(img.stem)}' src='data:image/png;base64,{data}'></p>")
    p = out / "report.html"
    p.write_text("\n".join(parts))
    return p


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
