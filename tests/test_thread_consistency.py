"""A calibration checked against itself across thread counts: a shape far slower at more
threads than at fewer is timed again, the second timing replaces the first, and what no
second timing explains is said with the calibration's quality and its predictions."""

from __future__ import annotations

import time

from dlperf import api
from dlperf.cli import main
from dlperf.cli.calibrate import quality_line
from dlperf.core.store import Store
from dlperf.kinds.calibrate import plan as calibration
from dlperf.kinds.calibrate import retime
from dlperf.kinds.calibrate.options import KernelOutcome, KernelSample
from dlperf.perfmodel import thread_consistency as tc
from tests import calibration_fixtures as made_up

#: a memory pass of 32 MiB: 2.2 ms on the made-up machine, past ``tc.MIN_S``
SHAPE = (4194304,)


def _s(op: str, shape: tuple[int, ...], seconds: float) -> KernelSample:
    return KernelSample(op=op, shape=shape, median_s=seconds, times_s=(seconds,) * 3)


def test_a_shape_is_slower_past_its_ops_limit_against_its_fastest_timing_at_fewer_threads():
    conv = (57, 3, 32, 64, 3, 1)
    got = tc.slower_with_more_threads({
        1: [_s("memory", (1,), 0.010), _s("conv", conv, 0.010), _s("update", (1,), 0.0015),
            _s("dispatch", (1,), 0.010)],
        2: [_s("memory", (1,), 0.016), _s("conv", conv, 0.019), _s("update", (1,), 0.005),
            _s("dispatch", (1,), 0.050)],
        4: [_s("memory", (1,), 0.012), _s("conv", conv, 0.021)],
        8: [_s("memory", (1,), 0.100)]}, cores=4)
    # memory-bound: past 1.5x; a convolution: past 2x (at 4 threads against 1 thread's,
    # the fastest at fewer); under MIN_S at fewer threads, a per-call cost, or past the
    # cores: never
    assert {(x.op, x.threads, x.fewer, round(x.ratio, 2)) for x in got} == {
        ("memory", 2, 1, 1.6), ("conv", 4, 1, 2.1)}
    assert tc.limit("memory") == tc.MEMORY_BOUND_SLOWER < tc.limit("conv") == tc.COMPUTE_SLOWER
    assert tc.reproduced(1.0, 1.2) and not tc.reproduced(1.0, 1.3)


def _calibrated_with_a_slow_shape(store: Store, factor: float = 3.0) -> float:
    """The made-up machine at 1 and 2 threads, its 2-thread memory pass over ``SHAPE``
    timed ``factor`` times as long as at 1 thread; the true time."""
    true_s = made_up.true_s("memory", SHAPE)
    for r in made_up.kernel_results(threads=(1, 2), allreduce=False):
        if r.spec.threads == 2:
            slow = tuple(s.model_copy(update={"median_s": factor * s.median_s,
                                              "times_s": (factor * s.median_s,) * 3})
                         if (s.op, s.shape) == ("memory", SHAPE) else s
                         for s in r.outcome.samples)
            r = r.model_copy(update={"outcome": KernelOutcome(
                samples=slow, other_cpu_share={"memory": 0.0})})
        store.add(r)
    return true_s


def _timed_again(store: Store, seconds: float, later_s: float = 10.0) -> None:
    (spec,) = retime.specs(store, ["torch"])
    now = time.time() + later_s
    store.add(made_up.kernel_results()[0].model_copy(update={
        "spec": spec, "outcome": KernelOutcome(samples=(made_up.sample("memory", SHAPE).model_copy(
            update={"median_s": seconds, "times_s": (seconds,) * 3}),)),
        "started_at": now, "finished_at": now}))


def test_a_slower_shape_is_planned_again_and_said_until_it_is(db, capsys):
    with Store(db) as store:
        _calibrated_with_a_slow_shape(store)
        (spec,) = retime.specs(store, ["torch"])
        fit2 = calibration.local_calibration(store).find("torch", 2)
    assert spec.network == calibration.RETIMED_RUN and spec.threads == 2
    assert [(p.op, p.shapes) for p in spec.options.parts] == [("memory", (SHAPE,))]
    assert spec.label() == "kernels torch cpu x2 timed again (memory 1 shape)"
    with Store(db) as store:  # only the frameworks asked for
        assert retime.specs(store, ["tensorflow"]) == []
    assert round(fit2.slower_threads["memory"], 2) == 3.0 and fit2.doubtful
    line = quality_line([fit2])
    assert "SLOWER WITH MORE THREADS" in line and "memory x3.00" in line and "--force" in line
    # the prediction made from it says so
    assert main(["predict", "-n", "fcn5", "--device", "cpu", "--threads", "2",
                 "--db", str(db)]) == 0
    assert "SLOWER WITH MORE THREADS" in capsys.readouterr().out


def test_a_second_timing_replaces_the_first_and_clears_the_calibration(db):
    with Store(db) as store:
        true_s = _calibrated_with_a_slow_shape(store)
        slow = calibration.local_calibration(store).find("torch", 2).memory.time(8 * SHAPE[0])
        _timed_again(store, true_s)
        (entry,) = [s for s in calibration.load(store) if s.threads == 2]
        fit2 = calibration.local_calibration(store).find("torch", 2)
        assert retime.specs(store, ["torch"]) == []  # timed again once, not at every call
    (memory,) = [s for s in entry.samples.of_op("memory") if s.shape == SHAPE]
    assert memory.median_s == true_s  # replaced, not merged with the slow timing
    assert entry.timed_again == {("memory", SHAPE): 3 * true_s}
    assert fit2.slower_threads == {} and not fit2.doubtful and fit2.threads_retimed == 1
    assert fit2.memory.time(8 * SHAPE[0]) < slow
    assert "1 shape timed again for taking far longer" in quality_line([fit2])


def test_a_second_timing_that_reproduces_the_first_is_the_kernels_own(db):
    with Store(db) as store:
        true_s = _calibrated_with_a_slow_shape(store)
        _timed_again(store, 3.2 * true_s)  # within REPRODUCED of 3x
        assert calibration.local_calibration(store).find("torch", 2).slower_threads == {}
        assert retime.specs(store, ["torch"]) == []


def test_a_second_timing_that_differs_and_stays_slow_is_said(db):
    with Store(db) as store:
        true_s = _calibrated_with_a_slow_shape(store)
        _timed_again(store, 2.0 * true_s)  # neither the first timing nor within the limit
        fit2 = calibration.local_calibration(store).find("torch", 2)
    assert round(fit2.slower_threads["memory"], 2) == 2.0 and fit2.doubtful


def test_a_run_newer_than_the_second_timing_is_not_replaced_by_it(db):
    with Store(db) as store:
        true_s = _calibrated_with_a_slow_shape(store)
        _timed_again(store, true_s, later_s=-3600.0)  # before the runs it would replace
        (entry,) = [s for s in calibration.load(store) if s.threads == 2]
    (memory,) = [s for s in entry.samples.of_op("memory") if s.shape == SHAPE]
    assert memory.median_s == 3 * true_s and entry.timed_again == {}


def test_calibrate_times_the_slower_shape_again_in_a_worker(db):
    """Everything else stored already: ``api.calibrate`` runs the one run that times the
    shape again, with PyTorch's own memory pass, and its timing replaces the slow one."""
    with Store(db) as store:
        true_s = _calibrated_with_a_slow_shape(store, factor=50.0)
    api.calibrate(["torch"], [1, 2], db=db, allreduce=False)
    with Store(db) as store:
        runs = store.results(kind="kernel", network=calibration.RETIMED_RUN)
        (entry,) = [s for s in calibration.load(store) if s.threads == 2]
    assert [r.status for r in runs] == ["ok"] and runs[0].spec.threads == 2
    (again,) = runs[0].outcome.samples
    (memory,) = [s for s in entry.samples.of_op("memory") if s.shape == SHAPE]
    assert memory == again and again.median_s != 50 * true_s
    assert entry.timed_again == {("memory", SHAPE): 50 * true_s}
