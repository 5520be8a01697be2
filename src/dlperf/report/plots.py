"""Plots from aggregated rows (matplotlib, no display needed). Each returns the PNG path
it wrote, or None when the store has nothing to plot for it."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402


def grid(n: int) -> tuple[plt.Figure, list[plt.Axes]]:
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    flat = [a for line in axes for a in line]
    for a in flat[n:]:
        a.set_visible(False)
    return fig, flat[:n]


def save(fig: plt.Figure, path: Path) -> Path:
    """Lay out, write as PNG and close (every dlperf plot ends here)."""
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # legends outside the axes included
    plt.close(fig)
    return path


def plain_log_axes(ax: plt.Axes, xs: list[int]) -> None:
    """Log-log axes labelled with plain numbers (1, 2, 4; 0.5, 2) instead of powers."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sorted(set(xs)))
    ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(ticker.FormatStrFormatter("%g"))
    ax.tick_params(axis="y", which="minor", labelsize=7)


