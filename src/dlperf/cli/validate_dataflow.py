"""``dlperf validate --kinds dataflow``: the input-pipeline model against every step
measured here on a pipeline (``kinds.dataflow.validate``). Parsing and printing only."""

from __future__ import annotations

import argparse
import json

from dlperf.cli.progress import out
from dlperf.core import units
from dlperf.core.errors import UsageError


def validate_dataflow(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.kinds.dataflow import validate as dv
    from dlperf.report.exporters import print_table
    from dlperf.report.tables import Table

    cases, skipped = api.dataflow_validation(db=a.db, networks=a.networks or (),
                                             frameworks=a.frameworks or ())
    if not cases:
        raise UsageError("no step measured here on an input pipeline that the model can "
                         "predict (measure some: dlperf dataflow sweep; calibrate the "
                         "loaders: dlperf calibrate --dataflow)"
                         + (f"; left out: {skipped[0][1]}" if skipped else ""))
    counts = dv.worker_counts(cases)
    summary = dv.summarize(cases, counts)
    if a.json:
        print(json.dumps({"cases": [_case_json(c) for c in cases],
                          "worker_counts": [vars(w) | {"off_by": w.off_by} for w in counts],
                          "summary": summary}, indent=1))
        return 0
    print_table(Table(
        title="Input pipelines: predicted against measured (this machine)",
        headers=["configuration", "stall measured", "stall predicted", "points",
                 "on the floor", "points", "time measured", "predicted", "error"],
        rows=[[c.row.spec.label(), units.percent(c.measured_share),
               units.percent(c.prediction.input.stall_share), f"{c.points:+.1f}",
               units.percent(c.on_floor.stall_share) if c.on_floor else "-",
               f"{c.floor_points:+.1f}" if c.on_floor else "-",
               units.seconds(c.measured_s), units.seconds(c.prediction.time_s),
               f"{c.error:+.0%}"] for c in sorted(cases, key=lambda c: c.row.spec.label())],
        caption="Stall share: the time blocked waiting for the next mini-batch over the "
        "time per mini-batch. The step on data in place is the kernel model's; 'on the "
        "floor' puts the step measured here on synthetic data in its place (the input "
        "model's own error). The loader's cost per sample is its calibration's (dlperf "
        "calibrate --dataflow)."), out)
    if counts:
        print_table(Table(
            title="Smallest stall-free loader-worker count",
            headers=["pipeline", "measured stall share by workers", "measured", "predicted"],
            rows=[[w.label, ", ".join(f"w{k} {units.percent(v)}"
                                      for k, v in sorted(w.measured.items())),
                   _count(w.smallest_measured), _count(w.predicted)] for w in counts],
            caption=f"Stall-free: a stall share of at most "
            f"{units.percent(dv.STALL_FREE_SHARE)}."), out)
    out.print(summary_line(summary), markup=False)
    if skipped:
        out.print(f"left out: {len(skipped)} ({skipped[0][1]})", markup=False)
    return 0


def _count(n: int | None) -> str:
    return "none" if n is None else str(n)


def summary_line(s: dict) -> str:
    from dlperf.kinds.dataflow import validate as dv

    ok = s["median_abs_points"] <= dv.STALL_POINTS_TARGET
    line = (f"{s['n']} steps on a pipeline: stall share off by {s['median_abs_points']:.1f} "
            f"points at the median (target <= {dv.STALL_POINTS_TARGET:g}: "
            f"{'met' if ok else 'missed'}), p90 {s['p90_abs_points']:.1f}")
    if s["stalled"]:
        line += (f"; on the {s['stalled']} that stall (either side above "
                 f"{units.percent(dv.STALL_FREE_SHARE)}) {s['stalled_median_abs_points']:.1f}")
        if s["stalled_on_floor"]:
            line += (f", {s['stalled_on_floor_median_abs_points']:.1f} on the measured "
                     f"floor ({s['stalled_on_floor']})")
    line += f"; time per mini-batch median |error| {units.percent(s['median_abs_time_error'])}"
    if s["worker_counts_compared"]:
        line += (f"; smallest stall-free worker count within one in "
                 f"{s['worker_counts_within_one']} of {s['worker_counts_compared']}")
    return line


def _case_json(c) -> dict:
    return {"config_id": c.row.spec.config_id, "label": c.row.spec.label(),
            "measured_stall_share": c.measured_share,
            "predicted_stall_share": c.prediction.input.stall_share,
            "points": c.points, "measured_s": c.measured_s, "predicted_s": c.prediction.time_s,
            "error": c.error, "input": c.prediction.input.model_dump(),
            "on_floor": c.on_floor.model_dump() if c.on_floor else None,
            "floor_points": c.floor_points}
