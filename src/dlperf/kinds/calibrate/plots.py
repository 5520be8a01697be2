"""The calibrate kind's plot: each measured step's time against the model's prediction."""

from __future__ import annotations

from pathlib import Path

from dlperf.report.plots import plt, save


def predicted_vs_measured(points: list[tuple[float, float]], path: Path) -> Path | None:
    """Predicted against measured time per mini-batch (log-log), the diagonal where the
    model is exact and the band within 1.5x of it."""
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(4.8, 4.4))
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    lo, hi = min(xs + ys) / 1.5, max(xs + ys) * 1.5
    ax.plot([lo, hi], [lo, hi], color="grey", lw=1, label="exact")
    ax.fill_between([lo, hi], [lo / 1.5, hi / 1.5], [lo * 1.5, hi * 1.5], color="grey",
                    alpha=0.15, label="within 1.5x")
    ax.scatter(xs, ys, s=18, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured time per mini-batch (s)")
    ax.set_ylabel("predicted (s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, path)
