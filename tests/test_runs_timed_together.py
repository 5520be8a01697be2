"""Runs of one calibration that timed the shapes they share at other speeds: every shape of
the ops they disagree on is timed again in one run, whose timings replace both runs', so
that the op's curve stands on one speed and the calibration no longer disagrees."""

from __future__ import annotations

import time

from dlperf import api
from dlperf.cli.calibrate import quality_line
from dlperf.core.store import Store
from dlperf.kinds.calibrate import plan as calibration
from dlperf.kinds.calibrate import retime
from dlperf.kinds.calibrate.options import KernelOutcome
from tests import calibration_fixtures as made_up

SCOPE = (("fcn5", 64),)


def _slowed(r, factor: float, op: str):
    """``r`` with its samples of ``op`` timed ``factor`` times as long."""
    return r.model_copy(update={"outcome": r.outcome.model_copy(update={"samples": tuple(
        x.model_copy(update={"median_s": x.median_s * factor,
                             "times_s": tuple(t * factor for t in x.times_s)})
        if x.op == op else x for x in r.outcome.samples)})})


def _disagreeing(store: Store, op: str = "gemm", factor: float = 1.4) -> None:
    """The made-up grid at one thread, then a run scoped to FCN-5 that timed ``op`` at
    ``factor`` times the grid's; no other process seen while either ran."""
    quiet = {"other_cpu_share": {op: 0.0}}
    for r in made_up.kernel_results(allreduce=False):
        store.add(r.model_copy(update={"outcome": r.outcome.model_copy(update=quiet)}))
    for r in made_up.kernel_results(allreduce=False, scope=SCOPE):
        store.add(_slowed(r, factor, op))


def _store_timing(store: Store, spec, later_s: float) -> None:
    """``spec``'s run, timed on the made-up machine ``later_s`` from now."""
    now = time.time() + later_s
    samples = tuple(made_up.sample(p.op, tuple(shape)) for p in spec.options.parts
                    for shape in p.shapes)
    store.add(made_up.kernel_results()[0].model_copy(update={
        "spec": spec, "outcome": KernelOutcome(samples=samples), "started_at": now,
        "finished_at": now}))


def test_every_shape_of_an_op_the_runs_disagree_on_is_planned_again_in_one_run(db):
    with Store(db) as store:
        _disagreeing(store)
        (entry,) = calibration.load(store)
        (spec,) = retime.specs(store, ["torch"])
        assert retime.specs(store, ["torch"], threads=[2]) == []  # not a count asked for
    assert set(entry.run_speeds) == {"gemm"}
    assert spec.network == calibration.RETIMED_RUN and spec.options.together
    (part,) = spec.options.parts
    # every shape either run timed, not only those they share
    assert part.op == "gemm" and set(part.shapes) == {x.shape for x in entry.samples.of_op("gemm")}
    assert spec.label() == (f"kernels torch cpu x1 timed again where its runs disagreed "
                            f"(gemm {len(part.shapes)} shapes)")


def test_the_ops_timing_again_replaces_both_runs_and_they_agree(db):
    with Store(db) as store:
        _disagreeing(store)
        (spec,) = retime.specs(store, ["torch"])
        _store_timing(store, spec, later_s=10.0)
        (entry,) = calibration.load(store)
        fit = calibration.local_calibration(store).find("torch", 1)
        assert retime.specs(store, ["torch"]) == []  # once, not at every calibrate
    gemm = entry.samples.of_op("gemm")
    assert all(x.median_s == made_up.true_s("gemm", x.shape) for x in gemm)
    assert entry.timed_together == {("gemm", x.shape) for x in gemm}
    assert entry.run_speeds == {} and fit.run_speeds == {} and not fit.doubtful
    assert fit.runs_retimed == len(gemm) and fit.threads_retimed == 0
    line = quality_line([fit])
    assert line.startswith("calibration quality: undisturbed") and "RUNS DISAGREE" not in line
    assert f"{len(gemm)} shapes timed again in one run, its kernel runs having timed" in line


def test_a_timing_older_than_a_run_leaves_that_run_as_it_was(db):
    """A run timed after the op's timing again is set against it as it stands: still
    apart, and said."""
    with Store(db.with_name("grid.db")) as store:
        made_up.calibrated(store, allreduce=False)
        assert retime.specs(store, ["torch"]) == []  # one run: nothing to disagree with
    with Store(db) as store:
        _disagreeing(store)
        (spec,) = retime.specs(store, ["torch"])
        _store_timing(store, spec, later_s=-3600.0)  # before both runs
        fit = calibration.local_calibration(store).find("torch", 1)
    assert set(fit.run_speeds) == {"gemm"} and fit.doubtful and fit.runs_retimed == 0
    assert "RUNS DISAGREE" in quality_line([fit])


def test_calibrate_times_the_op_again_in_a_worker(db):
    """Everything stored already: ``api.calibrate`` runs the one run that times the
    update's shapes again with PyTorch's own kernel, and its timings replace both runs'."""
    with Store(db) as store:
        _disagreeing(store, op="update", factor=50.0)
    fit = api.calibrate(["torch"], [1], db=db, allreduce=False, scope=SCOPE).find("torch", 1)
    with Store(db) as store:
        runs = store.results(kind="kernel", network=calibration.RETIMED_RUN)
        (entry,) = calibration.load(store)
    assert [r.status for r in runs] == ["ok"] and runs[0].spec.options.together
    timed = {x.shape: x for x in runs[0].outcome.samples}
    update = entry.samples.of_op("update")
    assert len(timed) == len(update) >= 5
    assert all(x == timed[x.shape] for x in update)
    assert fit.run_speeds == {} and fit.runs_retimed == len(update)
