"""Predictions beside measurements: the performance model's time for every measured step
configuration, its error against the measurement, and the model's validated error for
that kind of configuration. Built only when the report is given a predictor."""

from __future__ import annotations

import statistics
from pathlib import Path

from dlperf.core import speed_probe, units
from dlperf.core.aggregate import ConfigResult
from dlperf.core.store import Store
from dlperf.kinds.calibrate import plots
from dlperf.kinds.step.rows import step_rows
from dlperf.report.base import Filters, Section
from dlperf.report.tables import Predictor, Table, machine_label, sort_rows


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured: +0.2 predicts 20% too slow, -0.2 too fast."""
    return (predicted - measured) / measured


def pairs(rows: list[ConfigResult], predictor: Predictor) -> list[tuple[ConfigResult, float, float | None]]:
    """(measured row, predicted seconds, validated error) for every row the model predicts."""
    out = []
    for r in sort_rows(rows):
        if r.measured and (p := predictor(r)) is not None:
            out.append((r, p[0], p[1]))
    return out


def drifts(found: list[tuple[ConfigResult, float, float | None]], predictor: Predictor
           ) -> list[tuple[str, float] | None]:
    """Per pair, how far the machine's speed probe moved between the calibration and the
    measurement (``kinds.calibrate.validate.machine_drift``); None where not probed."""
    drift = getattr(predictor, "drift", None)
    return [drift(r) if drift else None for r, _, _ in found]


def prediction_table(found: list[tuple[ConfigResult, float, float | None]],
                     moves: list[tuple[str, float] | None] | None = None) -> Table:
    several = len({r.machine_id for r, _, _ in found}) > 1
    moves = moves or [None] * len(found)
    probed = any(moves)
    headers = ["network", "framework", "device", "batch", *(["machine"] if several else []),
               "measured", "predicted", "error", "validated error", "within it",
               *(["speed probe"] if probed else [])]
    rows, values = [], []
    for (r, pred, valid), move in zip(found, moves, strict=True):
        s = r.spec
        err = relative_error(pred, r.median_s)
        within = "" if valid is None else ("yes" if abs(err) <= valid else "no")
        head = [s.network if s.size in ("full", "") else f"{s.network} [{s.size}]",
                r.framework_label, f"cpu x{s.threads}" if s.device == "cpu" else s.device,
                str(s.batch_size), *([machine_label(r.machine_id)] if several else [])]
        probe = [speed_probe.cell(move)] if probed else []
        rows.append(head + [units.seconds(r.median_s), units.seconds(pred), f"{err:+.0%}",
                            "not validated yet" if valid is None else f"+-{valid:.0%}", within,
                            *probe])
        values.append(head + [r.median_s, pred, err, valid, within,
                              *([move[1] if move else None] if probed else [])])
    errs = [abs(relative_error(p, r.median_s)) for r, p, _ in found]
    caption = (f"{len(found)} configurations; median absolute error "
               f"{statistics.median(errs):.0%}. 'error': (predicted - measured) / measured; "
               "'validated error': the model's error for this kind of configuration, "
               "from its validation against measurements.")
    if probed:
        steady = [abs(relative_error(p, r.median_s))
                  for (r, p, _), m in zip(found, moves, strict=True)
                  if m is not None and not speed_probe.moved(m)]
        caption += f" {speed_probe.legend()}"
        caption += (f" (the {len(steady)} configuration{'s' if len(steady) != 1 else ''} "
                    f"measured at the calibration's speed: median absolute error "
                    f"{statistics.median(steady):.0%})."
                    if steady and len(steady) < len(found) else ".")
    return Table(title="Predicted against measured time per mini-batch", headers=headers,
                 rows=rows, values=values, caption=caption)


def prediction_section(store: Store, out: Path, filters: Filters,
                       predictor: Predictor | None = None) -> Section | None:
    if predictor is None:
        return None
    found = pairs(step_rows(store, filters), predictor)
    if not found:
        return None
    img = plots.predicted_vs_measured(
        [plots.Point(r.median_s, p, r.spec.framework, r.spec.network, r.spec.threads)
         for r, p, _ in found], out / "predicted_vs_measured.png")
    return Section("prediction", "Predictions beside measurements",
                   tables=[prediction_table(found, drifts(found, predictor))],
                   images=[img] if img else [])
