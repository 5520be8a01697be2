"""Tables never mix results of different settings, precisions or machines, and say which
settings measured each number."""

from __future__ import annotations

from dlperf import workloads
from dlperf.core.aggregate import aggregate
from dlperf.core.settings import FULL_MEASUREMENT, QUICK_MEASUREMENT
from dlperf.core.spec import Measurement, Metrics, RunResult, RunSpec
from dlperf.kinds.step.tables import detail_table, dlbench_table
from dlperf.report.exporters import to_markdown


def _ok(spec: RunSpec, median: float, machine: str = "1111aaaa2222bbbb") -> RunResult:
    m = Metrics(steps=3, median_s=median, mean_s=median, std_s=0.0, min_s=median, max_s=median,
                mad_s=0.0, iqr_s=0.0, cv=0.0, samples_per_s=spec.batch_size / median)
    return RunResult(spec=spec, status="ok", metrics=m, step_times_s=[median] * 3,
                     machine_id=machine)


FCN5 = RunSpec(network="fcn5", batch_size=64, threads=1)


def test_quick_and_full_numbers_are_separate_lines_named_by_their_settings():
    quick = FCN5.model_copy(update={"measurement": QUICK_MEASUREMENT})
    full = FCN5.model_copy(update={"measurement": FULL_MEASUREMENT})
    rows = aggregate([_ok(quick, 1.0), _ok(full, 2.0), _ok(full.model_copy(update={"repeat": 1}), 4.0)])
    assert len(rows) == 2 and sorted(r.median_s for r in rows) == [1.0, 3.0]
    t = dlbench_table(rows)
    col = t.headers.index("settings")
    assert sorted((line[col], line[-1]) for line in t.rows) == [("full", "3"), ("quick", "1")]
    assert any(n.startswith("settings quick: min-time 1 s") for n in t.footnotes)
    assert "machine" not in t.headers  # one machine: no column for it
    d = detail_table(rows)
    assert sorted(line[d.headers.index("settings")] for line in d.rows) == ["full", "quick"]


def test_unnamed_settings_are_numbered_and_described():
    a = FCN5.model_copy(update={"measurement": Measurement(min_time_s=0.5)})
    b = FCN5.model_copy(update={"measurement": Measurement(min_time_s=0.7)})
    t = detail_table(aggregate([_ok(a, 1.0), _ok(b, 1.1)]))
    assert sorted(line[t.headers.index("settings")] for line in t.rows) == ["custom1", "custom2"]
    assert any("custom2: min-time 0.7 s" in n for n in t.footnotes)


def test_machines_and_precisions_are_never_combined():
    a, b = "1111aaaa2222bbbb", "3333cccc4444dddd"  # machine ids as environment.machine_id()
    rows = aggregate([_ok(FCN5, 1.0, a), _ok(FCN5, 5.0, b),
                      _ok(FCN5.model_copy(update={"precision": "bf16"}), 0.5, a)])
    assert sorted(r.median_s for r in rows) == [0.5, 1.0, 5.0]
    t = dlbench_table(rows, machines={b: "a described machine"})
    # one column group per machine, as DLBench laid out its desktop, server and GPU columns
    assert [g for g, _ in t.groups] == ["", "1111aaaa", "a described machine [3333cccc]"]
    assert "machine" not in t.headers and t.headers.count("1 thread") == 2
    cells = {line[1]: line[-2:] for line in t.rows}
    assert cells == {"torch/eager": ["1", "5"], "torch/eager bf16": ["0.5", ""]}
    assert "machine 3333cccc: a described machine" in t.footnotes
    assert "| 1111aaaa: 1 thread | a described machine [3333cccc]: 1 thread |" in to_markdown(t)


def test_thread_curves_and_rankings_compare_plain_steps_only(db):
    """An experiment's workload variants (--param side=...) and runs on an input pipeline
    are other configurations: they never join a thread curve or a framework ranking."""
    from dlperf.kinds import StepOptions
    from dlperf.kinds.step.rows import plain_steps
    from dlperf.kinds.step.threads_section import ranking, scaling_curves
    from tests.report_fixtures import result

    rows = [result("fcn5", 1, 1.0), result("fcn5", 2, 0.6),
            result("fcn5", 1, 0.8, framework="tensorflow")]
    side = result("fcn5", 2, 0.1)
    pipe = result("fcn5", 2, 5.0, framework="tensorflow")
    rows += [side.model_copy(update={"spec": side.spec.model_copy(update={"params": {"side": 8}})}),
             pipe.model_copy(update={"spec": pipe.spec.model_copy(update={
                 "options": StepOptions(input="memory", loader_workers=1)})})]
    agg = aggregate(rows)
    plain = plain_steps(agg)
    assert len(agg) == 5 and len(plain) == 3
    (curve,) = scaling_curves(plain).values()
    assert {t: r.median_s for t, r in curve.items()} == {1: 1.0, 2: 0.6}
    (ranked,) = ranking(plain).values()  # 1 thread: tensorflow before torch
    assert [r.framework_label for r in ranked] == ["tensorflow/graph", "torch/eager"]
    # unfiltered, the variant and the pipeline run would make a 2-thread "ranking"
    assert sorted(len(v) for v in ranking(agg).values()) == [2, 3]


def test_seconds_are_rounded_before_their_unit_is_chosen():
    from dlperf.core import units

    assert units.seconds(0.9999) == "1 s"
    assert units.seconds(0.00099996) == "1 ms"
    assert units.seconds(3.95) == "3.95 s" and units.seconds(0.0123) == "12.3 ms"
    assert units.seconds(2e-6) == "2 us" and units.seconds(None) == "-"


def test_a_cell_whose_shapes_were_not_timed_names_the_command_that_times_them_where_one_can():
    """A calibration scoped to networks times them as defined: the '#' footnote offers
    'dlperf calibrate --networks NET' for such a cell, and says why not for another size."""

    class Untimed:  # a model that predicts every cell from the grid's skeleton
        def __call__(self, row):
            return row.median_s, 0.2

        def timed(self, spec):
            return False

    cnn = RunSpec(network="cnn", size="small", batch_size=workloads.get("cnn").default_batch)
    rows = aggregate([_ok(FCN5, 1.0), _ok(FCN5.model_copy(update={"size": "tiny"}), 0.1),
                      _ok(cnn, 0.5)])
    notes = [n for n in dlbench_table(rows, predictor=Untimed()).footnotes
             if n.startswith("# ")]
    assert set(notes) == {
        "# fcn5's layer shapes were not timed by the calibration (1 cell): a skeleton of the "
        "grid stands in, its error that of 'dlperf validate --held-out-shapes'; 'dlperf "
        "calibrate --networks fcn5' times them",
        "# fcn5 [tiny]'s layer shapes were not timed by the calibration (1 cell): a skeleton "
        "of the grid stands in, its error that of 'dlperf validate --held-out-shapes'; a "
        "calibration times a network as defined",
        # as defined at a size other than 'full': the command names the network alone
        "# cnn [small]'s layer shapes were not timed by the calibration (1 cell): a skeleton "
        "of the grid stands in, its error that of 'dlperf validate --held-out-shapes'; "
        "'dlperf calibrate --networks cnn' times them"}
