"""The parallel section's plots: scaling against workers, the communication share, held-out
error against training time, and the slowdown one slow worker causes."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dlperf.core.aggregate import ConfigResult  # noqa: E402
from dlperf.kinds.parallel.analysis import (
    curve,
    layout,
    name_of,
    opts,
    order,
    outcome,
    speedup,
    straggler_pairs,
    variant,
)
from dlperf.kinds.parallel.options import STRATEGIES  # noqa: E402
from dlperf.report.plots import grid, save  # noqa: E402

_MARK = {"sync": "o", "async": "s", "mixed": "^", "pipeline": "D", "hybrid": "v", "fsdp": "P"}


def scaling_plot(rows: list[ConfigResult], path: Path) -> Path | None:
    """Time per mini-batch, speed-up and efficiency against workers, one line per strategy
    (synthetic data, no straggler), one row of panels per network and batch."""
    panels: dict[tuple, dict[tuple, dict[int, ConfigResult]]] = defaultdict(lambda: defaultdict(dict))
    for r in sorted(rows, key=order):
        o = opts(r)
        if r.measured and not o.data and not o.straggler_delay_s:
            # one curve per strategy and threads per worker: each worker a processing unit
            key = (o.strategy, variant(r), r.spec.threads)
            panels[(name_of(r), r.spec.batch_size)][key][o.workers] = r
    panels = {k: v for k, v in panels.items() if any(len(c) > 1 for c in v.values())}
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 3, figsize=(13.5, 3.6 * len(panels)), squeeze=False)
    for (name, batch), ax_row in zip(sorted(panels), axes, strict=True):
        by = panels[(name, batch)]
        wmax = 1
        for (strat, var, threads) in sorted(by, key=lambda k: (STRATEGIES.index(k[0]),
                                                                k[1], k[2])):
            pts = sorted(by[(strat, var, threads)].items())
            xs = [w for w, _ in pts]
            wmax = max(wmax, *xs)
            sp = [speedup(r, rows) for _, r in pts]
            kw = {"marker": _MARK.get(strat, "o"),
                  "label": f"{strat}{f' ({var})' if var else ''}, {threads} "
                           f"thread{'s' if threads > 1 else ''}/worker"}
            ax_row[0].plot(xs, [r.median_s for _, r in pts], **kw)
            if len(pts) < 2:
                continue  # a lone one-worker point: its speed-up is 1 by definition
            ax_row[1].plot([x for x, s in zip(xs, sp, strict=True) if s[0]],
                           [s[0] for s in sp if s[0]], **kw)
            ax_row[2].plot([x for x, s in zip(xs, sp, strict=True) if s[1]],
                           [s[1] for s in sp if s[1]], **kw)
        ax_row[1].plot([1, wmax], [1, wmax], ls="--", color="grey", label="ideal")
        ax_row[2].axhline(1.0, ls="--", color="grey")
        for ax, ylabel in zip(ax_row, ("time per mini-batch (s)", "speed-up vs 1 worker",
                                       "efficiency"), strict=True):
            ax.set_xlabel("workers")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{name}, batch {batch}")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    return save(fig, path)


def comm_share_plot(rows: list[ConfigResult], path: Path) -> Path | None:
    """Stacked bars: each configuration's step split into compute, comm, wait, server."""
    chosen = [r for r in sorted(rows, key=order)
              if r.measured and not opts(r).data and outcome(r).breakdown]
    if not chosen:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(chosen) + 1.5))
    labels, left = [], [0.0] * len(chosen)
    colors = {"compute": "C0", "comm": "C1", "wait": "C3", "server": "C2"}
    for part in ("compute", "comm", "wait", "server"):
        vals = [getattr(outcome(r).breakdown.shares, part) or 0.0 for r in chosen]
        ax.barh(range(len(chosen)), vals, left=left, color=colors[part], label=part)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    for r in chosen:
        o = opts(r)
        strag = f" +{o.straggler_delay_s:g}s" if o.straggler_delay_s else ""
        labels.append(f"{name_of(r)} {o.strategy} {o.workers}x{r.spec.threads} {layout(r)}"
                      f"{strag}".strip())
    ax.set_yticks(range(len(chosen)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("share of the step")
    ax.set_xlim(0, 1)
    ax.legend(fontsize=7, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    return save(fig, path)


def target_plot(rows: list[ConfigResult], path: Path) -> Path | None:
    """Held-out error rate against training time, one curve per run, target dashed."""
    groups: dict[tuple, list[ConfigResult]] = defaultdict(list)
    for r in rows:
        if opts(r).data and curve(r.results[-1]):
            groups[(name_of(r), opts(r).data, r.spec.batch_size)].append(r)
    if not groups:
        return None
    fig, axes = grid(len(groups))
    for ax, (key, rs) in zip(axes, sorted(groups.items()), strict=True):
        target = None
        for r in sorted(rs, key=order):
            o = opts(r)
            points = curve(r.results[-1])
            ax.plot([t for t, _ in points], [1 - acc for _, acc in points],
                    marker=_MARK.get(o.strategy, "o"), markersize=3,
                    label=f"{o.strategy} {o.workers}x{r.spec.threads} {layout(r)}".strip())
            target = o.target_accuracy if o.target_accuracy is not None else target
        if target is not None:
            ax.axhline(1 - target, ls="--", color="grey", label=f"target {1 - target:.0%} error")
        ax.set_title(f"{key[0]} on {key[1]}, batch {key[2]}")
        ax.set_xlabel("training time (s)")
        ax.set_ylabel("held-out error rate")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return save(fig, path)


def straggler_plot(rows: list[ConfigResult], path: Path) -> Path | None:
    pairs = straggler_pairs(rows)
    if not pairs:
        return None
    fig, ax = plt.subplots(figsize=(7, 0.4 * len(pairs) + 1.5))
    labels = []
    for k, (base, slow) in enumerate(pairs):
        o = opts(slow)
        ax.barh(k, slow.median_s / base.median_s, color=f"C{STRATEGIES.index(o.strategy)}")
        labels.append(f"{name_of(slow)} {o.strategy} {o.workers}x{slow.spec.threads} "
                      f"{layout(slow)} +{o.straggler_delay_s:g}s".replace("  ", " "))
    ax.axvline(1.0, color="grey", ls="--")
    ax.set_yticks(range(len(pairs)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time per mini-batch with a straggler / without")
    return save(fig, path)
