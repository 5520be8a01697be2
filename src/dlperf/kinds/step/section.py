"""The DLBench table: time per mini-batch of the DLBench networks on synthetic data, one
row per network and framework, one column per thread count and GPU (with the model's
prediction beside each cell where a predictor is given), and its batch-size curves."""

from __future__ import annotations

from pathlib import Path

from dlperf import workloads
from dlperf.core.store import Store
from dlperf.kinds.dataflow.plan import has_pipeline
from dlperf.kinds.step import plots
from dlperf.kinds.step.rows import step_rows
from dlperf.kinds.step.tables import detail_table, dlbench_table
from dlperf.report.base import Filters, Section
from dlperf.report.machines import machine_names
from dlperf.report.tables import Predictor


def dlbench_section(store: Store, out: Path, filters: Filters,
                    predictor: Predictor | None = None) -> Section | None:
    # the DLBench networks only, on synthetic data; the guide's families and the runs on
    # input pipelines have their own sections
    rows = [r for r in step_rows(store, filters)
            if (wl := workloads.WORKLOADS.get(r.spec.network)) and wl.group == "dlbench"
            and not has_pipeline(r.spec)]
    if not rows:
        return None
    imgs = [p for p in (
        plots.table_bars(rows, out / "dlbench_table.png"),
        plots.batch_size_curves(rows, out / "batch_size.png"),
    ) if p]
    machines = machine_names(store, [r.results[0] for r in rows])
    return Section("dlbench", "DLBench: time per mini-batch",
                   tables=[dlbench_table(rows, machines=machines, predictor=predictor),
                           detail_table(rows, machines=machines)], images=imgs)
