"""dlperf advise: every recommendation carries its number and the number's source; from a
store made by the tests, from an empty one (it says what to run), for catalogue hardware
(predictions with or without a validated error), and bad input in one line."""

from __future__ import annotations

import json

import pytest

from dlperf.advice import Measured, Predicted, Unknown, advise
from dlperf.advice.section import advice_tables, number, rows_here
from dlperf.cli import main
from dlperf.core import environment
from dlperf.core.store import Store
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
        # out of memory under a limit of its own: another memory's answer, not this one's
        small = result("fcn5", 2, batch=2048, fail="oom")
        st.add(small.model_copy(update={"spec": small.spec.model_copy(
            update={"memory_limit": 2**30})}))
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
    store_rec = next(r for r in h.of("data") if r.subject == "storage")
    assert store_rec.unit == "MB/s" and "dlperf dataflow storage --path DIR" in store_rec.advice
    # the tabular task's DLBench candidate (input pipelines exist for those alone)
    pipe = next(r for r in h.of("data") if r.subject.startswith("input pipeline"))
    assert isinstance(pipe.source, Unknown) and pipe.source.command == (
        "dlperf dataflow sweep --network fcn5 --loader-workers 0,1,2 --prefetch 0,2")


def test_threads_not_measured_past_the_cores_say_the_command_that_measures_them(db):
    with Store(db) as st:  # the brief study's alexnet: 1 thread and the 2 cores only
        for t, s in ((1, 0.9), (2, 0.5)):
            st.add(result("alexnet", t, s, batch=16))
    a = advise("image-classification", samples=1_000_000, epochs=1, hardware="this",
               rows=_here(db))
    threads = next(r for r in a.hardware[0].of("threads") if r.subject == "alexnet")
    assert threads.value == 2
    assert threads.advice.endswith(
        "past the 2 physical cores not measured (dlperf sweep --networks alexnet "
        "--frameworks torch --threads 2,4 --batch-size 16)")


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
    predicted = [r["source"]["text"] for r in recs if r["source"]["kind"] == "predicted"]
    # one GPU's predictions carry the catalogue's error over the shipped GPU steps
    assert predicted and all("validated error +-" in t or "error not validated yet" in t
                             for t in predicted)
    assert any("validated error +-" in t and "dlperf validate --published" in t
               for t in predicted)


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


# ----------------------------------------------------------------------------- data
def _on_pipeline(median: float, share: float, workers: int, data_set_bytes: int = 0,
                 kind: str = "step", size: str = "full"):
    """alexnet at batch 16 on disk JPEG files with ``workers`` loader workers, waiting
    ``share`` of each step (a loader run: ``median`` per batch, no training)."""
    from dlperf.inputs.options import InputOptions
    from dlperf.kinds import StepOutcome
    from dlperf.kinds.dataflow import plan as dplan
    from dlperf.kinds.dataflow.options import DataflowOutcome

    base = result("alexnet", 2, median, batch=16, size=size)
    opts = InputOptions(input="disk", data_format="jpeg", loader_workers=workers, samples=512)
    spec = dplan.with_options([base.spec], opts)[0]
    if kind == "loader":
        spec = dplan.loader_spec(spec)
    o = DataflowOutcome(kind=kind, stall_s=[share * median] * 5, stall_share=share,
                        stall_mean_s=share * median, data_set_bytes=data_set_bytes,
                        loader_samples_per_s=16 / median if kind == "loader" else None)
    return base.model_copy(update={"spec": spec, "outcome": o if kind == "loader" else
                                   StepOutcome(dataflow=o)})


def _storage(seq: float, rand: float):
    from dlperf.core.spec import RunResult
    from dlperf.kinds.dataflow.options import StorageOutcome
    from dlperf.kinds.dataflow.storage_run import storage_spec

    spec = storage_spec(__import__("pathlib").Path("/"), 2**20, "direct")
    o = StorageOutcome(tool="direct", method="O_DIRECT", file_bytes=2**20,
                       seq_bytes_per_s=seq, seq_block=2**20, rand_bytes_per_s=rand,
                       rand_block=4096)
    return RunResult(spec=spec, status="ok", outcome=o, started_at=1.0, finished_at=2.0)


def test_data_advice_reads_the_pipelines_and_the_storage_measured_here(db):
    with Store(db) as st:
        st.add(result("alexnet", 2, 0.1, batch=16))  # synthetic: 160 samples/s
        st.add(_on_pipeline(0.25, 0.60, 0, data_set_bytes=512 * 50_000))
        st.add(_on_pipeline(0.105, 0.02, 2, data_set_bytes=512 * 50_000))
        st.add(_storage(seq=400e6, rand=5e6))
    h = advise("image-classification", samples=1000, epochs=1, rows=_here(db)).hardware[0]
    # the processor's own rate is the synthetic run's, not the pipeline's
    net = next(r for r in h.of("network") if r.subject == "alexnet")
    assert net.value == pytest.approx(1000 / 160 / 3600)
    pipe = next(r for r in h.of("data") if r.subject == "input pipeline for alexnet")
    assert isinstance(pipe.source, Measured) and pipe.value == pytest.approx(2.0)
    assert "disk:jpeg w2 p0 waits 2.0% of each step" in pipe.advice
    assert number(pipe) == "2.0% of the step"
    assert "keeps up" in pipe.advice
    disk = next(r for r in h.of("data") if r.subject == "storage")
    # 160 samples/s x 50,000 bytes of JPEG per sample = 8 MB/s: more than 5 MB/s at random
    assert disk.value == pytest.approx(8.0)
    assert "jpeg files" in disk.advice and "a bottleneck for files read in random order" in \
        disk.advice and "read in order (records) it keeps up" in disk.advice
    assert isinstance(disk.source, Measured) and "dlperf dataflow storage" in \
        disk.source.describe()


def test_data_advice_from_the_loader_alone_and_a_pipeline_that_waits(db):
    with Store(db) as st:
        st.add(result("alexnet", 2, 0.1, batch=16))
        st.add(_on_pipeline(0.2, 0.0, 1, kind="loader"))  # 80 samples/s alone
    h = advise("image-classification", samples=1000, epochs=1, rows=_here(db)).hardware[0]
    pipe = next(r for r in h.of("data") if r.subject == "input pipeline for alexnet")
    assert pipe.unit == "samples/s" and pipe.value == pytest.approx(80)
    assert "consumes 160: it cannot keep up" in pipe.advice
    with Store(db) as st:
        st.add(_on_pipeline(0.25, 0.60, 0))
    h = advise("image-classification", samples=1000, epochs=1, rows=_here(db)).hardware[0]
    pipe = next(r for r in h.of("data") if r.subject == "input pipeline for alexnet")
    assert "waits 60.0% of each step" in pipe.advice and "is a bottleneck" in pipe.advice


def test_a_network_not_measured_here_is_predicted_with_its_validated_error(db, capsys):
    """With this machine calibrated, the advice predicts ResNet-50 (not measured here) from
    the calibration, with the error validated on the other networks measured here."""
    from dlperf.core.aggregate import ConfigResult
    from dlperf.kinds.calibrate import validate
    from tests import calibration_fixtures as made_up

    with Store(db) as st:
        made_up.calibrated(st, threads=(2,), allreduce=False)
        model = validate.predictor(st)
        for net in ("fcn5", "alexnet", "lstm32"):  # measured: the error is validated on them
            t, _ = model(ConfigResult(spec=result(net, 2, 1.0).spec))
            st.add(result(net, 2, t * 1.1))  # 10% slower than predicted
        model = validate.predictor(st)
    a = advise("image-classification", samples=1_000_000, epochs=1, hardware="this",
               rows=_here(db), model=model)
    net = {r.subject: r for r in a.hardware[0].of("network")}
    resnet = net["resnet50"]
    assert isinstance(resnet.source, Predicted) and resnet.value > 0
    assert "(the calibrated model's prediction" in resnet.advice
    assert resnet.source.error == pytest.approx(0.1 / 1.1, rel=0.05)  # 1 - 1/1.1: validated
    assert "validated error" in resnet.source.describe()
    assert isinstance(net["alexnet"].source, Measured)  # measured stays measured
    # and through the command, which builds the model from the store
    assert main(["advise", "--task", "image-classification", "--samples", "1M", "--db",
                 str(db)]) == 0
    text = capsys.readouterr().out
    assert "resnet50" in text and "not measured here" in text and "predicted" in text
    # and in the report's advice section, which reads what the command reads
    assert main(["report", "--db", str(db), "--out", str(db.parent / "rep")]) == 0
    advice = (db.parent / "rep" / "advice.md").read_text()
    assert "resnet50: " in advice and "(the calibrated model's prediction" in advice
    assert not [line for line in advice.splitlines()
                if "resnet50" in line and "not measured here" in line]
    assert "| resnet50: not measured here |" not in advice


def test_a_network_is_predicted_at_the_most_threads_calibrated_when_the_cores_are_not(
        db, monkeypatch):
    """A calibration of one thread on two cores still predicts a network not measured
    here, at that one thread, saying so, rather than 'not measured here'."""
    from dlperf.core import environment
    from dlperf.kinds.calibrate import validate
    from tests import calibration_fixtures as made_up

    monkeypatch.setattr(environment, "physical_cores", lambda: 2)
    with Store(db) as st:
        made_up.calibrated(st, threads=(1,), allreduce=False)
        model = validate.predictor(st)
    a = advise("image-classification", samples=1_000_000, epochs=1, hardware="this",
               rows=_here(db), model=model)
    resnet = {r.subject: r for r in a.hardware[0].of("network")}["resnet50"]
    assert isinstance(resnet.source, Predicted) and resnet.value > 0
    assert "at 1 thread, the most calibrated here of 2 cores" in resnet.advice
    assert "cpu x1" in resnet.source.describe()


def test_workers_not_measured_here_are_predicted_when_the_collectives_are_calibrated(tmp_path):
    """Several worker processes on this machine, none measured: with gloo's collectives
    calibrated the advice is the model's fastest strategy, with its validated error and
    the one process measured beside it; without them it says why it cannot predict."""
    from dlperf.advice.common import hours
    from dlperf.core.aggregate import ConfigResult
    from dlperf.kinds.calibrate import validate
    from dlperf.kinds.parallel.make import make_spec
    from tests import calibration_fixtures as made_up

    def devices(db, allreduce):
        with Store(db) as st:
            made_up.calibrated(st, allreduce=allreduce)
            st.add(result("alexnet", 1, 2.0))
            model = validate.predictor(st)
        h = advise("image-classification", samples=1_000_000, epochs=1, hardware="this",
                   rows=_here(db), model=model).hardware[0]
        [dev] = h.of("devices")
        return dev, model

    dev, model = devices(tmp_path / "with.db", allreduce=True)
    assert isinstance(dev.source, Predicted) and "the calibrated model's prediction" in dev.advice
    workers = max(2, environment.physical_cores())
    times = {}
    for s in ("sync", "async", "mixed", "pipeline", "fsdp"):
        if s == "mixed" and workers % 2:
            continue
        got = model(ConfigResult(spec=make_spec("alexnet", strategy=s, workers=workers)))
        if got is not None:
            times[s] = got[0]
    fastest = min(times, key=times.get)
    assert len(times) >= 2 and dev.advice.startswith(f"{workers} workers, {fastest}: ")
    assert dev.value == pytest.approx(hours(1_000_000, 1, 16 / times[fastest]))
    assert "one process measured 8 samples/s" in dev.advice  # alexnet b16 at 2.0 s
    dev, _ = devices(tmp_path / "without.db", allreduce=False)
    assert isinstance(dev.source, Unknown) and dev.value is None
    assert "does not predict it" in dev.advice and "without --no-allreduce" in dev.advice


def test_an_input_pipeline_not_measured_says_why_the_model_cannot_predict_it(db):
    from dlperf.advice.data import _pipeline

    with Store(db) as st:
        st.add(result("alexnet", 1, 2.0))
    [first] = [r for r in _here(db) if r.spec.network == "alexnet"]

    def why(loader, best=first):
        rec = _pipeline("alexnet", best, [], 2, measured=None, loader=loader)
        assert isinstance(rec.source, Unknown) and rec.value is None
        assert rec.source.command.startswith("dlperf dataflow sweep --network alexnet")
        return rec.advice

    assert why(None, best=None) == "input pipeline: not measured here"
    assert "no loader is calibrated here" in why(None)
    # a loader model without alexnet's data: it answers None for that step
    assert "do not cover alexnet's data" in why((lambda row: None, ""))
    assert "dlperf calibrate --dataflow --networks alexnet" in why(None)


def test_the_largest_batch_counts_the_calibrated_runtime(db, monkeypatch):
    """The memory model's validation counts the framework's runtime (``dlperf calibrate``
    measures it), so the largest batch that fits counts it too: a runtime of most of the
    machine's memory leaves room for a smaller batch, and the advice names it."""
    from dlperf.advice.local import _runtime
    from dlperf.perfmodel.predict import training_memory

    memory = training_memory("fcn5", batch_size=1024)
    monkeypatch.setattr(environment, "machine", lambda: {"memory_bytes": memory})
    with Store(db) as st:
        st.add(result("fcn5", 2, 0.3, batch=64))

    def batch(baselines):
        h = advise("simple-tabular", samples=1_000, hardware="this", rows=_here(db),
                   baselines=baselines, epochs=1).hardware[0]
        return next(r for r in h.of("batch") if r.subject == "fcn5")

    alone = batch(None)
    assert alone.value == 1024 and "not calibrated here" in alone.advice
    # the runtime takes what batch 512 leaves free, and a little more: 256 fits beside it
    held = {"torch": memory - training_memory("fcn5", batch_size=512) + 1,
            "jax": 1.0}
    beside = batch(held)
    assert beside.value == 256
    assert f"torch's runtime, {held['torch'] / 2**20:.0f} MiB as calibrated here" \
        in beside.advice
    # a network measured in no framework: the largest runtime calibrated
    assert _runtime(None, {"jax": 1.0, "tensorflow": 3.0}) == ("tensorflow", 3.0)


def _faulting(network: str, median: float, system: float | None, framework: str = "torch"):
    r = result(network, 2, median, framework=framework)
    got = {} if system is None else {"minor_faults_per_step": 262144.0,
                                     "system_s_per_step": system, "peak_rss_bytes": 3 * 2**30}
    return r.model_copy(update={"metrics": r.metrics.model_copy(update=got)})


@pytest.mark.parametrize(("system", "advised"), [(0.15, True), (0.01, False), (None, False)])
def test_a_step_that_maps_its_memory_again_at_every_step_is_told_to_keep_it(
        db, monkeypatch, system, advised):
    """The kernel's share of the fastest run's step (30% here) is what an allocator that
    keeps its pages saves at most; below 5%, or a run an older dlperf stored, no advice."""
    monkeypatch.setattr("resource.getpagesize", lambda: 4096)
    with Store(db) as st:
        st.add(_faulting("fcn5", 0.5, system))
    h = advise("simple-tabular", samples=1000, epochs=1, hardware="this",
               rows=_here(db)).hardware[0]
    got = [r for r in h.of("allocator") if r.subject == "fcn5"]
    assert bool(got) == advised
    if advised:
        (rec,) = got
        assert rec.value == pytest.approx(30.0) and number(rec) == "30.0% of the step"
        assert isinstance(rec.source, Measured)
        assert "mapping 1 GiB of new pages" in rec.advice
        assert "trim_threshold=4294967296" in rec.advice and "jemalloc" in rec.advice



def test_a_runtime_that_maps_its_own_memory_gets_the_share_and_no_setting(db, monkeypatch):
    """JAX kept its new pages under glibc's keeping setting (measured): the share is said,
    no allocator is advised."""
    monkeypatch.setattr("resource.getpagesize", lambda: 4096)
    with Store(db) as st:
        st.add(_faulting("fcn5", 0.5, 0.15, framework="jax"))
    h = advise("simple-tabular", samples=1000, epochs=1, hardware="this",
               rows=_here(db)).hardware[0]
    (rec,) = [r for r in h.of("allocator") if r.subject == "fcn5"]
    assert rec.value == pytest.approx(30.0) and "jax's runtime maps them itself" in rec.advice
    assert "GLIBC_TUNABLES" not in rec.advice


def test_workers_measured_here_are_advised_on_the_task_s_own_network_not_a_tiny_one(db):
    """The devices advice quotes the parallel runs of the network and size the step advice
    put first: a tiny network's runs (a smoke-test size, far faster) and another
    network's are not the task's time to train."""
    from dlperf.advice.common import hours
    from dlperf.kinds.parallel.make import make_spec

    def parallel(network, size, batch, seconds):
        r = result(network, 1, seconds)
        spec = make_spec(network, size=size, strategy="sync", workers=2, batch_size=batch)
        return r.model_copy(update={"spec": spec})

    with Store(db) as st:
        st.add(result("alexnet", 1, 2.0))
        st.add(parallel("alexnet", "full", 16, 1.0))
        st.add(parallel("alexnet", "tiny", 64, 0.01))  # 6400 samples/s
        st.add(parallel("fcn5", "full", 64, 0.1))  # not a candidate of the task
    h = advise("image-classification", samples=1_000_000, epochs=1, hardware="this",
               rows=_here(db)).hardware[0]
    [dev] = h.of("devices")
    assert isinstance(dev.source, Measured) and "alexnet sync x2 b16" in dev.source.describe()
    assert dev.value == pytest.approx(hours(1_000_000, 1, 16 / 1.0))
    assert "tiny" not in dev.advice + dev.source.describe()
    with Store(db) as st:  # the first network of the task has no parallel run: another's
        st.add(result("resnet50", 1, 8.0))
    h = advise("image-classification", samples=1_000_000, epochs=1, hardware="this",
               rows=_here(db)).hardware[0]
    assert next(iter(h.of("network"))).subject == "resnet50"
    [dev] = h.of("devices")
    assert "alexnet sync x2 b16" in dev.source.describe()


def test_data_advice_reads_the_pipelines_at_the_task_s_size_not_a_tiny_one(db):
    """A tiny network's pipeline run (32-pixel images: a far larger share of its step
    waits, a far smaller file a sample) speaks neither for the stall nor for the bytes the
    storage must read: the advice reads the runs at its fastest step's size."""
    with Store(db) as st:
        st.add(result("alexnet", 2, 0.1, batch=16))  # synthetic: 160 samples/s
        st.add(_on_pipeline(0.105, 0.02, 2, data_set_bytes=512 * 50_000))
        st.add(_on_pipeline(0.005, 0.60, 0, data_set_bytes=512 * 1_000, size="tiny"))
        st.add(_storage(seq=400e6, rand=5e6))
    h = advise("image-classification", samples=1000, epochs=1, rows=_here(db)).hardware[0]
    pipe = next(r for r in h.of("data") if r.subject == "input pipeline for alexnet")
    assert pipe.value == pytest.approx(2.0) and "disk:jpeg w2 p0" in pipe.advice
    disk = next(r for r in h.of("data") if r.subject == "storage")
    assert disk.value == pytest.approx(8.0)  # 160 samples/s x 50,000 bytes, not 1,000


def test_a_db_with_no_store_is_read_as_empty_and_no_file_is_left(tmp_path, capsys):
    """A --db naming no store: the advice of an empty store, one line on stderr saying so,
    and no store, folder or file made there."""
    missing = tmp_path / "typo" / "results.db"
    code = main(["advise", "--task", "image-classification", "--samples", "1.2M",
                 "--hardware", "this", "--json", "--db", str(missing)])
    assert code == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    recs = data["hardware"][0]["recommendations"]
    assert recs and not any(r["source"]["kind"] == "measured" for r in recs)
    assert captured.err.strip() == (f"advise: no results store at {missing}: nothing measured "
                                    "here is used ('dlperf run', 'sweep' and 'calibrate' make "
                                    "one)")
    assert not (tmp_path / "typo").exists()
