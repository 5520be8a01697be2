"""The machine's own speed (``core.speed_probe``): the probe, its record beside every
calibration and CPU step, and the flag where a step was measured at another speed than
its calibration (validate, the report's tables, predict, calibrate's quality line)."""

from __future__ import annotations

import pytest

from dlperf.cli import main
from dlperf.core import speed_probe
from dlperf.core.store import Store
from dlperf.kinds.calibrate import plan as calibration
from tests import calibration_fixtures as made_up
from tests.report_fixtures import result

CALIBRATED = {"compute": 0.5e-3, "memory": 9e-3}


def test_the_probe_times_each_part_on_one_thread():
    got = speed_probe.measure()
    assert set(got) == set(speed_probe.PARTS)
    # in cache, a 256^3 product is 33.5 MFLOP: between 0.1 and 1000 GFLOP/s on any CPU
    assert 2 * 256**3 / 1e12 < got["compute"] < 2 * 256**3 / 1e8
    # 64 MiB read and written: between 0.5 and 500 GB/s on any machine
    assert 2 * 64 * 2**20 / 500e9 < got["memory"] < 2 * 64 * 2**20 / 0.5e9


def test_a_time_at_another_speed_scales_each_term_by_its_part():
    ratio = {"compute": 1.1, "memory": 1.3}
    assert speed_probe.at_speed(2.0, 1.0, 0.5, ratio) == pytest.approx(2.2 + 1.3 + 0.5)
    assert speed_probe.at_speed(2.0, 1.0, 0.5, {"compute": 1.1}) is None
    assert speed_probe.ratios({"compute": 2.0, "memory": 3.0}, {"compute": 1.0}) == {
        "compute": 2.0}


def test_drift_is_the_part_that_moved_most():
    now = {"compute": 0.55e-3, "memory": 7.2e-3, "pages": 99.0}  # a part no longer probed
    assert speed_probe.drift(now, CALIBRATED) == ("memory", pytest.approx(-0.2))
    assert speed_probe.drift({}, CALIBRATED) is None
    assert speed_probe.drift(now, None) is None
    assert "memory copy took 20% less" in speed_probe.describe(("memory", -0.2))
    assert "matrix product took 30% longer" in speed_probe.describe(("compute", 0.3))
    assert speed_probe.typical([{"compute": 1.0}, {"compute": 3.0, "memory": 2.0},
                                {"compute": 2.0}]) == {"compute": 2.0, "memory": 2.0}


def test_a_long_measurement_spreads_its_probes_through_its_run(monkeypatch):
    """One probe at the start, one after a part that ends EVERY_S after the last, one at
    the end unless the last part's was the last thing done; the median of them."""
    now = [0.0]
    taken = iter(range(1, 100))
    monkeypatch.setattr(speed_probe, "measure", lambda: {"compute": float(next(taken))})
    spread = speed_probe.Spread(every_s=5.0, clock=lambda: now[0])
    spread.probe()  # 1, at 0 s
    for t in (2.0, 4.0, 6.0, 7.0, 12.0):  # parts ending then: probes 2 (6 s) and 3 (12 s)
        now[0] = t
        spread.after_part()
    assert len(spread.probes) == 3
    assert spread.finish() == {"compute": 2.0}  # nothing ended since: no fourth
    now[0] = 13.0
    spread.after_part()  # too soon for a probe: the end takes one
    assert spread.finish() == {"compute": 2.5} and len(spread.probes) == 4


def test_a_calibration_worker_probes_between_its_ops(monkeypatch):
    """A kernel run probes the machine between its ops (never inside an op's watched
    window) as well as at both ends, and keeps their median."""
    from dlperf.core.spec import RunSpec
    from dlperf.engine.worker import execute
    from dlperf.kinds.calibrate.options import KernelOptions, KernelPart

    calls = []
    monkeypatch.setattr(speed_probe, "EVERY_S", 0.0)  # due after every op
    monkeypatch.setattr(speed_probe, "measure",
                        lambda: calls.append(1) or {"compute": 1e-3 * len(calls)})
    parts = tuple(KernelPart(op=op, shapes=(shape,)) for op, shape in (
        ("gemm", (8, 8, 8)), ("memory", (4096,)), ("update", (4096,))))
    r = execute(RunSpec(kind="kernel", network="kernels", framework="torch", batch_size=1,
                        options=KernelOptions(parts=parts, min_time_s=0.01)))
    assert r.ok, r.failure
    assert len(calls) == 4  # before the first op and after each of the three
    assert r.outcome.speed_probe == {"compute": pytest.approx(2.5e-3)}


def test_a_kernel_run_and_a_step_record_the_machines_speed():
    from dlperf.core.spec import RunSpec
    from dlperf.engine.worker import execute
    from dlperf.kinds.calibrate.options import KernelOptions, KernelPart

    kernel = execute(RunSpec(kind="kernel", network="kernels", framework="torch",
                             batch_size=1, options=KernelOptions(parts=(KernelPart(
                                 op="gemm", shapes=((8, 8, 8),)),), min_time_s=0.01)))
    assert kernel.ok and set(kernel.outcome.speed_probe) == set(speed_probe.PARTS)
    step = execute(RunSpec(network="fcn5", size="tiny", framework="torch", batch_size=4))
    assert step.ok and set(step.metrics.speed_probe) == set(speed_probe.PARTS)


def _calibrated(store: Store, probe: dict[str, float], allreduce: bool = False) -> None:
    for r in made_up.kernel_results(threads=(1,), allreduce=allreduce):
        store.add(r.model_copy(update={"outcome": r.outcome.model_copy(
            update={"speed_probe": probe})}))


def _measured(store: Store, network: str, seconds: float, probe: dict[str, float]) -> None:
    r = result(network, 1, seconds)
    store.add(r.model_copy(update={"metrics": r.metrics.model_copy(
        update={"speed_probe": probe})}))


def test_a_step_measured_at_another_speed_is_flagged_beside_its_prediction(db, capsys):
    slow = {**CALIBRATED, "memory": CALIBRATED["memory"] * 1.3}
    with Store(db) as store:
        _calibrated(store, CALIBRATED)
        _measured(store, "fcn5", 0.05, slow)  # the machine 30% slower in memory
        _measured(store, "alexnet", 0.2, {**CALIBRATED, "compute": 0.52e-3})  # steady
        fit = calibration.local_calibration(store).find("torch", 1)
    assert fit.speed_probe == pytest.approx(CALIBRATED)
    assert main(["validate", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "+30% memory !" in out and "+4% compute" in out
    assert "machine speed: 1 of 2 probed configurations" in out
    assert "at each step's own machine speed" in out and "(n=2)" in out
    assert "memory copy took 30% longer than at the calibration" in out  # worst cases
    assert main(["validate", "--db", str(db), "--json"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)["cases"]
    cases = {c["network"]: c["speed_drift"] for c in doc}
    assert cases["fcn5"]["flagged"] and not cases["alexnet"]["flagged"]
    # fcn5's memory passes taken 1.3x slower, the rest as predicted
    fcn5 = next(c for c in doc if c["network"] == "fcn5")
    b = fcn5["breakdown"]
    assert fcn5["at_measured_speed_error"] == pytest.approx(
        (fcn5["kernels_s"] + 0.3 * b["memory_s"]) / fcn5["measured_s"] - 1)
    assert main(["report", "--db", str(db), "--out", str(db.parent / "rep")]) == 0
    md = (db.parent / "rep" / "report.md").read_text()
    assert "~ measured while the machine ran at another speed" in md and "off, 1 cell)" in md
    assert "+30% memory !" in md  # the predictions' table


def test_a_parallel_run_measured_at_another_speed_is_flagged_too(db):
    """A parallel run's rank 0 probes the machine after its steps (tests/test_parallel.py
    checks the record); validate sets it against the calibration as it does a step's."""
    from dlperf.kinds.calibrate import validate
    from dlperf.kinds.parallel.make import make_spec

    with Store(db) as store:
        _calibrated(store, CALIBRATED, allreduce=True)
        for workers, probe in ((2, {**CALIBRATED, "compute": CALIBRATED["compute"] * 1.4}),
                               (4, dict(CALIBRATED))):
            r = result("fcn5", 1, 0.05)
            store.add(r.model_copy(update={
                "spec": make_spec("fcn5", size="tiny", strategy="sync", workers=workers,
                                  batch_size=64),
                "metrics": r.metrics.model_copy(update={"speed_probe": probe})}))
        cal = calibration.local_calibration(store)
        cases, _ = validate.cases(store, cal, kinds=("parallel",))
    drift = {c.row.spec.options.workers: c.drift for c in cases}
    assert drift[2] == ("compute", pytest.approx(0.4)) and drift[4] == (
        "compute", pytest.approx(0.0))
    assert [c.row.spec.options.workers for c in cases if c.drifted] == [2]

def test_predict_and_calibrate_say_how_the_machines_speed_compares(db, capsys, monkeypatch):
    from dlperf.cli.calibrate import speed_steadiness

    with Store(db) as store:
        _calibrated(store, CALIBRATED)
        fit = calibration.local_calibration(store).find("torch", 1)
    monkeypatch.setattr(speed_probe, "measure", lambda: dict(CALIBRATED))
    assert main(["predict", "-n", "fcn5", "--device", "cpu", "--db", str(db)]) == 0
    assert "machine speed: as when calibrated" in capsys.readouterr().out
    monkeypatch.setattr(speed_probe, "measure",
                        lambda: {**CALIBRATED, "compute": CALIBRATED["compute"] * 1.5})
    assert main(["predict", "-n", "fcn5", "--device", "cpu", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "matrix product took 50% longer" in out and "calibrate --force" in out
    other = fit.model_copy(update={"threads": 2, "speed_probe": {
        **CALIBRATED, "memory": CALIBRATED["memory"] * 1.25}})
    assert "MACHINE SPEED MOVED" in speed_steadiness([fit, other])
    assert "25% longer with torch x2 than with torch x1" in speed_steadiness([fit, other])
    assert "steady" in speed_steadiness([fit, fit.model_copy(update={"threads": 2})])
    assert speed_steadiness([fit]) is None
