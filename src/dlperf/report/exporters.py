"""One exporter interface behind every format: a Table in, text out."""

from __future__ import annotations

import csv
import html
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable

from dlperf.report.tables import Table


def to_markdown(t: Table) -> str:
    lines = [f"### {t.title}", ""]
    if t.caption:
        lines += [t.caption, ""]
    lines.append("| " + " | ".join(t.headers) + " |")
    lines.append("|" + "|".join("---" for _ in t.headers) + "|")
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in t.rows]
    if t.footnotes:
        lines += [""] + [f"{n}  " for n in t.footnotes]
    return "\n".join(lines) + "\n"


def to_csv(t: Table) -> str:
    """Raw numbers (seconds, FLOP/s, bytes) where there are numbers; the cell text otherwise."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(t.headers)
    src = t.values or t.rows
    for vals, cells in zip(src, t.rows, strict=True):
        w.writerow([c if v is None else v for v, c in zip(vals, cells, strict=True)])
    for n in t.footnotes:
        w.writerow([f"# {n}"])
    return buf.getvalue()


def to_json_obj(t: Table) -> dict[str, Any]:
    return {
        "title": t.title,
        "caption": t.caption,
        "headers": t.headers,
        "rows": t.values or t.rows,
        "footnotes": t.footnotes,
    }


def to_json(t: Table) -> str:
    return json.dumps(to_json_obj(t), indent=2, default=str)


def to_rich(t: Table) -> RichTable:
    rt = RichTable(title=t.title, caption=t.caption or None, caption_justify="left",
                   title_justify="left")
    for i, h in enumerate(t.headers):
        numeric = _numeric_column([row[i] for row in t.rows if i < len(row)])
        rt.add_column(h, justify="right" if numeric else "left", no_wrap=i < 2)
    for row in t.rows:
        rt.add_row(*row)
    return rt


def _numeric_column(cells: list[str]) -> bool:
    filled = [c for c in cells if c]
    return bool(filled) and sum(c[0].isdigit() or c[0] in "-+." for c in filled) > len(filled) / 2


def print_table(t: Table, console: Console | None = None) -> None:
    console = console or Console()
    console.print(to_rich(t))
    for n in t.footnotes:
        console.print(n, style="dim", highlight=False, markup=False)


def to_html(t: Table) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in t.headers)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    notes = "".join(f"<li>{e(n)}</li>" for n in t.footnotes)
    cap = f"<p class='caption'>{e(t.caption)}</p>" if t.caption else ""
    return (f"<h2>{e(t.title)}</h2>{cap}<table><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>" + (f"<ul class='notes'>{notes}</ul>" if notes else ""))


@dataclass(frozen=True)
class Exporter:
    """One file format for a table. A new format is one function and one entry in
    ``EXPORTERS``; ``dlperf report`` then writes it for every table of every section."""

    suffix: str
    render: Callable[[Table], str]


#: the file formats written for each table (the HTML page embeds ``to_html`` of each)
EXPORTERS: tuple[Exporter, ...] = (
    Exporter("md", to_markdown),
    Exporter("csv", to_csv),
    Exporter("json", to_json),
)
