"""RunSpec identity and JSON round trip; the SQLite store."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3

import pytest

from dlperf.errors import UsageError
from dlperf.spec import Measurement, Metrics, RunResult, RunSpec
from dlperf.store import Store


def _ok(spec: RunSpec, median: float = 0.5) -> RunResult:
    m = Metrics(steps=3, median_s=median, mean_s=median, std_s=0.0, min_s=median, max_s=median,
                mad_s=0.0, iqr_s=0.0, cv=0.0, samples_per_s=spec.batch_size / median)
    return RunResult(spec=spec, status="ok", metrics=m, step_times_s=[median] * 3)


def test_spec_round_trip_and_ids():
    s = RunSpec(network="fcn5", threads=2, batch_size=64, params={"a": 1})
    back = RunSpec.model_validate_json(s.model_dump_json())
    assert back == s
    assert back.run_id == s.run_id
    # measurement settings refine a number; they do not change what is measured
    assert s.model_copy(update={"measurement": Measurement(min_time_s=9)}).config_id == s.config_id
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
