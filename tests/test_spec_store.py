"""RunSpec identity and JSON round trip; the SQLite store."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import sqlite3

import pytest

from dlperf.core import environment
from dlperf.core import store as store_module
from dlperf.core.aggregate import aggregate
from dlperf.core.errors import UsageError
from dlperf.core.migrate import GPU_PRECISION_WARNING
from dlperf.core.settings import FULL_MEASUREMENT, QUICK_MEASUREMENT
from dlperf.core.spec import Measurement, Metrics, RunResult, RunSpec
from dlperf.core.store import Store


def _ok(spec: RunSpec, median: float = 0.5) -> RunResult:
    m = Metrics(steps=3, median_s=median, mean_s=median, std_s=0.0, min_s=median, max_s=median,
                mad_s=0.0, iqr_s=0.0, cv=0.0, samples_per_s=spec.batch_size / median)
    return RunResult(spec=spec, status="ok", metrics=m, step_times_s=[median] * 3)


def test_spec_round_trip_and_ids():
    s = RunSpec(network="fcn5", threads=2, batch_size=64, params={"a": 1})
    back = RunSpec.model_validate_json(s.model_dump_json())
    assert back == s
    assert back.run_id == s.run_id
    # the measurement settings and the precision are part of what is measured
    assert s.model_copy(update={"measurement": Measurement(min_time_s=9)}).config_id != s.config_id
    assert s.model_copy(update={"precision": "bf16"}).config_id != s.config_id
    assert s.precision == "fp32" and "bf16" not in s.label()
    assert s.model_copy(update={"precision": "bf16"}).label().endswith(" bf16")
    # repetitions share the configuration, not the run
    r1 = s.model_copy(update={"repeat": 1})
    assert r1.config_id == s.config_id and r1.run_id != s.run_id
    assert s.model_copy(update={"threads": 4}).config_id != s.config_id


def test_spec_rejects_bad_values():
    with pytest.raises(ValueError):
        RunSpec(network="fcn5", threads=0)
    with pytest.raises(ValueError):
        RunSpec(network="fcn5", batch_size=0)
    with pytest.raises(ValueError):
        RunSpec(network="fcn5", nonsense=1)


def test_store_keeps_every_row_and_reads_the_latest(db):
    spec = RunSpec(network="fcn5", batch_size=64)
    with Store(db) as st:
        st.add(_ok(spec, 1.0))
        st.add(RunResult.failed(spec.model_copy(update={"threads": 2}), "timeout", "too slow"))
        st.add(_ok(spec, 2.0))  # a forced re-measurement
        assert st.count() == 3
        latest = st.results(kind="step")
        assert [r.metrics.median_s if r.ok else r.failure.reason for r in latest] == ["timeout", 2.0]
        assert len(st.results(kind="step", latest=False)) == 3
        assert st.done([spec.run_id, "nope"]) == {spec.run_id}
        failed_id = spec.model_copy(update={"threads": 2}).run_id
        assert st.done([failed_id], include_failed=False) == set()
        env = st.environment(latest[-1].env_id)
        assert env["machine"]["logical_cpus"] >= 1


def test_store_schema_version_mismatch_is_a_usage_error(db):
    Store(db).close()
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    con.commit()
    con.close()
    with pytest.raises(UsageError, match="schema version 999"):
        Store(db)


def test_unwritable_store_path_is_a_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(UsageError, match="cannot open results store"):
        Store(blocker / "sub" / "x.db")


def _writer(path: str, tag: int, n: int) -> None:
    with Store(path) as st:
        for i in range(n):
            st.add(_ok(RunSpec(network="fcn5", batch_size=1 + i, seed=tag)))


def test_two_writers_at_once_lose_nothing(db):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(db), tag, 40)) for tag in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with Store(db) as st:
        assert st.count() == 80
        assert len({r.spec.run_id for r in st.results(kind="step")}) == 80


def test_resume_and_reads_keep_machines_apart(db):
    spec = RunSpec(network="fcn5", batch_size=64)
    here = _ok(spec, 1.0)
    elsewhere = _ok(spec, 3.0).model_copy(update={"machine_id": "another-machine"})
    with Store(db) as st:
        st.add(elsewhere)  # imported from another machine: not measured here
        assert st.done([spec.run_id]) == set()
        assert st.done([spec.run_id], machine_id="another-machine") == {spec.run_id}
        st.add(here)
        assert st.done([spec.run_id]) == {spec.run_id}
        latest = st.results(kind="step")  # newest row per run *and* machine
        assert sorted(r.metrics.median_s for r in latest) == [1.0, 3.0]
        assert {r.machine_id for r in latest} == {"another-machine", environment.machine_id()}


# The version-1 rule: a config_id hashed these RunSpec fields only, and results carried no
# precision and no machine (the row's machine_id column had it).
_V1_IDENTITY = ("kind", "network", "size", "framework", "variant", "device", "threads",
                "batch_size", "params", "seed")


def _v1_row(db: sqlite3.Connection, spec: dict, machine: str, median: float | None) -> None:
    ident = {k: spec[k] for k in _V1_IDENTITY}
    config_id = hashlib.sha1(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    run_id = f"{config_id}-r{spec['repeat']}"
    ok = median is not None
    result = {"schema_version": 1, "spec": spec, "status": "ok" if ok else "failed",
              "failure": None if ok else {"reason": "timeout", "message": "too slow"},
              "metrics": None if not ok else {
                  "steps": 3, "median_s": median, "mean_s": median, "std_s": 0.0,
                  "min_s": median, "max_s": median, "mad_s": 0.0, "iqr_s": 0.0, "cv": 0.0,
                  "samples_per_s": 1.0},
              "step_times_s": [median] * 3 if ok else [], "warnings": []}
    db.execute(
        "INSERT INTO results(run_id, config_id, kind, network, size, framework, variant, device,"
        " threads, batch_size, repeat, status, reason, median_s, env_id, machine_id, created_at,"
        " result) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (run_id, config_id, spec["kind"], spec["network"], spec["size"], spec["framework"],
         spec["variant"], spec["device"], spec["threads"], spec["batch_size"], spec["repeat"],
         result["status"], None if ok else "timeout", median, None, machine, 0.0,
         json.dumps(result)))


def test_a_version_1_store_is_upgraded_keeping_every_row(db):
    con = sqlite3.connect(db)
    con.executescript(store_module._SCHEMA)
    con.execute("INSERT INTO meta(key, value) VALUES ('schema_version', '1')")
    base = {"kind": "step", "network": "fcn5", "size": "tiny", "framework": "torch",
            "variant": "eager", "device": "cpu", "threads": 1, "batch_size": 8, "params": {},
            "seed": 0, "repeat": 0, "options": {}}
    quick, full = QUICK_MEASUREMENT.model_dump(), FULL_MEASUREMENT.model_dump()
    here = environment.machine_id()
    _v1_row(con, {**base, "measurement": quick}, here, 1.0)
    _v1_row(con, {**base, "measurement": full}, here, 2.0)  # same v1 ids as the quick row
    _v1_row(con, {**base, "threads": 2, "measurement": full}, here, None)
    _v1_row(con, {**base, "device": "gpu", "measurement": full}, here, 0.1)
    con.commit()
    con.close()

    with Store(db) as st:
        assert st.count() == 4
        version = st._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        assert version == (str(store_module.SCHEMA_VERSION),)
        results = st.results(kind="step")
        assert len(results) == 4  # the quick and the full row no longer share a run
        for r in results:
            assert r.spec.precision == "fp32" and r.machine_id == here
            row = st._db.execute("SELECT run_id, config_id FROM results WHERE median_s IS ? AND "
                                 "threads=? AND device=?", (r.metrics.median_s if r.ok else None,
                                                            r.spec.threads, r.spec.device))
            assert row.fetchone() == (r.spec.run_id, r.spec.config_id)
        q = RunSpec(**{**base, "measurement": QUICK_MEASUREMENT})
        f = RunSpec(**{**base, "measurement": FULL_MEASUREMENT})
        assert st.done([q.run_id, f.run_id]) == {q.run_id, f.run_id}
        rows = aggregate(results)
        assert sorted(r.median_s or 0.0 for r in rows) == [0.0, 0.1, 1.0, 2.0]
        gpu = next(r for r in results if r.spec.device == "gpu")
        assert GPU_PRECISION_WARNING in gpu.warnings
    with Store(db) as st:  # opening again changes nothing
        assert [r.spec.run_id for r in st.results(kind="step")] == [r.spec.run_id for r in results]


def _v2_row(db: sqlite3.Connection, spec: dict, result: dict) -> None:
    """A row as dlperf wrote it at schema 2: untyped options hashed as given, one untyped
    ``extra`` mapping per result."""
    ident = {**{k: spec[k] for k in (*_V1_IDENTITY, "precision")},
             "measurement": spec["measurement"]}
    if spec["options"]:
        ident["options"] = spec["options"]
    config_id = hashlib.sha1(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    result = {"schema_version": 2, "spec": spec, "warnings": [], "step_times_s": [], **result}
    ok = result["status"] == "ok"
    db.execute(
        "INSERT INTO results(run_id, config_id, kind, network, size, framework, variant, device,"
        " threads, batch_size, repeat, status, reason, median_s, env_id, machine_id, created_at,"
        " result) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (f"{config_id}-r0", config_id, spec["kind"], spec["network"], spec["size"],
         spec["framework"], spec["variant"], spec["device"], spec["threads"],
         spec["batch_size"], 0, result["status"],
         None if ok else result["failure"]["reason"], None, None,
         environment.machine_id(), 0.0, json.dumps(result)))


def test_a_version_2_store_opens_with_typed_options_and_outcomes_and_new_ids(db):
    con = sqlite3.connect(db)
    con.executescript(store_module._SCHEMA)
    con.execute("INSERT INTO meta(key, value) VALUES ('schema_version', '2')")
    base = {"size": "small", "framework": "torch", "variant": "eager", "device": "cpu",
            "threads": 1, "batch_size": 32, "params": {}, "seed": 0, "repeat": 0,
            "precision": "fp32", "measurement": Measurement().model_dump()}
    train = {**base, "kind": "train", "network": "ffn",
             "options": {"target": "none", "max_time_s": 60, "arm": "a"}}
    curve = [[0, 0.0, 0.1], [10, 0.5, 0.93]]
    _v2_row(con, train, {"status": "ok", "extra": {
        "quality": {"name": "accuracy", "higher_is_better": True, "unit": "", "target": None,
                    "reference": None, "description": "held-out accuracy"},
        "target_reached": False, "time_to_target_s": None, "steps_to_target": None,
        "train_s": 0.5, "eval_s": 0.1, "steps": 10, "epochs": 0.2, "final_quality": 0.93,
        "best_quality": 0.93, "curve": curve, "loss_curve": [[10, 0.3]], "dataset": "digits",
        "n_train": 1437, "n_test": 360, "options": {"target": None}, "stopped_by": "60 s"}})
    par = {**base, "kind": "parallel", "network": "fcn5", "size": "tiny",
           "options": {"strategy": "sync", "workers": 2, "lr": 0.01}}
    _v2_row(con, par, {"status": "failed", "failure": {"reason": "crash", "message": "x"},
                       "extra": {"strategy": "sync", "workers": 2, "log_tail": "the end",
                                 "launcher": {"nnodes": 1}, "stacks": {"1": "frame"},
                                 "partial": {"steps_logged": {"0": 3}}}})
    step = {**base, "kind": "step", "network": "fcn5", "size": "tiny", "options": {}}
    rate = {"framework": "torch", "kernel": "matmul", "flops": 1e11, "size": 2048,
            "shape": "s", "versions": {"torch": "2"}, "measured_at": 1.0, "failure": None,
            "raised_by": None, "round_flops": [1e11]}
    _v2_row(con, step, {"status": "ok", "metrics": {
        "steps": 3, "median_s": 1.0, "mean_s": 1.0, "std_s": 0.0, "min_s": 1.0, "max_s": 1.0,
        "mad_s": 0.0, "iqr_s": 0.0, "cv": 0.0, "samples_per_s": 1.0},
        "extra": {"peak": {"threads": 1, "device": "cpu", "rates": [rate],
                           "theoretical_flops": None, "theoretical": "", "flops": 1e11,
                           "best": "torch matmul"}}})
    con.commit()
    con.close()
    with Store(db) as st:
        [t] = st.results(kind="train")
        [p] = st.results(kind="parallel")
        [s] = st.results(kind="step")
        # typed options and outcomes
        assert t.spec.options.target == "none" and t.spec.options.arm == "a"
        assert t.outcome.curve == curve and t.outcome.quality.name == "accuracy"
        assert p.spec.options.strategy == "sync" and p.outcome.partial.steps_logged == {"0": 3}
        assert p.diagnostics.log_tail == "the end" and p.diagnostics.stacks == {"1": "frame"}
        assert s.outcome.peak.best.source == "torch matmul" and s.outcome.peak.flops == 1e11
        # the ids of the kinds with options follow the typed identity; the step's is kept
        ids = dict(st._db.execute("SELECT kind, run_id FROM results"))
        assert ids == {"train": t.spec.run_id, "parallel": p.spec.run_id, "step": s.spec.run_id}
        assert st.done([t.spec.run_id, p.spec.run_id]) == {t.spec.run_id, p.spec.run_id}
        # a spec made today for the same configuration is the stored one
        assert RunSpec(**train).run_id == t.spec.run_id


def test_the_allocator_is_this_processs_setting(monkeypatch):
    for var in environment.ALLOCATOR_VARS:
        monkeypatch.delenv(var, raising=False)
    assert environment.allocator() == environment.DEFAULT_ALLOCATOR
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_max=0")
    monkeypatch.setenv("LD_PRELOAD", "libjemalloc.so.2")
    assert environment.allocator() == ("LD_PRELOAD=libjemalloc.so.2; "
                                       "GLIBC_TUNABLES=glibc.malloc.mmap_max=0")


def test_processes_under_different_allocators_are_flagged_as_not_comparable():
    from tests.report_fixtures import result

    def under(allocator: str | None, median: float) -> RunResult:
        r = result("fcn5", 1, median)
        return r if allocator is None else r.model_copy(
            update={"software": {**r.software, "allocator": allocator}})

    default = environment.DEFAULT_ALLOCATOR
    (mixed,) = aggregate([under(default, 1.0), under("GLIBC_TUNABLES=x", 0.8)])
    assert any("different memory allocators" in w and "GLIBC_TUNABLES=x" in w
               for w in mixed.warnings)
    for same in ([under(default, 1.0), under(default, 1.0)], [under(None, 1.0), under(default, 1.0)]):
        (row,) = aggregate(same)  # one setting, or one an older dlperf did not record
        assert not any("allocators" in w for w in row.warnings)
