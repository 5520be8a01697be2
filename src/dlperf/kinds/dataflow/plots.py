"""The data-flow sweep as a plot: time per mini-batch and stall share against loader
workers, one line per prefetch depth, the synthetic-data floor dashed. Takes a
``dlperf.kinds.dataflow.section.Group`` (not imported: that module imports this one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dlperf.report.plots import save  # noqa: E402


def sweep_plot(g: Any, path: Path) -> Path | None:
    pts = [p for p in g.points if p.step.measured and p.share is not None]
    if not pts:
        return None
    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(10, 3.8))
    workers = sorted({p.workers for p in pts})
    for i, pf in enumerate(sorted({p.prefetch for p in pts})):
        line = sorted((p for p in pts if p.prefetch == pf), key=lambda p: p.workers)
        xs = [p.workers for p in line]
        ax_t.plot(xs, [p.step.median_s * 1e3 for p in line], marker="o", color=f"C{i}",
                  label=f"prefetch {pf}")
        ax_s.plot(xs, [p.share * 100 for p in line], marker="o", color=f"C{i}",
                  label=f"prefetch {pf}")
    if g.floor is not None and g.floor.measured:
        ax_t.axhline(g.floor.median_s * 1e3, color="grey", ls="--",
                     label="synthetic data (floor)")
    cpus = max((p.cpus or 0) for p in pts)
    for ax in (ax_t, ax_s):
        ax.set_xticks(workers)
        ax.set_xlabel("loader workers")
        ax.grid(True, alpha=0.3)
        if cpus and any(g.spec.threads + w > cpus for w in workers):
            ax.axvline(cpus - g.spec.threads, color="red", ls=":", alpha=0.6,
                       label=f"{cpus} CPUs used up")
        ax.legend(fontsize=7)
    ax_t.set_ylabel("time per mini-batch (ms)")
    ax_t.set_ylim(bottom=0)
    ax_s.set_ylabel("stall share of the step (%)")
    ax_s.set_ylim(0, 100)
    fig.suptitle(g.title, fontsize=10)
    return save(fig, path)
