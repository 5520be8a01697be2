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
from rich.markup import escape
from rich.table import Table as RichTable

from dlperf.report.tables import Table


def to_markdown(t: Table) -> str:
    lines = [f"### {t.title}", ""]
    if t.caption:
        lines += [t.caption, ""]
    lines.append("| " + " | ".join(t.flat_headers()) + " |")
    lines.append("|" + "|".join("---" for _ in t.headers) + "|")
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in t.rows]
    if t.footnotes:
        lines += [""] + [f"{n}  " for n in t.footnotes]
    return "\n".join(lines) + "\n"


def to_csv(t: Table) -> str:
    """Raw numbers (seconds, FLOP/s, bytes) where there are numbers; the cell text otherwise."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(t.flat_headers())
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
        "headers": t.flat_headers(),
        "rows": t.values or t.rows,
        "footnotes": t.footnotes,
    }


def to_json(t: Table) -> str:
    return json.dumps(to_json_obj(t), indent=2, default=str)


#: the longest cell of a label column kept on one line in a terminal
LABEL_WIDTH = 40


def to_rich(t: Table) -> RichTable:
    rt = RichTable(title=t.title, caption=t.caption or None, caption_justify="left",
                   title_justify="left")
    for i, h in enumerate(t.flat_headers()):
        cells = [row[i] for row in t.rows if i < len(row)]
        numeric = _numeric_column(cells)
        # the leading label columns (network, framework) stay on one line; a column of
        # sentences (advice) wraps, or it would take the table's width from the others
        label = i < 2 and max(map(len, cells), default=0) <= LABEL_WIDTH
        rt.add_column(h, justify="right" if numeric else "left", no_wrap=label)
    for row in t.rows:
        rt.add_row(*(escape(c) for c in row))  # 'ffn [small]' is text, not rich markup
    return rt


def _numeric_column(cells: list[str]) -> bool:
    filled = [c for c in cells if c]
    return bool(filled) and sum(c[0].isdigit() or c[0] in "-+." for c in filled) > len(filled) / 2


def print_table(t: Table, console: Console | None = None) -> None:
    console = console or Console()
    console.print(to_rich(t))
    for n in t.footnotes:
        console.print(n, style="dim", highlight=False, markup=False)


def to_html(t: Table, table_id: str | None = None) -> str:
    """A sortable HTML table (the page's script sorts on a click on a header): each cell
    carries its raw number in ``data-v`` where it has one, so '934 ms' sorts below '1.2 s'."""
    e = html.escape
    top = ""
    if t.groups:
        top = "<tr>" + "".join(f"<th colspan='{n}' class='group'>{e(g)}</th>"
                               for g, n in t.groups) + "</tr>"
    head = "".join(f"<th title='sort'>{e(h)}</th>" for h in t.headers)
    vals = t.values if len(t.values) == len(t.rows) else [[] for _ in t.rows]
    body = "".join("<tr>" + "".join(_td(c, vrow[i] if i < len(vrow) else None)
                                    for i, c in enumerate(row)) + "</tr>"
                   for row, vrow in zip(t.rows, vals, strict=True))
    notes = "".join(f"<li>{e(n)}</li>" for n in t.footnotes)
    cap = f"<p class='caption'>{e(t.caption)}</p>" if t.caption else ""
    ident = f" id='{e(table_id)}'" if table_id else ""
    return (f"<h3>{e(t.title)}</h3>{cap}<table class='sortable'{ident}><thead>{top}<tr>{head}"
            f"</tr></thead><tbody>{body}</tbody></table>"
            + (f"<ul class='notes'>{notes}</ul>" if notes else ""))


def _td(cell: str, value: object) -> str:
    num = isinstance(value, int | float) and not isinstance(value, bool)
    attr = f" data-v='{value!r}'" if num and value == value else ""  # NaN: no number
    if not num and cell and not (cell[0].isdigit() or cell[0] in "-+."):
        attr += " class='t'"  # words read left-aligned, numbers right
    return f"<td{attr}>{html.escape(cell)}</td>"


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
