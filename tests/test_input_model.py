"""The input-pipeline model (perfmodel/input_pipeline.py): its steady state against closed
forms, and where each framework's loader runs."""

from __future__ import annotations

import pytest

from dlperf.perfmodel import input_pipeline as ip
from dlperf.perfmodel.input_pipeline import LoaderCost, Placement, placement, steady_state

LOOP = Placement(False, 0, True, "loop")


def test_in_the_loop_the_step_waits_for_all_of_the_loader():
    time, step, stall = steady_state(1.0, 1, 2, 0.3, 0.2, LOOP)
    assert (time, step, stall) == pytest.approx((1.5, 1.0, 0.5))


def test_a_worker_on_a_free_core_hides_a_loader_faster_than_the_step():
    w = placement("torch", 1, 0, cores=2)
    assert (w.ahead, w.parallel, w.on_training_cores) == (True, 1, False)
    time, step, stall = steady_state(1.0, 1, 2, 0.6, 0.0, w)
    assert (time, step, stall) == pytest.approx((1.0, 1.0, 0.0))


def test_a_loader_slower_than_the_step_sets_the_pace_and_workers_share_it():
    # 1.6 s of waiting per batch (no CPU): one worker stalls 0.6 s, two none
    one = steady_state(1.0, 1, 2, 0.0, 1.6, placement("torch", 1, 0, 2))
    two = steady_state(1.0, 1, 2, 0.0, 1.6, placement("torch", 2, 0, 2))
    assert one == pytest.approx((1.6, 1.0, 0.6))
    assert two == pytest.approx((1.0, 1.0, 0.0))


def test_a_loader_on_the_training_cores_stretches_the_step_instead():
    # torch with 0 workers and a prefetch depth: a thread on the step's one core
    t = placement("torch", 0, 2, cores=2)
    assert t.on_training_cores and t.parallel == 1
    time, step, stall = steady_state(1.0, 1, 2, 0.3, 0.0, t)
    assert (time, step, stall) == pytest.approx((1.3, 1.3, 0.0))
    # more loader work than step: the step gets its fair half, then waits for the rest
    time, step, stall = steady_state(1.0, 1, 2, 1.5, 0.0, t)
    assert (time, step, stall) == pytest.approx((2.5, 2.0, 0.5))


def test_tf_data_prefetch_thread_runs_on_any_core():
    t = placement("tensorflow", 0, 2, cores=2)
    assert not t.on_training_cores
    assert steady_state(1.0, 1, 2, 0.3, 0.0, t) == pytest.approx((1.0, 1.0, 0.0))


def test_workers_on_the_cores_the_step_uses_stretch_it():
    # two training threads on both cores: a worker's 0.4 s lands on the step
    time, step, stall = steady_state(1.0, 2, 2, 0.4, 0.0, placement("torch", 1, 0, 2))
    assert (time, step, stall) == pytest.approx((1.4, 1.4, 0.0))


def test_a_gpu_step_leaves_its_host_core_mostly_idle():
    # the step keeps its core busy 0.05 s of its 1 s: the loader's thread beside it
    # stretches it by no more than that
    t = placement("torch", 0, 2, cores=8)
    time, step, stall = steady_state(1.0, 1, 8, 0.5, 0.0, t, busy_s=0.05)
    assert step == pytest.approx(1.05) and time == pytest.approx(1.05) and stall == 0


def test_stall_free_workers_is_the_smallest_count_within_the_threshold():
    # 3.5 s of waits per batch against a 1 s step: four workers keep up
    assert ip.stall_free_workers(1.0, 1, 2, 0.0, 3.5, "torch", 0) == 4
    # a loader that needs more CPU than the machine has never keeps up
    assert ip.stall_free_workers(1.0, 1, 2, 5.0, 0.0, "torch", 0) is None
    # a cheap loader needs none
    assert ip.stall_free_workers(1.0, 1, 2, 0.01, 0.0, "torch", 0) == 0


def test_predict_input_adds_the_copy_to_the_step_unless_prefetched():
    cost = LoaderCost(framework="torch", data="image 8x8x3 raw", per_sample_s=0.001,
                      source="test")
    serial = ip.predict_input(train_s=1.0, threads=1, cores=4, batch=10, cost=cost, workers=0,
                              prefetch=0, label="disk:raw w0 p0", copy_s=0.1)
    assert serial.time_s == pytest.approx(1.0 + 0.1 + 0.01)
    assert serial.stall_s == pytest.approx(0.01)
    ahead = ip.predict_input(train_s=1.0, threads=1, cores=4, batch=10, cost=cost, workers=2,
                             prefetch=2, label="disk:raw w2 p2", copy_s=0.1, copy_ahead=True)
    assert ahead.time_s == pytest.approx(1.0) and ahead.stall_s == 0
    assert 0 < serial.stall_share < 0.01


# --------------------------------------------------------------------------- end to end
SAMPLE_BYTES = 100_000  # bytes a sample of the made-up data sets holds on disk


def _metrics(median: float, batch: int):
    from dlperf.core.spec import Metrics

    return Metrics(steps=5, median_s=median, mean_s=median, std_s=0.0, min_s=median,
                   max_s=median, mad_s=0.0, iqr_s=0.0, cv=0.0, samples_per_s=batch / median)


def _loader_calibration(store, per_sample_s: float, network: str = "fcn5",
                        framework: str = "torch") -> None:
    """A stored loader calibration run: ``per_sample_s`` of one core's work a sample."""
    import time as _time

    from dlperf.core.spec import RunResult
    from dlperf.kinds.dataflow import calibration
    from dlperf.kinds.dataflow.options import DataflowOutcome

    for spec in calibration.specs([framework], [network]):
        b = spec.batch_size
        store.add(RunResult(
            spec=spec, status="ok", metrics=_metrics(b * per_sample_s, b),
            finished_at=_time.time(),
            outcome=DataflowOutcome(
                kind="loader", loader_samples_per_s=1 / per_sample_s,
                data_set_bytes=spec.options.samples * SAMPLE_BYTES)))


@pytest.fixture
def calibrated_db(tmp_path):
    from dlperf.core.store import Store
    from tests.calibration_fixtures import calibrated

    db = tmp_path / "r.db"
    with Store(db) as store:
        calibrated(store, threads=(1,))
    return db


def _predict_json(capsys, *argv) -> dict:
    import json

    from dlperf.cli import main

    capsys.readouterr()
    assert main(["predict", "-n", "fcn5", "--device", "cpu", "-b", "64", *argv,
                 "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_predict_on_an_input_pipeline_needs_the_loader_calibration(calibrated_db, capsys):
    from dlperf.cli import main

    assert main(["predict", "-n", "fcn5", "--device", "cpu", "--input", "disk",
                 "--db", str(calibrated_db)]) == 2
    err = capsys.readouterr().err
    assert "dlperf calibrate --dataflow --frameworks torch --networks fcn5" in err
    assert "Traceback" not in err


def test_predict_adds_the_pipeline_and_workers_change_it(calibrated_db, capsys):
    from dlperf.core.store import Store

    with Store(calibrated_db) as store:
        _loader_calibration(store, 2e-3)
    db = ["--db", str(calibrated_db)]
    plain = _predict_json(capsys, *db)
    assert plain["input"] is None and plain["breakdown"]["input_s"] == 0
    assert not any("not modelled" in n for n in plain["notes"])
    loop = _predict_json(capsys, "--input", "disk", "--loader-workers", "0", *db)
    # in the loop: the step plus 64 samples of 2 ms
    assert loop["time_s"] == pytest.approx(plain["time_s"] + 64 * 2e-3)
    assert loop["input"]["stall_s"] == pytest.approx(64 * 2e-3)
    assert loop["input"]["stall_share"] == pytest.approx(0.128 / loop["time_s"])
    assert loop["breakdown"]["input_s"] == pytest.approx(0.128)
    ahead = _predict_json(capsys, "--input", "disk", "--loader-workers", "1", *db)
    assert ahead["time_s"] < loop["time_s"]
    assert ahead["input"]["placement"].startswith("1 process ahead")


def test_loader_workers_auto_finds_the_smallest_count(calibrated_db, capsys):
    from dlperf.core.store import Store

    with Store(calibrated_db) as store:
        _loader_calibration(store, 1e-6)
    db = ["--db", str(calibrated_db)]
    plain = _predict_json(capsys, *db)["time_s"]
    # a wait per sample that makes one batch take 2.5 steps: three loaders keep up
    delay = 2.5 * plain / 64
    got = _predict_json(capsys, "--input", "disk", "--loader-workers", "auto",
                        "--prefetch", "2", "--sample-delay", f"{delay:.9f}", *db)
    assert got["input"]["workers"] == 3
    assert got["input"]["stall_free_workers"] == 3
    assert got["time_s"] == pytest.approx(plain, rel=1e-3)


def test_predict_on_a_catalogue_gpu_feeds_it_from_its_host(calibrated_db, capsys):
    import json

    from dlperf.cli import main
    from dlperf.core.store import Store

    with Store(calibrated_db) as store:
        _loader_calibration(store, 1e-3, network="alexnet")
    db = ["--db", str(calibrated_db)]
    capsys.readouterr()
    assert main(["predict", "-n", "alexnet", "-d", "a100-40gb", "-b", "256", "--input",
                 "disk", "--loader-workers", "auto", "--json", *db]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["input"]["workers"] >= 1
    assert any("16 cores feed it" in n for n in doc["notes"])
    # the catalogue names no host for a K80: the user gives it
    assert main(["predict", "-n", "alexnet", "-d", "k80", "--input", "disk", *db]) == 2
    assert "--host-cores" in capsys.readouterr().err
    assert main(["predict", "-n", "alexnet", "-d", "k80", "--input", "disk",
                 "--host-cores", "4", *db]) == 0


def test_validate_dataflow_sets_the_predicted_stall_beside_the_measured(calibrated_db,
                                                                          capsys):
    import json
    import time as _time

    from dlperf.cli import main
    from dlperf.core.spec import RunResult, RunSpec
    from dlperf.core.store import Store
    from dlperf.kinds.dataflow.options import DataflowOutcome
    from dlperf.kinds.dataflow.plan import on_pipeline, resolve
    from dlperf.kinds.step.options import StepOutcome

    with Store(calibrated_db) as store:
        _loader_calibration(store, 2e-3)
        base = RunSpec(network="fcn5", batch_size=64)
        for w, share in ((0, 0.30), (1, 0.02), (2, 0.01)):
            opts, _ = resolve({"input": "disk", "loader_workers": w}, "fcn5", None, None, 64)
            store.add(RunResult(
                spec=on_pipeline(base, opts), status="ok", metrics=_metrics(0.5, 64),
                finished_at=_time.time(), outcome=StepOutcome(dataflow=DataflowOutcome(
                    kind="step", stall_share=share))))
    capsys.readouterr()
    assert main(["validate", "--kinds", "dataflow", "--json", "--db",
                 str(calibrated_db)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["cases"]) == 3
    w0 = next(c for c in doc["cases"] if c["input"]["workers"] == 0)
    assert w0["points"] == pytest.approx((w0["predicted_stall_share"] - 0.30) * 100)
    (count,) = doc["worker_counts"]
    assert count["smallest_measured"] == 1 and count["predicted"] == 1
    assert main(["validate", "--kinds", "dataflow", "--db", str(calibrated_db)]) == 0
    text = capsys.readouterr().out
    assert "Smallest stall-free loader-worker count" in text and "points" in text


def test_a_cold_cache_reads_each_sample_at_the_storage_rate(calibrated_db, capsys):
    import time as _time

    from dlperf.cli import main
    from dlperf.core.spec import RunResult, RunSpec
    from dlperf.core.store import Store
    from dlperf.kinds.dataflow.options import StorageOptions, StorageOutcome

    with Store(calibrated_db) as store:
        _loader_calibration(store, 1e-6)
    db = ["--db", str(calibrated_db)]
    warm = _predict_json(capsys, "--input", "disk", *db)
    # no storage measured: one line naming the command that measures it
    assert main(["predict", "-n", "fcn5", "--device", "cpu", "--input", "disk", "--cache",
                 "cold", *db]) == 2
    assert "dlperf dataflow storage" in capsys.readouterr().err
    with Store(calibrated_db) as store:
        store.add(RunResult(
            spec=RunSpec(kind="storage", network="-", options=StorageOptions(
                path="/data", file_bytes=1 << 20, tool="direct")),
            status="ok", finished_at=_time.time(), outcome=StorageOutcome(
                tool="direct", method="O_DIRECT", file_bytes=1 << 20, seq_bytes_per_s=2e8,
                seq_block=1 << 20, rand_bytes_per_s=1e8, rand_block=1 << 17)))
    cold = _predict_json(capsys, "--input", "disk", "--cache", "cold", *db)
    # 64 samples of 100 kB at 100 MB/s, read in the loop
    assert cold["input"]["loader"]["sample_bytes"] == SAMPLE_BYTES
    assert cold["input"]["loader_wait_s"] == pytest.approx(64 * SAMPLE_BYTES / 1e8)
    assert cold["time_s"] == pytest.approx(warm["time_s"] + 0.064)
    assert any("/data" in n for n in cold["notes"])


def test_a_storage_every_loader_shares_bounds_the_pipeline():
    # 1 s of the storage's time per batch: no worker count gets below it
    args = (0.5, 1, 8, 0.0, 1.0, placement("torch", 4, 2, cores=8))
    time, step, stall = steady_state(*args, shared_s=1.0)
    assert (time, step, stall) == pytest.approx((1.0, 0.5, 0.5))
    assert ip.stall_free_workers(0.5, 1, 8, 0.0, 1.0, "torch", 2, shared_s=1.0) is None
    assert ip.stall_free_workers(0.5, 1, 8, 0.0, 1.0, "torch", 2, shared_s=0.2) == 2


def test_a_hard_disk_seeks_for_one_read_at_a_time():
    from dlperf.kinds.dataflow.prediction import catalogue_storage
    from dlperf.perfmodel import catalogue

    hdd = catalogue_storage(catalogue.storage_entry("hdd"))
    nvme = catalogue_storage(catalogue.storage_entry("nvme"))
    assert not hdd.concurrent and nvme.concurrent
    assert hdd.latency_s == pytest.approx(1 / 170) and nvme.latency_s == pytest.approx(1 / 19000)


def test_predict_cold_on_a_catalogue_gpu_names_what_cannot_keep_up(calibrated_db, capsys):
    from dlperf.cli import main
    from dlperf.core.store import Store

    with Store(calibrated_db) as store:
        _loader_calibration(store, 1e-4, network="alexnet")
    db = ["--db", str(calibrated_db)]
    base = ["predict", "-n", "alexnet", "-d", "a100-40gb", "-b", "256", "--input", "disk",
            "--cache", "cold", "--loader-workers", "auto", *db]
    assert main(base) == 2  # a catalogue device: which storage?
    assert "--storage NAME" in capsys.readouterr().err
    assert main([*base, "--storage", "hdd"]) == 2  # 256 seeks of 5.9 ms: never in time
    assert "the storage cannot read" in capsys.readouterr().err
    assert main([*base, "--storage", "nvme"]) == 0


def test_advise_predicts_the_pipeline_a_measured_step_would_want(calibrated_db,
                                                                   monkeypatch):
    import time as _time

    from dlperf import api
    from dlperf.core import environment
    from dlperf.core.spec import RunResult, RunSpec
    from dlperf.core.store import Store

    monkeypatch.setattr(environment, "usable_cpus", lambda: [0, 1])  # a 2-core machine

    with Store(calibrated_db) as store:
        # the loader costs a tenth of the step per sample: the loop waits, workers keep up
        _loader_calibration(store, 0.1 / 16, network="alexnet")
        store.add(RunResult(spec=RunSpec(network="alexnet", batch_size=16), status="ok",
                            metrics=_metrics(1.0, 16), finished_at=_time.time()))
    advice = api.advise("image-classification", samples=1000, db=calibrated_db)
    (here,) = advice.hardware
    (rec,) = [r for r in here.recommendations if r.subject == "input pipeline for alexnet"]
    assert rec.kind == "predicted" and rec.unit == "loader workers"
    assert "in the training loop alexnet would wait" in rec.advice
    assert rec.value == 1  # one worker on the free core hides 0.1 s of a 1 s step
    assert "dlperf dataflow sweep" in rec.advice
    assert rec.source.describe().startswith("predicted: the loader's calibrated cost")


def test_new_pages_are_paid_by_pytorch_results_beyond_the_mmap_threshold(calibrated_db):
    from dlperf.core.store import Store
    from dlperf.kinds.calibrate.plan import local_calibration
    from dlperf.perfmodel.fit import MMAP_THRESHOLD_MAX
    from dlperf.perfmodel.local import fresh_byte_s, new_pages_s

    with Store(calibrated_db) as store:
        f = local_calibration(store).find("torch", 1)
    below = MMAP_THRESHOLD_MAX // 4 - 1024  # elements of 4 bytes: 4 KiB below the threshold
    assert new_pages_s(f, below) == 0  # malloc reuses its own memory up to there
    assert new_pages_s(f, below + 1024) > 0  # an allocation of 32 MiB is mapped afresh
    big = 2 * (below + 1024)
    assert new_pages_s(f, big) == pytest.approx(big * 4 * fresh_byte_s(f))
    # a framework that pools its memory (TensorFlow) or allocates one block per step
    # (JAX, its own term) pays none here
    for fw in ("tensorflow", "jax"):
        assert new_pages_s(f.model_copy(update={"framework": fw}), big) == 0
