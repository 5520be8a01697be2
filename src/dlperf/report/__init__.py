"""Reports: rendered from the store alone; nothing here runs a benchmark.

A report is a list of sections, each built by a builder ``(store, out, filters) ->
Section | None`` (a section with no data is not built); the builders come from the kinds
of run and from advice, listed in report order by ``dlperf.api.report_sections``. Each section has
tables and plots. ``render`` writes every
section's tables as Markdown, CSV and JSON, its plots as PNG, and one self-contained
HTML page and one Markdown file holding them all (``htmlpage``), into one folder.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from dlperf.core import environment
from dlperf.core.aggregate import over_peak_note
from dlperf.core.errors import UsageError
from dlperf.core.spec import RunResult
from dlperf.core.store import Store
from dlperf.report import exporters, htmlpage
from dlperf.report.base import Filters, Report, Section
from dlperf.report.tables import Predictor

#: (store, output folder, filters) -> a section, or None where it has no data
SectionBuilder = Callable[[Store, Path, Filters], Section | None]

__all__ = ["Filters", "Predictor", "Report", "Section", "SectionBuilder", "render"]


def render(store: Store, out_dir: str | Path, builders: Sequence[SectionBuilder],
           filters: Filters = Filters()) -> Report:
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
    built = [s for build in builders if (s := build(store, out, filters))]
    files: list[Path] = []
    stems: set[str] = set()
    for sec in built:
        for i, t in enumerate(sec.tables):
            stem = _unique(sec.name if i == 0 else f"{sec.name}_{_slug(t.title)}", stems)
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


def _unique(stem: str, taken: set[str]) -> str:
    """``stem``, or ``stem_2``, ``stem_3``, ... where a table written before took it: two
    titles that differ only past the slug's 40 characters (the data-flow section's
    per-configuration tables) must not write one file over the other."""
    name, n = stem, 1
    while name in taken:
        n += 1
        name = f"{stem}_{n}"
    taken.add(name)
    return name


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
