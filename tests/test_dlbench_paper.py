"""DLBench's own Table 4 beside this machine and today's model of the paper's hardware:
the shipped table, the paper's two CPUs in the catalogue, the section and its findings."""

from __future__ import annotations

import pytest

from dlperf.cli import main
from dlperf.core import environment
from dlperf.core.store import Store
from dlperf.kinds.step import paper_section
from dlperf.kinds.step.dlbench_findings_section import findings
from dlperf.perfmodel.predict import predict
from dlperf.reference import dlbench_table4, table4_machine
from dlperf.report.base import Filters
from tests.report_fixtures import result

VERDICTS = {"holds", "does not hold", "holds (predicted)", "does not hold (predicted)",
            "not measurable here"}


def test_table4_is_shipped_with_its_citation_and_batches():
    t4 = dlbench_table4()
    assert "Shi, Wang, Xu, Chu" in t4.citation[0]
    assert any("TensorFlow 0.9.0" in line for line in t4.citation)  # Table 1's versions
    assert t4.batch == {"fcn5": 64, "fcn8": 64, "alexnet": 16, "resnet50": 16, "lstm32": 128,
                        "lstm64": 128}
    assert t4.time("fcn5", "torch", "d4") == 0.661 and t4.time("fcn5", "caffe", "d8") is None
    assert table4_machine("d4") == ("i7-3820", 4)
    assert table4_machine("s16") == ("e5-2630v3-x2", 16)
    assert table4_machine("k80") == ("k80", None)


def test_the_papers_cpus_are_in_the_catalogue_and_threads_occupy_their_cores(capsys):
    assert main(["devices"]) == 0
    text = capsys.readouterr().out
    assert "i7-3820" in text and "e5-2630v3-x2" in text
    t = {n: predict("fcn5", device="i7-3820", threads=n).time_s for n in (1, 2, 4, 8)}
    assert 2 < t[1] / t[4] <= 4.0001  # four cores, not perfectly compute-bound
    assert t[1] > t[2] > t[4]
    assert t[8] == pytest.approx(t[4])  # a core's second hardware thread adds nothing
    assert predict("fcn5", device="i7-3820").time_s == pytest.approx(t[4])  # default: all
    assert main(["predict", "-n", "fcn5", "-d", "i7-3820", "--threads", "4"]) == 0
    assert "1 of its 4 cores" in main_out(["predict", "-n", "fcn5", "-d", "i7-3820", "-t", "1",
                                           "--json"], capsys)


def main_out(argv, capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


def _store_with(db, tf_lstm: float, torch_lstm: float):
    cores = environment.physical_cores()
    with Store(db) as s:
        for fw, t in (("tensorflow", tf_lstm), ("torch", torch_lstm)):
            for threads in sorted({1, cores}):
                s.add(result("lstm32", threads, t / threads, framework=fw, batch=128))
        s.add(result("fcn5", 1, 0.05, batch=64))
        s.add(result("fcn5", 1, 0.09, batch=128))  # not the paper's batch: not beside it


def test_the_section_sets_each_paper_cell_beside_this_machine_and_the_model(db, tmp_path):
    _store_with(db, tf_lstm=1.0, torch_lstm=2.0)
    with Store(db) as s:
        sec = paper_section.paper_section(s, tmp_path, Filters())
    cells, found, progress = sec.tables
    rows = {(r[0], r[1]): r for r in cells.values}
    assert rows[("fcn5", "torch")][2:5] == [1.227, 0.661, 0.039]  # the paper's, verbatim
    assert rows[("fcn5", "torch")][5] == pytest.approx(0.05)  # here, 1 thread, batch 64
    assert rows[("fcn5", "caffe*")][5] is None  # no measurement beside Caffe
    m_desk, ratio = rows[("fcn5", "torch")][7:9]
    assert m_desk == pytest.approx(predict("fcn5", device="i7-3820", threads=4,
                                           batch_size=64).time_s)
    assert ratio == pytest.approx(0.661 / m_desk)
    assert {f.verdict for f in findings(dlbench_table4(), paper_section.here_times(
        Store(db), dlbench_table4()), environment.physical_cores())} <= VERDICTS
    assert len(found.rows) == 8 and all(r[3] in VERDICTS for r in found.rows)
    rnn = next(r for r in found.rows if r[0].startswith("for RNNs on a CPU"))
    assert rnn[3] == "holds"  # TensorFlow faster than PyTorch here, as in the paper
    assert [s.split(":")[0] for s in progress.footnotes] == ["FCN", "CNN", "RNN"]
    assert sec.terminal == 2


def test_a_finding_that_fails_here_says_so(db, tmp_path):
    _store_with(db, tf_lstm=3.0, torch_lstm=1.0)
    with Store(db) as s:
        sec = paper_section.paper_section(s, tmp_path, Filters())
    rnn = next(r for r in sec.tables[1].rows if r[0].startswith("for RNNs on a CPU"))
    assert rnn[3] == "does not hold"
    many = next(r for r in sec.tables[1].rows if "16 cores" in r[0])
    if environment.physical_cores() < 16:
        assert many[3] == "not measurable here" and "physical cores" in many[2]


def test_the_report_and_its_terminal_summary_show_the_paper(db, tmp_path, capsys):
    _store_with(db, tf_lstm=1.0, torch_lstm=2.0)
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "r")]) == 0
    text = capsys.readouterr().out
    assert "DLBench's Table 4 beside this machine" in text
    assert "DLBench's findings, checked here" in text
    md = (tmp_path / "r" / "report.md").read_text()
    assert "The software's progress since 2016" in md
