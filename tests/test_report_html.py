"""The one-file report: well-formed HTML, every plot embedded, a table of contents that
leads somewhere, sortable tables, no empty sections, failures with their reasons, the
Markdown twin, and predictions only when a predictor is given."""

from __future__ import annotations

import base64
from html.parser import HTMLParser

from dlperf.api import render_report as render
from dlperf.cli import main
from dlperf.core.store import Store
from tests.report_fixtures import fcn5_table

VOID = {"meta", "img", "br", "hr", "input", "link", "col", "area", "base", "source", "wbr"}
PNG = b"\x89PNG\r\n\x1a\n"


class Strict(HTMLParser):
    """Every opened tag closed in order, ids unique; collects images, links, tables."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.ids: list[str] = []
        self.imgs: list[str] = []
        self.hrefs: list[str] = []
        self.tables: list[dict] = []
        self.sections: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        if tag == "a" and "href" in a:
            self.hrefs.append(a["href"])
        if tag == "table":
            self.tables.append(a)
        if tag == "section":
            self.sections.append(a.get("id", ""))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()


def parse(text: str) -> Strict:
    p = Strict()
    p.feed(text)
    p.close()
    return p


def test_html_is_well_formed_self_contained_and_has_no_empty_sections(db, tmp_path):
    with Store(db) as st:
        fcn5_table(st)
        rep = render(st, tmp_path / "rep")
    text = rep.html.read_text()
    p = parse(text)
    assert p.errors == [] and p.stack == []
    assert len(p.ids) == len(set(p.ids))
    # every plot is a PNG inside the page: nothing to fetch
    assert p.imgs and all(src.startswith("data:image/png;base64,") for src in p.imgs)
    for src in p.imgs:
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG)
    assert "http://" not in text.split("<script>")[0].replace("http://www.w3.org", "")
    assert "<link" not in text and "src='http" not in text
    # the table of contents leads to every section, and only to sections that exist
    assert p.hrefs == [f"#{s}" for s in p.sections]
    names = {s.name for s in rep.sections}
    assert {"environment", "dlbench", "threads", "ranking", "reference", "failures"} <= names
    # no data, no section: no parallel runs, experiments or predictor here
    for absent in ("parallel", "families", "prediction", "dbn_pretraining"):
        assert absent not in names and f"sec-{absent}" not in p.ids
    # every table is sortable, and numbers sort by value, not by their text
    assert p.tables and all(t.get("class") == "sortable" for t in p.tables)
    assert "data-v='0.6'" in text and "addEventListener('click'" in text
    # every failure with its reason, in a section of its own
    fail = text[text.index("id='sec-failures'"):]
    assert "alexnet torch/eager cpu x2 b16" in fail and "timeout" in fail
    # the Markdown twin holds the same sections
    md = (rep.out_dir / "report.md").read_text()
    for sec in rep.sections:
        assert f"## {sec.title}" in md and f"(#sec-{sec.name})" in md
    assert "![thread_scaling](thread_scaling.png)" in md


def test_a_predictor_adds_predicted_cells_and_a_section_and_nothing_without_one(db, tmp_path):
    def stand_in(row):  # a model that knows fcn5 only, validated to +-25%
        spec = row.spec
        return (0.7 * spec.threads ** -0.5, 0.25) if spec.network == "fcn5" else None

    with Store(db) as st:
        fcn5_table(st)
        plain = render(st, tmp_path / "plain")
        rep = render(st, tmp_path / "pred", predictor=stand_in)
    table = next(s for s in rep.sections if s.name == "dlbench").tables[0]
    assert table.headers[4:] == ["1 thread", "pred.", "2 threads", "pred.", "4 threads", "pred."]
    torch = next(v for v in table.values if v[1] == "torch/eager" and v[0] == "fcn5")
    assert torch[4:6] == [1.0, 0.7] and abs(torch[7] - 0.7 / 2**0.5) < 1e-12
    alex = next(v for v in table.values if v[0] == "alexnet")
    assert alex[5] is None  # the model cannot predict it: no number is made up
    pred = next(s for s in rep.sections if s.name == "prediction").tables[0]
    assert len(pred.rows) == 6 and pred.headers[-2:] == ["validated error", "within it"]
    row = next(r for r, v in zip(pred.rows, pred.values, strict=True)
               if v[1] == "torch/eager" and v[2] == "cpu x1")
    assert row[6:] == ["-30%", "+-25%", "no"]
    assert parse(rep.html.read_text()).errors == []
    plain_table = next(s for s in plain.sections if s.name == "dlbench").tables[0]
    assert "pred." not in plain_table.headers
    assert "prediction" not in {s.name for s in plain.sections}


def test_report_html_flag_prints_the_path_last(db, tmp_path, capsys):
    with Store(db) as st:
        fcn5_table(st)
    out = tmp_path / "r"
    assert main(["report", "--db", str(db), "--out", str(out), "--html"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == str(out / "report.html")


def test_the_brief_study_is_one_network_per_kind_at_1_and_p_threads_and_fcn5_at_2p(monkeypatch):
    from dlperf.core import environment, settings
    from dlperf.engine import plan, presets
    from dlperf.kinds.step import guide_section

    monkeypatch.setattr(environment, "physical_cores", lambda: 2)
    configs = presets.dlbench(quick=False, brief=True, frameworks=["torch", "tensorflow"])
    specs = [s for _, cfg in configs for s in plan.expand(cfg)]
    assert {s.network for s in specs} == {"fcn5", "alexnet", "lstm32"}
    threads = {n: sorted({s.threads for s in specs if s.network == n})
               for n in ("fcn5", "alexnet", "lstm32")}
    # past the cores: the network the guide's thread findings read, and no other
    assert threads == {"fcn5": [1, 2, 4], "alexnet": [1, 2], "lstm32": [1, 2]}
    assert presets.BRIEF_PAST_CORES == guide_section.NETWORK
    assert len(specs) == 3 * 2 * 2 + 2 and len({s.run_id for s in specs}) == len(specs)
    # the quick settings: a later 'reproduce dlbench --quick' counts these results as its own
    assert {s.measurement for s in specs} == {settings.QUICK_MEASUREMENT}
    assert presets.brief_threads(4) == [1, 4, 8] and presets.brief_threads(1) == [1, 2]
    # thread counts the user gives apply to every network
    (_, cfg), = presets.dlbench(quick=False, brief=True, frameworks=["torch"], threads=[1, 4])
    assert {(s.network, s.threads) for s in plan.expand(cfg)} == {
        (n, t) for n in ("fcn5", "alexnet", "lstm32") for t in (1, 4)}


def test_a_column_of_sentences_wraps_in_the_terminal_and_leaves_room_for_the_others():
    """The advice's second column is sentences: kept on one line it took the terminal's
    width, cut itself short with '...' and squeezed 'number' and 'source' to nothing."""
    import io

    from rich.console import Console

    from dlperf.report.exporters import print_table
    from dlperf.report.tables import Table

    advice = ("workers and synchronisation: not measured here, and this machine's "
              "calibration does not predict it (a parallel run needs its collectives: "
              "dlperf calibrate --frameworks torch)")
    t = Table(title="advice", headers=["topic", "advice", "number", "source"],
              rows=[["devices and workers", advice, "12 h", "measured here"],
                    ["framework", "alexnet: tensorflow/graph is fastest", "854 ms", "model"]])
    buf = io.StringIO()
    print_table(t, Console(file=buf, width=100))
    text = buf.getvalue()
    assert "\u2026" not in text  # nothing cut short
    words = " ".join(text.replace("\u2502", " ").split())
    assert "12 h" in words and "measured here" in words and "854 ms" in words
    assert all(w in words for w in advice.split())
    # label columns stay on one line
    assert "devices and workers" in words and "tensorflow/graph" in text


def test_tables_whose_titles_share_their_first_40_characters_keep_a_file_each(db, tmp_path):
    """Each table is exported under its section's name and its title's slug (40
    characters); two titles alike that far (the data-flow section's per-configuration
    tables) are written to two files, not one over the other."""
    from dlperf.report import Section
    from dlperf.report import render as render_sections
    from dlperf.report.tables import Table

    title = "Data flow: alexnet torch/eager, 1 thread, batch 16, "
    tables = [Table("First", ["x"], [["0"]])] + [
        Table(title + tail, ["x"], [[tail]]) for tail in ("jpeg", "png", "raw")]
    with Store(db) as st:
        rep = render_sections(st, tmp_path / "rep",
                              [lambda store, out, filters: Section("flow", "Flow", tables)])
    md = sorted(p for p in rep.files if p.suffix == ".md" and p.name.startswith("flow_"))
    assert len(md) == len(set(md)) == 3
    assert sorted(p.read_text().split("|")[-2].strip() for p in md) == ["jpeg", "png", "raw"]
