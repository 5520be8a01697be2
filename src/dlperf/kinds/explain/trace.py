"""An explained step as a timeline that Perfetto (ui.perfetto.dev), Chrome's
chrome://tracing and TensorBoard's trace viewer open: the JSON trace-event format
("Trace Event Format", Google, the format's public specification; times in
microseconds).

The profilers dlperf reads report each op group's time per step, not every call's start,
so the timeline is one mean step laid out op group after op group in the order the
profiler first recorded them: track 1 the measured time of each group (its calls merged
into one slice), then the framework's own time outside the ops; track 2 the model's time
for the same group, from this machine's calibrated curves; a flow arrow joins each
group's two slices, so a group that ran slower than its calibration shows as a longer
slice above a shorter one. Track 3 is the whole step as the layer model predicts it.
Every slice carries its FLOPs, bytes, calls and rates as arguments.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dlperf.kinds.explain.analysis import KIND_NAMES, Explanation

PID = 1
MEASURED, MODEL, PREDICTED = 1, 2, 3
_US = 1e6


def trace_events(e: Explanation) -> dict[str, Any]:
    """The trace as a JSON-ready object (``{"traceEvents": [...], ...}``)."""
    label = e.result.spec.label()
    order = {(o.name, tuple(tuple(s) for s in o.shapes)): i
             for i, o in enumerate(e.profile.ops)}
    ops = sorted(e.ops, key=lambda o: order.get((o.name, tuple(tuple(s) for s in o.shapes)),
                                                len(order)))
    events: list[dict[str, Any]] = [
        _meta("process_name", 0, name=f"dlperf explain: {label}"),
        _meta("thread_name", MEASURED, name=f"measured ({e.profile.profiler}, mean step)"),
        _meta("thread_name", MODEL, name="model: the same ops on the calibrated curves"),
        _meta("thread_name", PREDICTED, name="model: the whole step (layer model)"),
    ]
    t_meas = t_model = 0.0
    for i, o in enumerate(ops):
        args = _args(o)
        events.append(_slice(o.name, o.kind, MEASURED, t_meas, o.measured_s, args))
        events.append(_slice(o.name, o.kind, MODEL, t_model, o.model_s, args))
        # the flow starts in the measured slice and ends in the modelled one ('e': bound
        # to the slice enclosing the end point)
        events.append({"ph": "s", "id": i + 1, "name": "same op", "cat": "op", "pid": PID,
                       "tid": MEASURED, "ts": (t_meas + o.measured_s / 2) * _US})
        events.append({"ph": "f", "bp": "e", "id": i + 1, "name": "same op", "cat": "op",
                       "pid": PID, "tid": MODEL, "ts": (t_model + o.model_s / 2) * _US})
        t_meas += o.measured_s
        t_model += o.model_s
    if e.outside_s > 0:
        events.append(_slice("outside the ops", "framework", MEASURED, t_meas, e.outside_s,
                             {"what": "Python, the autograd engine's scheduling, the "
                              "allocator, the profiler itself"}))
    if e.prediction is not None:
        events.append(_slice("predicted step", "prediction", PREDICTED, 0.0,
                             e.prediction.time_s, {"predicted_s": e.prediction.time_s,
                                                   "measured_unprofiled_s": e.measured_s}))
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"dlperf": label, "measured_s": e.measured_s,
                          "profiled_step_s": e.profile.step_s, "diagnosis": e.diagnosis(),
                          "calibration": e.fit.describe()}}


def write(e: Explanation, path: str | Path) -> Path:
    p = Path(path)
    p.write_text(json.dumps(trace_events(e)))
    return p


def _meta(what: str, tid: int, name: str) -> dict[str, Any]:
    return {"ph": "M", "name": what, "pid": PID, "tid": tid, "args": {"name": name}}


def _slice(name: str, cat: str, tid: int, start_s: float, dur_s: float,
           args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "pid": PID, "tid": tid,
            "ts": start_s * _US, "dur": max(dur_s, 0.0) * _US, "args": args}


def _args(o) -> dict[str, Any]:
    return {"kind": KIND_NAMES.get(o.kind, o.kind), "operands": o.shape_text(),
            "calls_per_step": o.calls, "measured_s": o.measured_s, "model_s": o.model_s,
            "flops": o.flops or None, "bytes": o.bytes or None,
            "achieved_flop_per_s": o.achieved_flops,
            "calibrated_flop_per_s": o.calibrated_flops,
            "model_over_measured": o.share_of_calibrated}
