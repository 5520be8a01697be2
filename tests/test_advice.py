"""dlperf advise: every recommendation carries its number and the number's source; from a
store made by the tests, from an empty one (it says what to run), for catalogue hardware
(predictions with or without a validated error), and bad input in one line."""

from __future__ import annotations

import json

import pytest

from dlperf import environment
from dlperf.advice import Measured, Predicted, Unknown, advise
from dlperf.cli import main
from dlperf.report.advice import advice_tables, rows_here
from dlperf.store import Store
from tests.report_fixtures import fcn5_table, result


@pytest.fixture(autouse=True)
def two_cores(monkeypatch):
    monkeypatch.setattr(environment, "physical_cores", lambda: 2)


def _here(db):
    with Store(db) as st:
        return rows_here(st)


def test_every_recommendation_has_a_number_and_its_source(db):
    with Store(db) as st:
        fcn5_table(st)  # tensorflow fastest; 4 threads still help tensorflow
        for t, s in ((1, 0.004), (2, 0.0025), (4, 0.0031)):  # ffn: past the cores slower
            st.add(result("ffn", t, s, size="small"))
        st.add(result("fcn5", 2, 0.3, batch=1024))
        st.add(result("fcn5", 2, batch=4096, fail="oom"))
    a = advise("simple-tabular", samples=1_000_000, epochs=10, hardware="this", rows=_here(db))
    h = a.hardware[0]
    for r in h.recommendations:  # a number with its source, or a command to get one
        assert (r.value is not None and isinstance(r.source, Measured | Predicted)) or (
            r.value is None and isinstance(r.source, Unknown) and
            r.source.command.startswith("dlperf "))
    net = {r.subject: r for r in h.of("network")}
    fcn5 = net["fcn5"]
    assert isinstance(fcn5.source, Measured)
    # time to train = samples x epochs / samples per second (the fastest: batch 1024 at 0.3 s)
    assert fcn5.value == pytest.approx(1_000_000 * 10 / (1024 / 0.3) / 3600)
    assert "CV 2.0%" in fcn5.source.describe()
    assert isinstance(net["autoencoder [small]"].source, Unknown)
    assert net["autoencoder [small]"].source.command == "dlperf run --network autoencoder --threads 2"
    fw = next(r for r in h.of("framework") if r.subject == "fcn5")
    assert "only torch/eager measured" in fw.advice  # at batch 1024 only torch ran
    threads = next(r for r in h.of("threads") if r.subject == "ffn [small]")
    assert threads.value == 2 and "slow it down" in threads.advice
    batch = next(r for r in h.of("batch") if r.subject == "fcn5")
    assert batch.value == 1024 and "4096 ran out of memory" in batch.advice
    assert isinstance(batch.source, Measured)
    big = next(r for r in h.of("batch") if r.subject == "ffn [large]")
    assert isinstance(big.source, Predicted) and "error not validated yet" in big.source.describe()
    data = h.of("data")[0]
    assert data.unit == "MB/s" and "storage" in data.advice


def test_an_empty_store_says_what_to_run(db, capsys):
    code = main(["advise", "--task", "image-classification", "--samples", "1.2M", "--epochs",
                 "90", "--hardware", "this", "--db", str(db)])
    assert code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1,200,000 samples x 90 epochs" in out
    assert "dlperf run --network resnet50 --threads 2" in out
    assert "dlperf parallel --network resnet50 --strategy sync,async,mixed" in out
    assert "not measured here" in out


def test_catalogue_hardware_is_predicted_with_its_validated_error(db):
    def errors(p):  # a validation that knows synchronous runs only
        return 0.2 if p.strategy == "sync" else None

    a = advise("image-classification", samples=1_200_000, epochs=90,
               hardware="this, a100-40gb:4", rows=_here(db), errors=errors)
    gpu = a.hardware[1]
    assert gpu.hardware == "4 x a100-40gb"
    resnet = next(r for r in gpu.of("network") if r.subject == "resnet50")
    assert isinstance(resnet.source, Predicted) and resnet.value > 0
    devices = gpu.of("devices")
    assert {r.advice.split(":")[0] for r in devices} >= {"4 devices, sync", "4 devices, async"}
    sync = next(r for r in devices if "sync:" in r.advice)
    assert sync.source.error == 0.2 and "validated error +-20%" in sync.source.describe()
    asyn = next(r for r in devices if "async:" in r.advice)
    assert asyn.source.error is None and "error not validated yet" in asyn.source.describe()
    assert "efficiency" in sync.advice
    tables = advice_tables(a)
    assert tables[0].headers == ["network", "this machine", "4 x a100-40gb"]
    row = next(r for r in tables[0].rows if r[0] == "resnet50")
    assert row[1] == "-" and row[2].endswith("(predicted)")


def test_json_output(db, capsys):
    assert main(["advise", "--task", "generation", "--samples", "50k", "--hardware", "v100",
                 "--json", "--db", str(db)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["task"] == "generation" and data["samples"] == 50000
    recs = data["hardware"][0]["recommendations"]
    assert recs and all("value" in r for r in recs)
    assert {r["source"]["kind"] for r in recs} <= {"measured", "predicted", "unknown"}
    assert any("error not validated yet" in r["source"]["text"] for r in recs)


@pytest.mark.parametrize("args, message", [
    (["--task", "painting", "--samples", "1k"], "unknown task 'painting'"),
    (["--task", "sequences", "--samples", "lots"], "--samples: 'lots' is not a sample count"),
    (["--task", "sequences", "--samples", "1k", "--hardware", "tpu9"], "unknown device 'tpu9'"),
    (["--task", "sequences", "--samples", "1k", "--hardware", "this:4"], "give no count"),
    (["--task", "sequences", "--samples", "1k", "--epochs", "0"], "--epochs"),
])
def test_bad_input_is_one_line(db, capsys, args, message):
    assert main(["advise", *args, "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
