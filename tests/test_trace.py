"""``dlperf explain --trace``: the timeline file. Checked against the JSON trace-event
format's schema (the events dlperf writes: complete slices 'X', metadata 'M', flow 's'/'f',
as the format's specification defines them), and opened with Perfetto's own trace
processor where its binary is on this machine (it downloads it from get.perfetto.dev
otherwise, which this test never does)."""

from __future__ import annotations

import json
import os
import shutil

import jsonschema
import pytest

from dlperf.cli import main
from dlperf.core.spec import Metrics, RunResult, RunSpec
from dlperf.core.store import Store
from dlperf.kinds.explain import trace
from dlperf.kinds.explain.analysis import Explanation
from dlperf.kinds.explain.options import ProfiledOp, ProfileOutcome
from dlperf.perfmodel.ops import OpTime
from tests import calibration_fixtures as made_up

_COMMON = {"pid": {"type": "integer"}, "tid": {"type": "integer"},
           "name": {"type": "string"}, "cat": {"type": "string"},
           "ts": {"type": "number", "minimum": 0}, "args": {"type": "object"}}
SCHEMA = {
    "type": "object", "required": ["traceEvents"],
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "traceEvents": {"type": "array", "items": {"oneOf": [
            {"type": "object", "required": ["ph", "name", "ts", "dur", "pid", "tid"],
             "properties": {**_COMMON, "ph": {"const": "X"},
                            "dur": {"type": "number", "minimum": 0}}},
            {"type": "object", "required": ["ph", "name", "pid", "args"],
             "properties": {**_COMMON, "ph": {"const": "M"},
                            "name": {"enum": ["process_name", "thread_name",
                                              "process_sort_index", "thread_sort_index"]},
                            "args": {"type": "object", "required": ["name"]}}},
            {"type": "object", "required": ["ph", "id", "ts", "pid", "tid"],
             "properties": {**_COMMON, "ph": {"enum": ["s", "t", "f"]},
                            "id": {"type": ["integer", "string"]},
                            "bp": {"const": "e"}}},
        ]}},
    },
}


def _explanation() -> Explanation:
    spec = RunSpec(network="fcn5", size="tiny", batch_size=8)
    m = Metrics(steps=3, median_s=0.01, mean_s=0.01, std_s=0, min_s=0.01, max_s=0.01,
                mad_s=0, iqr_s=0, cv=0, samples_per_s=800)
    result = RunResult(spec=spec, status="ok", metrics=m, step_times_s=[0.01] * 3)
    ops = [OpTime("aten::addmm", ((8, 4), (8, 16), (16, 4)), "gemm", 2, 0.004, 0.002, 1e6, 0),
           OpTime("aten::relu", ((8, 16),), "memory", 2, 0.001, 0.0012, 0, 1024)]
    profile = ProfileOutcome(profiler="torch profiler", steps=2, step_s=0.007, ops=(
        ProfiledOp(name="aten::relu", shapes=((8, 16),), calls=2, time_s=0.001),
        ProfiledOp(name="aten::addmm", shapes=((8, 4), (8, 16), (16, 4)), calls=2,
                   time_s=0.004)))
    return Explanation(result=result, profile=profile, ops=ops,
                       fit=_fit(), prediction=None)


def _fit():
    from tests.test_calibration import made_up_fit

    return made_up_fit()


def test_the_trace_has_the_measured_and_the_modelled_ops_aligned_by_flows():
    doc = trace.trace_events(_explanation())
    jsonschema.validate(doc, SCHEMA)
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    measured = [e for e in slices if e["tid"] == trace.MEASURED]
    modelled = [e for e in slices if e["tid"] == trace.MODEL]
    # the profiler's order, not most-time-first; the time outside the ops last
    assert [e["name"] for e in measured] == ["aten::relu", "aten::addmm", "outside the ops"]
    assert [e["name"] for e in modelled] == ["aten::relu", "aten::addmm"]
    assert [e["dur"] for e in measured] == pytest.approx([1000, 4000, 2000])  # microseconds
    assert [e["dur"] for e in modelled] == pytest.approx([1200, 2000])
    assert measured[1]["ts"] == pytest.approx(1000) and modelled[1]["ts"] == pytest.approx(1200)
    gemm = measured[1]["args"]
    assert gemm["flops"] == 1e6 and gemm["calibrated_flop_per_s"] == pytest.approx(5e8)
    flows = [e for e in doc["traceEvents"] if e["ph"] in "sf"]
    by_id = {}
    for f in flows:
        by_id.setdefault(f["id"], []).append(f)
    for pair in by_id.values():  # each flow runs from inside a measured slice to its model
        start, end = sorted(pair, key=lambda f: f["ph"] != "s")
        assert start["tid"] == trace.MEASURED and end["tid"] == trace.MODEL
        src = next(e for e in measured if e["ts"] <= start["ts"] <= e["ts"] + e["dur"])
        dst = next(e for e in modelled if e["ts"] <= end["ts"] <= e["ts"] + e["dur"])
        assert src["name"] == dst["name"]
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert any("measured" in n for n in names) and any("calibrated" in n for n in names)


def test_explain_writes_a_trace_of_a_real_torch_step(db, tmp_path, capsys):
    with Store(db) as store:
        made_up.calibrated(store)
    path = tmp_path / "t.json"
    assert main(["explain", "-n", "fcn5", "--size", "tiny", "-b", "16", "--steps", "2",
                 "--threads", "1", "--db", str(db), "--trace", str(path)]) == 0
    assert "trace written to" in capsys.readouterr().out
    # under --json the line goes to stderr, and stdout is the explanation alone
    assert main(["explain", "-n", "fcn5", "--size", "tiny", "-b", "16", "--steps", "2",
                 "--threads", "1", "--db", str(db), "--trace", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["measured_s"] > 0 and "trace written to" in captured.err
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, SCHEMA)
    tracks = {e["tid"] for e in doc["traceEvents"] if e["ph"] == "X" and
              e["name"].startswith("aten::")}
    assert tracks == {trace.MEASURED, trace.MODEL}
    assert any(e["tid"] == trace.PREDICTED for e in doc["traceEvents"] if e["ph"] == "X")
    assert main(["explain", "-n", "fcn5", "--size", "tiny", "--db", str(db), "--trace",
                 str(tmp_path / "no" / "such" / "t.json")]) == 2
    assert "cannot write the trace" in capsys.readouterr().err
    # the report writes each stored profile's timeline beside itself and names it
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "rep")]) == 0
    written = sorted((tmp_path / "rep" / "traces").glob("fcn5*.json"))
    assert len(written) == 2  # the two profiled batch sizes
    for w in written:
        jsonschema.validate(json.loads(w.read_text()), SCHEMA)
        assert f"traces/{w.name}" in (tmp_path / "rep" / "report.md").read_text()


def _trace_processor() -> str | None:
    return os.environ.get("DLPERF_TRACE_PROCESSOR") or shutil.which("trace_processor_shell") \
        or shutil.which("trace_processor")


@pytest.mark.skipif(_trace_processor() is None, reason="Perfetto's trace processor binary "
                    "is not on this machine (the perfetto package downloads it from "
                    "get.perfetto.dev, unreachable here; set DLPERF_TRACE_PROCESSOR to a "
                    "trace_processor_shell); the trace is checked against the format's "
                    "schema instead")
def test_perfettos_trace_processor_reads_the_trace(tmp_path):
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    path = trace.write(_explanation(), tmp_path / "t.json")
    tp = TraceProcessor(trace=str(path), config=TraceProcessorConfig(bin_path=_trace_processor()))
    try:
        rows = list(tp.query("select slice.name as name, thread.name as track from slice "
                             "join thread_track on slice.track_id = thread_track.id "
                             "join thread using (utid) order by slice.ts"))
    finally:
        tp.close()
    assert {(r.name, "measured" in r.track) for r in rows} >= {("aten::addmm", True),
                                                              ("aten::addmm", False)}
