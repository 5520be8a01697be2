"""The one-file report: every section of the store in one self-contained HTML page (a
table of contents, sortable tables, plots embedded as data URIs, no network needed) and
the same sections in one Markdown file.

Sections arrive already built; a section with nothing in it was never built, so the page
has no empty headings. The HTML is written with every element closed explicitly, so a
strict parser (the test's) reads it as well formed.
"""

from __future__ import annotations

import base64
import html
import time
from pathlib import Path

from dlperf.report import exporters
from dlperf.report.base import Section

_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1250px;padding:0 1em;
color:#222}
h1{border-bottom:2px solid #ccc;padding-bottom:.2em}
h2{margin-top:2.2em;border-bottom:1px solid #ddd}
nav{background:#f6f6f6;border:1px solid #ddd;padding:.4em 1.2em;display:inline-block}
nav ol{margin:.3em 0;padding-left:1.4em}
table{border-collapse:collapse;margin:.6em 0 1em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:right;vertical-align:top}
td:first-child,td:nth-child(2),td.t,th{text-align:left}
th{background:#f0f0f0;cursor:pointer;user-select:none}
th.group{background:#e4e9f2;text-align:center;cursor:default}
th.asc::after{content:" \\25B2"} th.desc::after{content:" \\25BC"}
tbody tr:nth-child(even){background:#fafafa}
.caption,.notes,.meta{color:#555;font-size:13px}
.reference{border-left:4px solid #c80;padding-left:1em;background:#fffaf0}
img{max-width:100%;border:1px solid #eee}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto}"""

# Sorting: a click on a header of the last header row sorts the body by that column,
# numbers by their data-v value (the raw number behind '934 ms'), text otherwise; blank
# and '-' cells go last. A second click reverses.
_JS = """document.querySelectorAll('table.sortable').forEach(function(t){
 var heads=t.tHead.rows[t.tHead.rows.length-1].cells;
 Array.prototype.forEach.call(heads,function(th,i){th.addEventListener('click',function(){
  var asc=!th.classList.contains('asc');
  Array.prototype.forEach.call(heads,function(h){h.classList.remove('asc','desc');});
  th.classList.add(asc?'asc':'desc');
  var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows);
  function key(r){var c=r.cells[i];if(!c)return null;
   if(c.dataset.v!==undefined)return parseFloat(c.dataset.v);
   var s=c.textContent.trim();if(s===''||s.charAt(0)==='-')return null;
   var n=parseFloat(s);return isNaN(n)?s.toLowerCase():n;}
  rows.sort(function(a,b){var x=key(a),y=key(b);
   if(x===null)return y===null?0:1;if(y===null)return -1;
   if(typeof x!==typeof y){x=String(x);y=String(y);}
   return (x<y?-1:x>y?1:0)*(asc?1:-1);});
  rows.forEach(function(r){body.appendChild(r);});});});});"""


def anchor(sec: Section) -> str:
    return f"sec-{sec.name}"


def _image(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f"<p><img alt='{html.escape(path.stem)}' src='data:image/png;base64,{data}'></p>"


def write_html(out: Path, sections: list[Section], subtitle: str) -> Path:
    """``report.html`` in ``out``: a table of contents, then every section."""
    e = html.escape
    parts = ["<!doctype html>", "<html lang='en'><head><meta charset='utf-8'>",
             "<title>dlperf report</title>", f"<style>{_CSS}</style></head><body>",
             "<h1>dlperf report</h1>",
             f"<p class='meta'>{e(subtitle)}; generated {time.strftime('%Y-%m-%d %H:%M')}</p>"]
    if sections:
        parts.append("<nav><strong>Contents</strong><ol>" + "".join(
            f"<li><a href='#{anchor(s)}'>{e(s.title)}</a></li>" for s in sections) + "</ol></nav>")
    else:
        parts.append("<p>The store holds no results yet: run <code>dlperf sweep</code> or "
                     "<code>dlperf reproduce dlbench --quick</code>.</p>")
    for sec in sections:
        cls = " class='reference'" if sec.name == "reference" else ""
        parts.append(f"<section id='{anchor(sec)}'{cls}><h2>{e(sec.title)}</h2>")
        if sec.text:
            parts += [f"<p>{e(para)}</p>" for para in sec.text.split("\n\n")]
        parts += [exporters.to_html(t, f"{sec.name}-t{i}") for i, t in enumerate(sec.tables)]
        parts += [_image(img) for img in sec.images]
        parts.append("</section>")
    parts.append(f"<script>{_JS}</script></body></html>")
    p = out / "report.html"
    p.write_text("\n".join(parts))
    return p


def write_markdown(out: Path, sections: list[Section], subtitle: str) -> Path:
    """``report.md`` in ``out``: the same sections, plots as the PNG files beside it."""
    lines = ["# dlperf report", "", subtitle, ""]
    if sections:
        lines += ["## Contents", ""] + [f"1. [{s.title}](#{anchor(s)})" for s in sections] + [""]
    else:
        lines += ["The store holds no results yet: run `dlperf sweep` or "
                  "`dlperf reproduce dlbench --quick`.", ""]
    for sec in sections:
        lines += [f'<a id="{anchor(sec)}"></a>', "", f"## {sec.title}", ""]
        if sec.text:
            lines += [sec.text, ""]
        lines += [exporters.to_markdown(t) for t in sec.tables]
        lines += [f"![{img.stem}]({img.name})" for img in sec.images] + [""]
    p = out / "report.md"
    p.write_text("\n".join(lines))
    return p
