"""Adding a kind of run is one package plus one line in ``dlperf.kinds.KINDS``: a kind
made here (its options, its body, its report section; what a package ``kinds/echo/``
would hold) and registered by that one line is planned, claimed, run, stored, read back
with its typed options and outcome, and shown in the report, with no change to core,
the engine or the report."""

from __future__ import annotations

import time

import pytest

from dlperf import api, kinds
from dlperf.core import kind_table
from dlperf.core.payload import Frozen, Payload
from dlperf.core.spec import RunResult, RunSpec
from dlperf.core.store import Store
from dlperf.engine.runner import Runner
from dlperf.kinds.kind import Kind
from dlperf.report.base import Section
from dlperf.report.tables import Table


# ---- what kinds/echo/ would hold: options, outcome, run body, section, entry
class EchoOptions(Frozen):
    words: int = 3


class EchoOutcome(Payload):
    said: str


def run_echo(spec, backend, emit, base, resume=None) -> RunResult:
    o = spec.options
    emit({"phase": "echo"})
    return RunResult(spec=spec, status="ok", started_at=time.time(), finished_at=time.time(),
                     outcome=EchoOutcome(said=" ".join([spec.network] * o.words)), **base)


def echo_section(store, out, filters):
    rows = store.results(kind="echo")
    if not rows:
        return None
    return Section("echo", "Echo", tables=[Table("Echo", ["said"],
                                                 [[r.outcome.said] for r in rows])])


ECHO = Kind(options=EchoOptions, outcome=EchoOutcome, run=run_echo, launcher="in_process",
            sections=lambda predictor: [echo_section])


@pytest.fixture
def echo_registered(monkeypatch):
    # the one registry line: KINDS["echo"] = ECHO (and the root hands core the table again)
    monkeypatch.setitem(kinds.KINDS, "echo", ECHO)
    kind_table.install(kinds.KINDS)
    yield
    monkeypatch.delitem(kinds.KINDS, "echo")
    kind_table.install(kinds.KINDS)


def test_a_new_kind_runs_is_stored_read_back_and_reported(echo_registered, tmp_path):
    db = tmp_path / "r.db"
    spec = RunSpec(kind="echo", network="hello", framework="none", options={"words": 2})
    assert isinstance(spec.options, EchoOptions)  # core typed it through the table
    assert spec.identity()["options"] == {"words": 2}

    with Store(db) as store:
        [result] = Runner(store).run_all([spec])
    assert result.ok and result.outcome.said == "hello hello"

    with Store(db) as store:  # read back: typed options and outcome
        [back] = store.results(kind="echo")
    assert isinstance(back.spec.options, EchoOptions) and isinstance(back.outcome, EchoOutcome)
    assert back.spec.run_id == spec.run_id

    rep = api.report(db=db, out=tmp_path / "rep", predictions=False)
    assert "echo" in [s.name for s in rep.sections]
    assert "hello hello" in (tmp_path / "rep" / "report.md").read_text()


def test_an_unregistered_kind_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown kind of run 'echo'"):
        RunSpec(kind="echo", network="hello")
