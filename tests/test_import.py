"""dlperf import: another machine's store (or a report's results.json) merged without
duplicates, both machines side by side in the DLBench table, the source untouched, and
bad input refused with one line."""

from __future__ import annotations

import hashlib
import json
import sqlite3

import pytest

from dlperf.api import render_report as render
from dlperf.cli import main
from dlperf.core import environment
from dlperf.core.spec import RunResult
from dlperf.core.store import Store
from dlperf.core.store_import import import_file
from dlperf.report import Filters
from dlperf.report.machines import resolve_machines
from tests.report_fixtures import OTHER_ID, fcn5_table, other_machine, result


@pytest.fixture
def server_db(tmp_path, monkeypatch):
    """A store filled on 'another machine' (16 cores), as a server's sweep would."""
    path = tmp_path / "server.db"
    with other_machine(monkeypatch), Store(path) as st:
        fcn5_table(st, scale=0.25)
    return path


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_import_merges_another_machine_without_duplicates(db, server_db, tmp_path, capsys):
    with Store(db) as st:
        fcn5_table(st)
        before = [r.model_dump() for r in st.results(kind=None, latest=False)]
    source = _digest(server_db)
    assert main(["import", str(server_db), "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "8 results added, 0 already here" in out
    assert f"machine {OTHER_ID[:8]} (Other CPU 9000, 16 cores, 64 GiB): 8 added" in out
    assert _digest(server_db) == source  # the source is never modified
    assert main(["import", str(server_db), "--db", str(db)]) == 0  # again: nothing new
    assert "0 results added, 8 already here" in capsys.readouterr().out
    with Store(db) as st:
        everything = st.results(kind=None, latest=False)
        assert len(everything) == 16
        # what the store held is still there, unchanged
        mine = [r.model_dump() for r in everything if r.machine_id == environment.machine_id()]
        assert mine == before
        # imported results never count as measured on this machine (resume measures them)
        ids = {r.spec.run_id for r in everything}
        assert st.done(ids) == {r.spec.run_id for r in everything
                                if r.machine_id == environment.machine_id()}
        rep = render(st, tmp_path / "rep")
    t = next(s for s in rep.sections if s.name == "dlbench").tables[0]
    groups = [g for g, _ in t.groups]
    assert groups[1].endswith("(this machine) [" + environment.machine_id()[:8] + "]")
    assert groups[2] == f"Other CPU 9000, 16 cores, 64 GiB [{OTHER_ID[:8]}]"
    torch = next(v for v in t.values if v[:2] == ["fcn5", "torch/eager"])
    assert torch[4:] == [1.0, 0.6, 0.9, 0.25, 0.15, 0.225]  # both machines, one row
    env = next(s for s in rep.sections if s.name == "environment").tables[0]
    assert {r[0] for r in env.rows} == {environment.machine_id()[:8], OTHER_ID[:8]}


def test_machines_filter_and_newest_measurement_wins(db, server_db, tmp_path, monkeypatch):
    with Store(db) as st:
        fcn5_table(st)
        import_file(st, server_db)
        assert resolve_machines(st, "this") == (environment.machine_id(),)
        assert resolve_machines(st, OTHER_ID[:8]) == (OTHER_ID,)
        assert resolve_machines(st, "all") == ()
        only = render(st, tmp_path / "this", Filters(machines=(environment.machine_id(),)))
        assert not next(s for s in only.sections if s.name == "dlbench").tables[0].groups
    # the server measured fcn5 into one store, later again into another; the newer store
    # imported first, then the older: the newer measurement stays the one shown
    older = tmp_path / "older.db"
    with other_machine(monkeypatch), Store(older) as st:
        st.add(result("fcn5", 1, 0.3, started=1.0))
    newer = tmp_path / "newer.db"
    with other_machine(monkeypatch), Store(newer) as st:
        st.add(result("fcn5", 1, 0.2))
    with Store(db) as st:
        import_file(st, newer)
        got = import_file(st, older)
        assert sum(got.added.values()) == 1
        latest = [r for r in st.results(network="fcn5", threads=1, framework="torch")
                  if r.machine_id == OTHER_ID]
        assert [r.metrics.median_s for r in latest] == [0.2]


def test_import_of_a_report_results_json(db, server_db, tmp_path, monkeypatch):
    with other_machine(monkeypatch), Store(server_db) as st:
        render(st, tmp_path / "server-report")
    with Store(db) as st:
        got = import_file(st, tmp_path / "server-report" / "results.json")
        assert got.added == {OTHER_ID: 8}  # the newest result of each of the 8 runs
        assert got.machines[OTHER_ID]["cpu_model"] == "Other CPU 9000"
        again = import_file(st, tmp_path / "server-report" / "results.json")
        assert again.added == {} and again.present == {OTHER_ID: 8}


@pytest.mark.parametrize("kind, message", [
    ("text", "neither a dlperf store nor a report's results.json"),
    ("csv", "cannot be read"),
    ("newer", "newer than this dlperf reads"),
    ("sqlite", "not a dlperf store"),
    ("missing", "no such file"),
    ("json", "not a report's results.json"),
])
def test_bad_imports_are_one_line_and_change_nothing(db, server_db, tmp_path, capsys, kind,
                                                     message):
    path = tmp_path / "bad"
    if kind == "text":
        path.write_text("hello")
    elif kind == "csv":
        path = tmp_path / "dlbench.csv"
        path.write_text("network,framework\nfcn5,torch\n")
    elif kind == "newer":
        path = tmp_path / "newer.db"
        path.write_bytes(server_db.read_bytes())
        with sqlite3.connect(path) as c:
            c.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    elif kind == "sqlite":
        with sqlite3.connect(path) as c:
            c.execute("CREATE TABLE t (x)")
    elif kind == "json":
        path.write_text(json.dumps({"rows": []}))
    with Store(db) as st:
        fcn5_table(st)
        n = st.count()
    assert main(["import", str(path), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    with Store(db) as st:
        assert st.count() == n


def test_an_older_store_is_upgraded_in_a_copy_never_in_place(db, server_db):
    with sqlite3.connect(server_db) as c:  # as a dlperf of schema 1 left it
        c.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    source = _digest(server_db)
    with Store(db) as st:
        got = import_file(st, server_db)
    assert got.added == {OTHER_ID: 8}
    assert _digest(server_db) == source
    with sqlite3.connect(server_db) as c:
        assert c.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("1",)


def test_an_unknown_machine_is_one_line(db, server_db, capsys):
    with Store(db) as st:
        import_file(st, server_db)
    assert main(["report", "--db", str(db), "--machines", "ffff0000"]) == 2
    err = capsys.readouterr().err
    assert "'ffff0000' is no machine in the store" in err and OTHER_ID[:8] in err
    assert len(err.strip().splitlines()) == 1


def test_experiments_of_an_imported_machine_stay_out_of_this_machines_tables(db, tmp_path,
                                                                            monkeypatch):
    from dlperf.core.spec import RunSpec
    from dlperf.kinds.train.experiments import arm_results

    spec = RunSpec(kind="train", network="ffn", size="small", batch_size=32,
                   options={"experiment": "init-scale", "arm": "ffn default init"})
    other = tmp_path / "other.db"
    with other_machine(monkeypatch), Store(other) as st:
        st.add(RunResult(spec=spec, status="ok", started_at=5.0))
    with Store(db) as st:
        import_file(st, other)
        assert arm_results(st, "init-scale") == {}
        assert list(arm_results(st, "init-scale", machine_id=OTHER_ID)) == ["ffn default init"]
