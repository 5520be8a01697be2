"""Report section of the profiled steps (kind "profile", ``dlperf explain``): each one's
diagnosis against this machine's calibration, and its timeline written beside the report
(``traces/*.json``, the trace-event format ``kinds.explain.trace`` writes), for Perfetto or
chrome://tracing to open."""

from __future__ import annotations

import re
from pathlib import Path

from dlperf.core import environment, units
from dlperf.core.errors import UsageError
from dlperf.core.store import Store
from dlperf.kinds.calibrate.plan import local_calibration
from dlperf.kinds.explain import trace
from dlperf.kinds.explain.analysis import explain
from dlperf.report.base import Filters, Section
from dlperf.report.tables import Table


def profile_section(store: Store, out: Path, filters: Filters) -> Section | None:
    mine = environment.machine_id()
    runs = [r for r in store.results(kind="profile", status="ok", **filters.where())
            if r.machine_id in (None, mine)]  # explained by this machine's calibration only
    if not runs:
        return None
    cal = local_calibration(store, device=None)
    rows, folder = [], out / "traces"
    for r in runs:
        try:
            e = explain(r, cal)
        except UsageError as why:  # no calibration of its framework, threads or precision
            rows.append([r.spec.label(), units.seconds(r.metrics.median_s), "-", str(why), ""])
            continue
        folder.mkdir(exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9.]+", "-", r.spec.label()).strip("-") + ".json"
        trace.write(e, folder / name)
        rows.append([r.spec.label(), units.seconds(e.measured_s),
                     units.seconds(e.prediction.time_s) if e.prediction else "-",
                     e.diagnosis(), f"traces/{name}"])
    return Section(
        name="profiles", title="Profiled steps (dlperf explain)",
        tables=[Table(title="Each profiled step against this machine's calibration",
                      headers=["step", "measured", "predicted", "diagnosis", "timeline"],
                      rows=rows)],
        text="Each timeline (traces/, beside this report) opens in ui.perfetto.dev or "
             "chrome://tracing: the measured op groups of a mean step on one track, the "
             "model's time for each on the next, joined op by op.")
