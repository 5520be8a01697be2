"""The calibrate kind's plot: each measured step's time against the model's prediction."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dlperf.report.plots import plt, save, ticker

MARKERS = "osD^v<>pPX*h"
#: a point this far off the diagonal (either way) is labelled with its configuration
OUTLIER = 1.25


@dataclass(frozen=True)
class Point:
    measured_s: float
    predicted_s: float
    framework: str
    network: str
    threads: int


def predicted_vs_measured(points: list[Point], path: Path) -> Path | None:
    """Predicted against measured time per mini-batch (log-log, plain seconds on the
    axes), the diagonal where the model is exact and the band within 1.5x of it; colour
    by framework, marker by network, and each point more than ``OUTLIER`` off labelled
    with its network, framework and thread count."""
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    xs, ys = [p.measured_s for p in points], [p.predicted_s for p in points]
    lo, hi = min(xs + ys) / 1.5, max(xs + ys) * 1.5
    ax.plot([lo, hi], [lo, hi], color="grey", lw=1)
    ax.fill_between([lo, hi], [lo / 1.5, hi / 1.5], [lo * 1.5, hi * 1.5], color="grey",
                    alpha=0.15)
    frameworks = sorted({p.framework for p in points})
    networks = sorted({p.network for p in points})
    colours = {fw: f"C{i}" for i, fw in enumerate(frameworks)}
    markers = {n: MARKERS[i % len(MARKERS)] for i, n in enumerate(networks)}
    for p in points:
        ax.scatter(p.measured_s, p.predicted_s, s=26, zorder=3, color=colours[p.framework],
                   marker=markers[p.network], edgecolors="black", linewidths=0.3)
        if max(p.predicted_s / p.measured_s, p.measured_s / p.predicted_s) > OUTLIER:
            ax.annotate(f"{p.network} {p.framework} x{p.threads}", (p.measured_s, p.predicted_s),
                        fontsize=6, xytext=(4, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    # plain seconds, no crowded minor labels: 1, 2, 5 of each decade over a short span
    subs = (1.0, 2.0, 5.0) if hi / lo <= 100 else (1.0,)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(ticker.LogLocator(base=10, subs=subs))
        axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel("measured time per mini-batch (seconds)")
    ax.set_ylabel("predicted (seconds)")
    ax.grid(True, which="both", alpha=0.3)
    handles = [plt.Line2D([], [], color="grey", lw=1, label="exact"),
               plt.Rectangle((0, 0), 1, 1, color="grey", alpha=0.15, label="within 1.5x")]
    handles += [plt.Line2D([], [], ls="", marker="o", color=colours[fw], label=fw)
                for fw in frameworks]
    handles += [plt.Line2D([], [], ls="", marker=markers[n], color="black", mfc="none",
                           label=n) for n in networks]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return save(fig, path)
