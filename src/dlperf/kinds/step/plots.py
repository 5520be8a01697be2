"""The step kind's plots: the DLBench table as bars, time per mini-batch against the
batch size (DLBench's Fig. 1) and against the thread count."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from dlperf import workloads
from dlperf.core.aggregate import ConfigResult, settings_names
from dlperf.report.plots import grid, plain_log_axes, plt, save, ticker
from dlperf.report.tables import machine_label, sort_rows


def _name(r: ConfigResult) -> str:
    return r.spec.network if r.spec.size in ("full", "") else f"{r.spec.network} [{r.spec.size}]"


def _device(r: ConfigResult) -> str:
    return f"{r.spec.threads} thr" if r.spec.device == "cpu" else r.spec.device


def _provenance(rows: list[ConfigResult]):
    """A label suffix naming the settings and the machine where the rows differ in them,
    so that rows of different settings or machines never join one curve or bar."""
    names = settings_names(rows)
    several_machines = len({r.machine_id for r in rows}) > 1

    def suffix(r: ConfigResult) -> str:
        parts = [names[r.spec.measurement]] if len(set(names.values())) > 1 else []
        parts += [machine_label(r.machine_id)] if several_machines else []
        return f" ({', '.join(parts)})" if parts else ""

    return suffix


def batch_size_curves(rows: list[ConfigResult], path: Path) -> Path | None:
    """DLBench Fig. 1: time per mini-batch against mini-batch size, one panel per network,
    one curve per framework/variant and device."""
    curves: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    suffix = _provenance(rows)
    for r in sort_rows(rows):
        if r.spec.kind == "step" and r.measured:
            curves[_name(r)][f"{r.framework_label}, {_device(r)}{suffix(r)}"].append(
                (r.spec.batch_size, r.median_s))
    curves = {n: c for n, c in curves.items() if any(len(p) > 1 for p in c.values())}
    if not curves:
        return None
    fig, axes = grid(len(curves))
    for ax, (net, by_label) in zip(axes, curves.items(), strict=True):
        for label, pts in by_label.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        _time_panel(ax, net, "mini-batch size", [p[0] for pts in by_label.values() for p in pts])
    return save(fig, path)


def _time_panel(ax, title: str, xlabel: str, xs: list[int]) -> None:
    """A panel of time per mini-batch against a log-scaled count (batch size, threads)."""
    plain_log_axes(ax, xs)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("time per mini-batch (s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def thread_scaling(rows: list[ConfigResult], path: Path, physical_cores: int | None = None) -> Path | None:
    """Time per mini-batch against CPU threads at the DLBench default batch size, with
    ideal scaling (time at 1 thread / threads) dashed."""
    curves: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    suffix = _provenance(rows)
    for r in sort_rows(rows):
        if (r.spec.kind == "step" and r.measured and r.spec.device == "cpu"
                and r.spec.batch_size == workloads.get(r.spec.network).default_batch):
            curves[_name(r)][f"{r.framework_label}{suffix(r)}"].append((r.spec.threads, r.median_s))
    curves = {n: c for n, c in curves.items() if any(len(p) > 1 for p in c.values())}
    if not curves:
        return None
    fig, axes = grid(len(curves))
    for ax, (net, by_label) in zip(axes, curves.items(), strict=True):
        for i, (label, pts) in enumerate(by_label.items()):
            pts.sort()
            color = f"C{i}"
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            ax.plot(xs, ys, marker="o", color=color, label=label)
            if xs[0] == 1:
                ax.plot(xs, [ys[0] / x for x in xs], ls="--", color=color, alpha=0.5,
                        label=f"{label} ideal")
        if physical_cores:
            ax.axvline(physical_cores, color="grey", ls=":", label=f"{physical_cores} cores")
        _time_panel(ax, net, "CPU threads", [p[0] for pts in by_label.values() for p in pts])
    return save(fig, path)


def table_bars(rows: list[ConfigResult], path: Path) -> Path | None:
    """The DLBench table as grouped bars: one group per network, one bar per framework and
    CPU thread count (and GPU), time per mini-batch on a log scale; failures are absent."""
    cells: dict[str, dict[str, float]] = defaultdict(dict)
    suffix = _provenance(rows)
    for r in sort_rows(rows):
        if (r.spec.kind == "step" and r.measured
                and r.spec.batch_size == workloads.get(r.spec.network).default_batch):
            cells[_name(r)][f"{r.framework_label}, {_device(r)}{suffix(r)}"] = r.median_s
    if not cells:
        return None
    labels = list(dict.fromkeys(k for c in cells.values() for k in c))
    width = 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(cells) * max(1, len(labels) / 3)), 4.2))
    # more than 10 bars per group: 20 distinct colours, so no two bars share one
    colors = plt.get_cmap("tab20").colors if len(labels) > 10 else [f"C{i}" for i in range(10)]
    for i, label in enumerate(labels):
        xs = [j + i * width for j, c in enumerate(cells.values()) if label in c]
        ys = [c[label] for c in cells.values() if label in c]
        ax.bar(xs, ys, width, label=label, color=colors[i % len(colors)])
    low = min(v for c in cells.values() for v in c.values())
    ax.set_ylim(bottom=low / 2)  # the smallest bar stays visible on the log axis
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cells))], list(cells))
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(ticker.FormatStrFormatter("%g"))  # '0.6', not '6 x 10^-1'
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_ylabel("time per mini-batch (s)")
    ax.set_title("Time per mini-batch at DLBench's default batch sizes")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    # below the axes: a legend inside would hide bars
    ax.legend(fontsize=7, ncol=min(4, max(1, len(labels) // 4)), loc="upper center",
              bbox_to_anchor=(0.5, -0.12))
    return save(fig, path)
