"""The guide's thread table as reference data: loaded as typed reference rows with their
citation, shown beside this machine's fcn5, never counted as measurements, and its
findings checked one by one."""

from __future__ import annotations

import pytest

from dlperf.api import render_report as render
from dlperf.core import environment
from dlperf.core.spec import RunResult
from dlperf.core.store import Store
from dlperf.kinds.step.guide_section import findings, local_times
from dlperf.reference import ReferenceRow, guide_table1
from tests.report_fixtures import fcn5_table, result

PUBLISHED = (1.324, 0.790, 0.578, 15.444, 7.062, 4.789, 2.648, 1.938, 1.329, 0.710, 0.423)


@pytest.fixture(autouse=True)
def two_cores(monkeypatch):
    monkeypatch.setattr(environment, "physical_cores", lambda: 2)


def test_the_table_ships_with_its_citation_as_typed_reference_rows():
    ref = guide_table1()
    assert ref.batch_size == 64 and ref.physical_cores == 4 and ref.cpu == "Intel i7-3820"
    assert all(isinstance(r, ReferenceRow) and not isinstance(r, RunResult) for r in ref.rows)
    assert ref.time("caffe", 8) == 15.444 and ref.time("tensorflow", 1) == 7.062
    assert ref.time("torch", 8) is None  # 'na' in the source
    assert sorted(v for r in ref.rows for v in r.seconds.values() if v) == sorted(PUBLISHED)
    assert any("DLBench" in line for line in ref.citation)


def test_reference_rows_are_shown_cited_and_never_counted_as_measurements(db, tmp_path):
    with Store(db) as st:
        fcn5_table(st)
        n = st.count()
        rep = render(st, tmp_path / "rep")
        assert st.count() == n  # nothing was stored
        stored = [m.metrics.median_s for m in st.results(kind=None) if m.metrics]
    assert not set(PUBLISHED) & set(stored)
    sec = next(s for s in rep.sections if s.name == "reference")
    table = sec.tables[0]
    published = [r for r in table.rows if r[0].startswith("published [1]")]
    assert [r[1] for r in published] == ["caffe", "tensorflow", "torch"]
    assert published[0][2:] == ["1.324", "0.79", "0.578", "15.44"]
    assert any(n.startswith("[1] The guide's thread table") for n in table.footnotes)
    here = [v for v in table.values if v[0].startswith("measured here")]
    assert {v[1]: v[2:5] for v in here} == {"tensorflow": [0.8, 0.5, 0.45],
                                            "torch": [1.0, 0.6, 0.9]}
    # no other section holds a published number or the reference's tools (but the one of
    # DLBench's own table, published numbers too, marked as such: tests/test_dlbench_paper)
    for other in (s for s in rep.sections if s.name not in ("reference", "dlbench_paper")):
        for t in other.tables:
            cells = {c for row in t.values for c in row if isinstance(c, float)}
            assert not cells & set(PUBLISHED), (other.name, t.title)
            assert "caffe" not in str(t.rows)
    html = rep.html.read_text()
    assert "class='reference'" in html


def test_findings_hold_or_not_finding_by_finding(db):
    with Store(db) as st:
        fcn5_table(st)  # torch 1.0/0.6/0.9 s, tensorflow 0.8/0.5/0.45 s at 1/2/4 threads
        here = local_times(st, 2)
    verdicts = {f.claim: (f.verdict, f.here) for f in findings(here, 2)}
    assert verdicts["torch: all the physical cores beat one thread"] == (
        "holds", "1.67x from 1 to 2 threads")
    assert verdicts["Torch gains more from the cores than TensorFlow"][0] == "holds"
    assert verdicts["tensorflow: more threads than physical cores still speeds it up"] == (
        "holds", "0.90x the time at 2 threads with 4 (faster)")
    assert verdicts["torch: more threads than physical cores (no published number)"][0] == \
        "no reference"
    assert verdicts["More threads than physical cores can slow training down"] == (
        "holds", "slower past the cores: torch")
    assert verdicts["TensorFlow is the slowest at one thread"][0] == "does not hold"
    assert verdicts["caffe: more threads than physical cores slows it down"][0] == \
        "not measured here"


def test_without_fcn5_here_each_finding_says_what_to_run(db):
    with Store(db) as st:
        st.add(result("fcn5", 1, 1.0))  # one thread only, torch only
        st.add(result("fcn5", 2, 0.5, batch=128))  # not the paper's batch: not its FCN
        here = local_times(st, 2)
    assert {fw: sorted(by) for fw, by in here.items()} == {"torch": [1]}
    found = findings(here, 2)
    missing = [f for f in found if f.verdict == "not measured here" and f.command]
    assert missing and all(f.command.startswith("dlperf sweep --networks fcn5") for f in missing)
    assert any("--threads 1,2,4" in f.command for f in missing)


def test_published_gpu_times_ship_with_their_source_and_catalogue_entries():
    from dlperf.perfmodel import catalogue
    from dlperf.reference import published_gpu

    pub = published_gpu()
    assert any("github.com/lambdal/deeplearning-benchmark" in line for line in pub.citation)
    assert len(pub.rows) == 16 and {r.network for r in pub.rows} == {"resnet50"}
    for r in pub.rows:
        assert catalogue.device(r.device).kind == "gpu"
        assert r.time_s == pytest.approx(r.batch_size / r.samples_per_s)
    sxm = next(r for r in pub.rows if r.gpu == "A100 80GB SXM4" and r.precision == "tf32")
    assert (sxm.batch_size, sxm.samples_per_s, sxm.published_precision) == (640, 1066, "fp32")


def test_measured_gpu_steps_name_their_machine_and_command_and_are_not_the_reference_gpu():
    """The steps dlperf measured on a lent GPU: their machine, software and command in the
    file, a catalogue GPU for each, and never the GPU the reference curves come from."""
    from dlperf.perfmodel import catalogue
    from dlperf.perfmodel.scaled import reference
    from dlperf.reference import measured_gpu

    m = measured_gpu()
    cite = " ".join(m.citation)
    assert "dlperf sweep" in cite and "H100 80GB HBM3" in cite and "cuDNN" in cite
    assert len(m.rows) == 19 and {r.network for r in m.rows} == {"fcn5", "alexnet", "lstm32",
                                                                 "resnet50", "gpt2"}
    assert {r.size for r in m.rows if r.network == "gpt2"} == {"small", "medium"}
    assert {r.precision for r in m.rows} == {"fp32", "tf32", "bf16", "fp16"}
    ref = reference()
    for r in m.rows:
        assert catalogue.device(r.device).kind == "gpu" and r.device != ref.device
        assert r.gpus == 1 and r.time_s == pytest.approx(r.batch_size / r.samples_per_s)


def test_validate_published_predicts_every_row_from_the_catalogue_beside_a_roofline(capsys):
    """Each published time against dlperf predict (the reference GPU's curves scaled), the
    datasheet roofline with efficiency factors and a plain roofline; the plain roofline
    (full efficiency, no launch cost) is never slower than the factors' model."""
    import json

    from dlperf.cli import main
    from dlperf.perfmodel import Efficiencies, predict

    assert main(["validate", "--published", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["cases"]) == 16
    for c in doc["cases"]:
        assert c["error"] == pytest.approx(c["predicted_s"] / c["published_s"] - 1)
        assert c["factors_error"] == pytest.approx(c["factors_s"] / c["published_s"] - 1)
        assert c["roofline_s"] <= c["factors_s"]
    a100 = next(c for c in doc["cases"] if c["gpus"] == 1 and c["device"] == "a100-80gb")
    assert a100["factors_s"] == pytest.approx(predict(
        "resnet50", device="a100-80gb", batch_size=a100["batch_size"],
        precision=a100["precision"], efficiencies=Efficiencies(scaled=False)).time_s)
    one = next(c for c in doc["cases"] if c["gpus"] == 1 and c["device"] == "v100")
    assert one["predicted_s"] == pytest.approx(
        predict("resnet50", device="v100", batch_size=128, precision="fp32").time_s)
    eight = next(c for c in doc["cases"] if c["gpus"] == 8 and c["precision"] == "tf32")
    assert eight["predicted_s"] == pytest.approx(predict(
        "resnet50", device="a100-80gb", batch_size=5120, precision="tf32", strategy="sync",
        devices=8).time_s)
    errs = sorted(abs(c["error"]) for c in doc["cases"])
    assert doc["summary"]["catalogue"]["median_abs"] == pytest.approx(
        (errs[7] + errs[8]) / 2)
    assert set(doc["summary"]) == {"catalogue", "factors", "roofline"}
    measured = doc["measured"]
    assert len(measured["cases"]) == 19 and "dlperf sweep" in " ".join(measured["citation"])
    lstm = next(c for c in measured["cases"] if c["network"] == "lstm32")
    assert lstm["predicted_s"] == pytest.approx(predict(
        "lstm32", device="h100-sxm", batch_size=lstm["batch_size"], precision="fp32").time_s)
    assert lstm["error"] == pytest.approx(lstm["predicted_s"] / lstm["published_s"] - 1)
    medium = next(c for c in measured["cases"] if c["size"] == "medium")
    assert medium["predicted_s"] == pytest.approx(predict(
        "gpt2", size="medium", device="h100-sxm", batch_size=4, precision="bf16").time_s)
    assert main(["validate", "--published"]) == 0
    text = capsys.readouterr().out
    assert "plain roofline: median |error|" in text and "lambdal" in text
    assert "(19 steps measured there)" in text and "gpt2[medium]" in text
    assert "reference curves: h200" in text


def test_measured_gpu_peaks_name_their_machine_and_which_were_held_out(capsys):
    """The allocator peaks dlperf measured on a lent H200: the machine, software and
    command in the file, each row's session; ``validate --published`` sets the memory model
    beside every row, and ``advise`` quotes its error for a catalogue GPU's largest batch."""
    import json

    from dlperf.cli import main
    from dlperf.perfmodel import memory
    from dlperf.reference import measured_gpu_memory
    from dlperf.report.published_memory import gpu_memory_error

    cite, rows = measured_gpu_memory()
    text = " ".join(cite)
    assert "H200" in text and "bench_memory.py --device gpu" in text and "held-out" in text
    assert len(rows) == 20 and {r.session for r in rows} == {"first", "held-out"}
    assert {(r.network, r.precision) for r in rows} >= {("gpt2", "bf16"),
                                                       ("resnet50", "fp32"),
                                                       ("resnet50", "bf16")}
    assert main(["validate", "--published", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["memory"]
    assert len(doc["cases"]) == 20
    small = next(c for c in doc["cases"] if c["network"] == "gpt2" and c["batch_size"] == 2)
    from dlperf import workloads

    _, _, cfg = workloads.resolve("gpt2", "small", {})
    assert small["predicted_bytes"] == memory.step_memory(cfg.layers(), 2, "bf16",
                                                          on_device=True).total
    assert small["error"] == pytest.approx(
        small["predicted_bytes"] / small["measured_bytes"] - 1)
    err = gpu_memory_error()
    assert doc["summary"]["median_abs"] == err.median and err.n == 20
    # advise quotes its 90th percentile for a GPU's largest batch, and leaves it as margin
    assert main(["advise", "--task", "image-classification", "--samples", "1.2M",
                 "--hardware", "a100-40gb"]) == 0
    out = capsys.readouterr().out
    assert (f"validated error +-{err.p90:.0%}; the 90th percentile |error| over 20 steps' "
            "allocator") in out
    assert f"per device fit in 40 GB, leaving {err.p90:.0%} for the model's error" in out
    from dlperf.advice.predicted import _batch
    from dlperf.perfmodel import catalogue
    from dlperf.perfmodel.predict import training_memory

    # a GPU where ResNet-50's batch 128 fits by the model alone, but not with the margin
    need = training_memory("resnet50", batch_size=128, on_device=True)
    dev = catalogue.device("a100-40gb").model_copy(
        update={"memory_gb": need * (1 + err.p90 / 2) / 1e9})
    assert _batch("resnet50", "full", dev, None).value == 128
    assert _batch("resnet50", "full", dev, err).value == 64


def test_advise_quotes_the_catalogues_error_for_the_kinds_of_prediction_it_was_checked_on():
    """A catalogue GPU's predicted time carries the 90th percentile |error| of its kind over
    the shipped GPU steps (one GPU: both sets' single-GPU rows; sync: the published
    multi-GPU rows); a strategy no shipped step ran stays "not validated yet"."""
    import numpy as np

    from dlperf.advice import advise
    from dlperf.reference import measured_gpu, published_gpu
    from dlperf.report.published import published_cases
    from dlperf.report.published_time import catalogue_error

    cases = [*published_cases(published_gpu()), *published_cases(measured_gpu())]
    single = np.percentile([abs(c.error) for c in cases if c.row.gpus == 1], 90)
    sync = np.percentile([abs(c.error) for c in cases if c.row.gpus > 1], 90)
    assert single != sync
    one = advise("image-classification", samples=1_200_000, epochs=90, hardware="a100-40gb",
                 errors=catalogue_error).hardware[0]
    [resnet] = [r for r in one.recommendations if r.topic == "network"
                and r.subject == "resnet50"]
    assert resnet.source.error == pytest.approx(single)
    assert "dlperf validate --published" in resnet.source.basis
    four = advise("image-classification", samples=1_200_000, epochs=90,
                  hardware="a100-40gb:4", errors=catalogue_error).hardware[0]
    devices = {r.advice.split(":")[0]: r.source for r in four.recommendations
               if r.topic == "devices"}
    assert devices["4 devices, sync"].error == pytest.approx(sync)
    assert devices["4 devices, async"].error is None
    assert "error not validated yet" in devices["4 devices, async"].describe()
