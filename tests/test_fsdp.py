"""Sharded data parallelism (the fsdp strategy): what it computes, what it saves in
memory, and what the model says of it."""

from __future__ import annotations

import pytest

from dlperf import workloads
from dlperf.perfmodel import memory
from dlperf.perfmodel.predict import predict
from dlperf.workloads.base import Layer, dense
from tests.test_parallel import TIMEOUTS, assert_trains_as_one_worker, launch, spec_for


def test_sharding_divides_the_state_and_gathers_the_largest_unit():
    layers = [dense("a", 8, 16, first=True), Layer("r", "act", out_elems=16),
              dense("b", 16, 4), Layer("loss", "loss", out_elems=4)]
    one = memory.step_memory(layers, 2, "fp32", optimizer="adam", baseline=100.0)
    four = memory.sharded_step_memory(layers, 2, "fp32", 4, optimizer="adam",
                                      baseline=100.0)
    params = 8 * 16 + 16 + 16 * 4 + 4
    assert four.weights == one.weights / 4 == params * 4 / 4
    assert four.gradients == one.gradients / 4 and four.optimizer == one.optimizer / 4
    assert four.activations == one.activations and four.baseline == 100.0
    # the largest unit (a: 144 weights) gathered for itself and the prefetched next, and
    # its whole gradient before the reduce-scatter
    assert four.transient == one.transient + 3 * 144 * 4
    assert memory.sharded_step_memory(layers, 2, "fp32", 1) == \
        memory.step_memory(layers, 2, "fp32")


def test_fsdp_predicts_less_memory_and_more_communication_than_sync():
    sync = predict("fcn5", device="a100-40gb", devices=4, strategy="sync", batch_size=256)
    fsdp = predict("fcn5", device="a100-40gb", devices=4, strategy="fsdp", batch_size=256)
    assert fsdp.memory.weights == pytest.approx(sync.memory.weights / 4)
    assert fsdp.memory_bytes < sync.memory_bytes
    assert fsdp.max_batch > sync.max_batch
    assert fsdp.breakdown.compute_s == pytest.approx(sync.breakdown.compute_s)
    assert any("all-gather" in n for n in fsdp.notes)
    one = predict("fcn5", device="a100-40gb", devices=1, strategy="fsdp", batch_size=64)
    assert one.breakdown.communication_s == 0


@pytest.mark.slow
def test_fsdp_two_workers_equal_one_worker_on_the_global_batch(tmp_path):
    r = launch(spec_for("fsdp", 2), tmp_path)
    assert r.ok, r.failure
    assert_trains_as_one_worker(tmp_path)
    assert r.metrics.steps == len(r.step_times_s) == 3


@pytest.mark.slow
@pytest.mark.xdist_group("full_fcn5_sync")  # one worker measures the fixture once
def test_sharding_lowers_each_workers_measured_peak_as_predicted(tmp_path, full_fcn5_sync):
    """Full-size FCN-5 (448 MiB of weights) on two workers: each holds half the weights
    and gradients under fsdp (and gathers its largest layers whole), the whole of both
    and DDP's bucket copy of the gradients under sync; the model predicts the saving, and
    the workers' measured peaks show it (at least a third of it)."""
    from dlperf.core.store import Store
    from dlperf.engine.launch.torchrun import run_parallel
    from dlperf.kinds.calibrate import validate
    from dlperf.kinds.parallel.make import make_spec

    spec = make_spec("fcn5", strategy="fsdp", workers=2, batch_size=32, steps=2,
                     warmup_steps=1)
    r = run_parallel(spec, **TIMEOUTS)  # no dumps: the weights are 448 MiB
    assert r.ok, r.failure
    peaks = {"sync": full_fcn5_sync.metrics.peak_rss_bytes, "fsdp": r.metrics.peak_rss_bytes}
    with Store(tmp_path / "r.db") as store:
        for run in (full_fcn5_sync, r):
            store.add(run)
        # validate --memory sets each worker's measured peak beside the model's
        cases, _ = validate.memory_cases(store, {("torch", "cpu"): 2e8})
    by = {c.row.spec.options.strategy: c for c in cases}
    assert {s: c.measured_bytes for s, c in by.items()} == peaks
    for c in cases:
        assert c.predicted == validate.worker_memory(c.row.spec, 2e8)
    assert by["sync"].predicted.gradients == 2 * by["fsdp"].predicted.gradients * 2
    layers = workloads.get("fcn5").layers()
    saved = (memory.with_ddp_buckets(memory.step_memory(layers, 16, "fp32")).total
             - memory.sharded_step_memory(layers, 16, "fp32", 2).total)
    assert saved > 100 * 2**20
    # FSDP2 holds more than the model between steps (its buffers: docs/prediction.md)
    assert peaks["sync"] - peaks["fsdp"] > saved / 3


def test_fsdp_on_this_machine_takes_gloos_calibrated_gather_and_scatter(db):
    """The calibration times gloo's all-gather and reduce-scatter; fsdp's predicted
    communication is each unit's two gathers and one scatter by those curves, and its runs
    enter the validation only with them."""
    from dlperf.core.store import Store
    from dlperf.kinds.calibrate import plan as calibration
    from dlperf.kinds.calibrate.prediction import predict_for_spec, why_not
    from dlperf.perfmodel.machine_fits import MachineFits
    from tests import calibration_fixtures as made_up

    with Store(db) as store:
        made_up.calibrated(store)
        cal = calibration.local_calibration(store)
    fit = cal.find("torch", 1)
    a, b = made_up.alpha_beta(2)
    assert fit.allgather[2].time(1e8) == pytest.approx(1.3 * (a + 1e8 / b), rel=1e-3)
    assert fit.reducescatter[2].time(1e8) == pytest.approx(1.7 * (a + 1e8 / b), rel=1e-3)
    spec = spec_for("fsdp", 2)
    p = predict_for_spec(spec, MachineFits(cal.fits, cal.memory_gb, 2))
    assert p is not None and why_not(spec, cal) is None
    units = [layer.params * 4 for layer in workloads.get("fcn5").layers("tiny") if layer.params]
    want = sum(2 * fit.allgather[2].time(n) + fit.reducescatter[2].time(n) for n in units)
    assert p.breakdown.communication_s == pytest.approx(want, rel=1e-6)
    older = MachineFits(tuple(f.model_copy(update={"allgather": {}, "reducescatter": {}})
                              for f in cal.fits), cal.memory_gb, 2)
    assert "all-gather" in why_not(spec, older)


def test_advice_takes_the_fastest_strategy_that_fits():
    from dlperf.advice.predicted import fastest_that_fits, strategies

    assert "fsdp" in strategies(8) and strategies(1) == ["single"]
    sync = predict("fcn5", device="a100-40gb", devices=4, strategy="sync", batch_size=256)
    fsdp = predict("fcn5", device="a100-40gb", devices=4, strategy="fsdp", batch_size=256)
    assert sync.samples_per_s > fsdp.samples_per_s  # sync is faster where both fit...
    assert fastest_that_fits([fsdp, sync]) is sync
    too_big = sync.model_copy(update={"fits": False})
    assert fastest_that_fits([fsdp, too_big]) is fsdp  # ...and loses where it does not


def test_each_strategys_fullest_process_has_its_memory_validated():
    from dlperf.kinds.calibrate.validate import worker_memory
    from dlperf.kinds.parallel.make import make_spec

    for strategy in ("pipeline", "async", "mixed"):
        assert isinstance(worker_memory(make_spec("fcn5", size="tiny", strategy=strategy,
                                                  workers=2, batch_size=16), 5.0),
                          memory.MemoryBreakdown)
    # a server of its own, or pushes every few steps: other processes, not modelled
    assert "not validated" in worker_memory(make_spec(
        "fcn5", strategy="async", workers=2, batch_size=16, servers=1), 0.0)
    assert "not validated" in worker_memory(make_spec(
        "fcn5", strategy="async", workers=2, batch_size=16, push_every=2), 0.0)
    layers = workloads.get("fcn5").layers("tiny")
    mixed = worker_memory(make_spec("fcn5", size="tiny", strategy="mixed", workers=4,
                                    groups=2, batch_size=16), 5.0)
    one = memory.step_memory(layers, 4, "fp32", baseline=5.0)
    # rank 0: its group's DDP buckets, the server's share for the two leaders that push
    assert mixed == memory.with_parameter_server(memory.with_ddp_buckets(one), layers, 2,
                                                 True)
    sync = worker_memory(make_spec("fcn5", size="tiny", strategy="sync", workers=2,
                                   batch_size=16), 5.0)
    one = memory.step_memory(workloads.get("fcn5").layers("tiny"), 8, "fp32", baseline=5.0)
    assert sync == memory.with_ddp_buckets(one)
