"""``dlperf explain``: one network's training step under the framework's own profiler, each
op group beside the model calibrated on this machine, and the diagnosis. Parsing and
printing only (``dlperf.api.explain``, ``dlperf.kinds.explain.analysis``).

    dlperf explain --network fcn5 --framework torch --threads 1
"""

from __future__ import annotations

import argparse
import json

from dlperf.cli import args
from dlperf.cli.progress import ProgressListener, console, out
from dlperf.core import units
from dlperf.core.errors import UsageError


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain", help="profile one step and set each op beside the calibrated model",
        description="Time one network's training step (the usual warm-up rule), run a few "
        "more under the framework's own profiler (torch.profiler, jax.profiler's trace of "
        "each XLA instruction, TensorFlow's trace of each graph op), and print per op group "
        "(op and operand shapes) the measured time, the model's time from this machine's "
        "kernel calibration (dlperf calibrate), the achieved FLOP/s against the calibrated "
        "rate for that shape, and a one-line diagnosis.")
    args.add_run_flags(
        p, network=args.REQUIRED, framework=True, threads=True,
        batch_size=args.Take(help="(default: the network's)"), size=True, param=True,
        device=True, precision=args.Take(help="the step's precision, against the "
                                         "calibration at it (dlperf calibrate --precision; "
                                         "default fp32)"))
    p.add_argument("--steps", type=args.positive_int, default=5, help="steps under the "
                   "profiler (default 5)")
    p.add_argument("--top", type=args.positive_int, default=12, help="op groups to list "
                   "(default 12)")
    p.add_argument("--trace", metavar="FILE", help="also write the step as a timeline (JSON "
                   "trace-event format: open it in ui.perfetto.dev or chrome://tracing): the "
                   "measured ops, the model's time for each, the predicted step")
    args.add_json(p)
    args.add_db(p)
    p.set_defaults(func=cmd_explain)


def cmd_explain(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.kinds.explain.analysis import KIND_NAMES
    from dlperf.report.exporters import print_table
    from dlperf.report.tables import Table
    with ProgressListener(to_stderr=a.json) as listener:  # --json: stdout for the document
        e = api.explain(a.network, framework=a.framework, threads=a.threads,
                        batch_size=a.batch_size, size=a.size, params=args.parse_params(a.param),
                        device=a.device, steps=a.steps, db=a.db, listener=listener,
                        precision=a.precision)
    if a.trace:
        from dlperf.kinds.explain import trace

        try:
            written = trace.write(e, a.trace)
        except OSError as err:
            raise UsageError(f"cannot write the trace to {a.trace}: {err.strerror}") from None
        console(a.json).print(f"trace written to {written} (open it in ui.perfetto.dev or "
                              "chrome://tracing)", style="dim")
    if a.json:
        print(json.dumps(_json(e), indent=1))
        return 0
    step = e.profile.step_s
    out.print(f"[bold]{e.result.spec.label()}[/]: measured {units.seconds(e.measured_s)} per "
              f"step (timed, unprofiled); under {e.profile.profiler}: "
              f"{units.seconds(step)}, of which ops {units.seconds(e.ops_s)} and outside them "
              f"{units.seconds(e.outside_s)}"
              + (f"; the model predicts {units.seconds(e.prediction.time_s)}"
                 if e.prediction else ""))
    rows = []
    for o in e.ops[:a.top]:
        modelled = o.kind != "unmodelled"
        rows.append([o.name, o.shape_text(), o.kind, f"{o.calls:g}", units.seconds(o.measured_s),
                     units.seconds(o.model_s) if modelled else "-",
                     units.percent(o.measured_s / step),
                     units.flops(o.achieved_flops, "/s") if o.achieved_flops else "-",
                     units.flops(o.calibrated_flops, "/s") if o.calibrated_flops else "-",
                     units.percent(o.share_of_calibrated) if modelled else "-"])
    print_table(Table(title="Op groups per step (most time first)", headers=[
        "op", "operands", "kind", "calls", "measured", "model", "of step", "achieved",
        "calibrated", "of calibrated"], rows=rows, caption=f"{len(e.ops)} op groups in all; "
        "'model': this machine's kernel curves for the op's shape; 'of calibrated': model / "
        "measured (100%: runs as the calibration expects)."), out)
    print_table(Table(title="By kind of op", headers=["kind", "measured", "model", "of step"],
                      rows=[[KIND_NAMES[k], units.seconds(m),
                             units.seconds(p) if k != "unmodelled" else "-",
                             units.percent(m / step)] for k, m, p in e.by_kind()]), out)
    out.print(f"[bold]diagnosis:[/] {e.diagnosis()}", markup=True)
    for note in e.notes():
        out.print(f"note: {note}", markup=False)
    out.print(f"calibration: {e.fit.describe()}", markup=False)
    return 0


def _json(e) -> dict:
    return {"label": e.result.spec.label(), "measured_s": e.measured_s,
            "profiled_step_s": e.profile.step_s, "ops_s": e.ops_s, "outside_s": e.outside_s,
            "predicted_s": e.prediction.time_s if e.prediction else None,
            "diagnosis": e.diagnosis(), "notes": e.notes(),
            "ops": [{"name": o.name, "shapes": o.shapes, "kind": o.kind, "calls": o.calls,
                     "measured_s": o.measured_s, "model_s": o.model_s, "flops": o.flops,
                     "bytes": o.bytes} for o in e.ops]}
