"""Report sections of the input-size, layout and task experiments (``dlperf.kinds.train.experiments``),
each with a table, a plot and one sentence computed from what the store holds."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlperf import workloads
from dlperf.core import environment, units
from dlperf.core.aggregate import ConfigResult, aggregate
from dlperf.core.spec import RunResult
from dlperf.core.store import Store
from dlperf.kinds.train.experiments import (
    EXPERIMENTS,
    INPUT_SIZE_BATCH,
    INPUT_SIZE_NETWORKS,
    TASK_TARGETS,
    TASKS,
    arm_results,
    task_arm_label,
)
from dlperf.kinds.train.options import TrainOutcome
from dlperf.report.base import Filters, Section
from dlperf.report.tables import Table


def _outcome(r: RunResult) -> TrainOutcome | None:
    return r.outcome if isinstance(r.outcome, TrainOutcome) else None


def _status(r: RunResult) -> str:
    o = _outcome(r)
    if o is not None:
        return "target reached" if o.target_reached else "target not reached"
    return f"{r.failure.reason}: {r.failure.message[:60]}" if r.failure else "failed"


# ----------------------------------------------------------------------------- input size
def first_layer(network: str, params: dict[str, Any]) -> tuple[str, float, str, float]:
    """(first weight layer, its share of the parameters, largest layer, its share), from the
    neutral definition."""
    layers = [x for x in workloads.get(network).layers("small", params) if x.params]
    total = sum(x.params for x in layers)
    big = max(layers, key=lambda x: x.params)
    return layers[0].name, layers[0].params / total, big.name, big.params / total


def input_rows(store: Store, filters: Filters) -> list[ConfigResult]:
    nets = [n for n in INPUT_SIZE_NETWORKS if not filters.networks or n in filters.networks]
    rows = aggregate(store.results(kind="step", network=nets, framework="torch", size="small",
                                   machine_id=environment.machine_id()))
    return sorted((r for r in rows if set(r.spec.params) == {"side"}
                   and r.spec.batch_size == INPUT_SIZE_BATCH and r.spec.device == "cpu"),
                  key=lambda r: (r.spec.network, r.spec.threads, r.spec.params["side"]))


def input_table(rows: list[ConfigResult]) -> Table:
    headers = ["network", "threads", "input", "inputs", "params", "first layer share",
               "largest layer", "FLOPs/step", "time/mini-batch", "memory (model + data)",
               "peak resident", "status"]
    out, values = [], []
    for r in rows:
        net, side = r.spec.network, int(r.spec.params["side"])
        wl = workloads.get(net)
        first, share, big, big_share = first_layer(net, r.spec.params)
        params = wl.param_count("small", r.spec.params)
        flops = wl.train_flops(INPUT_SIZE_BATCH, "small", r.spec.params)
        model = r.ok[-1].metrics.model_rss_bytes if r.measured else None
        status = "ok" if r.measured else (r.failure or "failed")
        out.append([net, str(r.spec.threads), f"{side}x{side}", f"{side * side:,}",
                    units.count(params), f"{share:.1%} ({first})",
                    f"{big} {big_share:.1%}", units.flops(flops), units.seconds(r.median_s),
                    units.nbytes(model), units.nbytes(r.peak_rss_bytes), status[:60]])
        values.append([net, r.spec.threads, side, side * side, params, share, big, flops,
                       r.median_s, model, r.peak_rss_bytes, status])
    return Table(
        title="Input size: time per mini-batch and memory from 8x8 to 512x512",
        headers=headers, rows=out, values=values,
        caption=f"The small feed-forward net (one hidden layer of 128) and the small CNN (4 "
        f"3x3 convolutions, pooling every second, then dense 64) on synthetic side x side "
        f"images, batch {INPUT_SIZE_BATCH}, PyTorch eager. Parameters and FLOPs from the "
        "neutral definition; 'first layer share': the first weight layer's share of all "
        "parameters. A run past the memory limit (dlperf experiment --memory-limit; 2 GiB "
        "per worker unless given) is recorded as 'oom'.")


def input_finding(rows: list[ConfigResult]) -> str:
    parts = []
    for net in INPUT_SIZE_NETWORKS:
        mine = [r for r in rows if r.spec.network == net]
        ok = [r for r in mine if r.measured]
        if len(ok) < 2:
            continue
        a, b = ok[0], ok[-1]
        sa, sb = a.spec.params["side"], b.spec.params["side"]
        text = (f"{net}: from {sa}x{sa} to {sb}x{sb} ({(sb / sa) ** 2:.0f}x the inputs) the time "
                f"per mini-batch grew {b.median_s / a.median_s:.3g}x")
        dom = [r for r in mine if first_layer(net, r.spec.params)[3] > 0.5]
        if dom:
            side = dom[0].spec.params["side"]
            big = first_layer(net, dom[0].spec.params)[2]
            text += f", and from {side}x{side} on one layer ({big}) holds most weights"
        failed = [r for r in mine if not r.measured]
        if failed:
            f = failed[0]
            text += (f"; {f.spec.params['side']}x{f.spec.params['side']} did not run "
                     f"({f.failure_reason})")
        parts.append(text)
    return ("Found: " + "; ".join(parts) + ".") if parts else ""


def input_plot(rows: list[ConfigResult], path: Path) -> Path | None:
    lines: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    for r in rows:
        if r.measured:
            model = r.ok[-1].metrics.model_rss_bytes or 0
            lines[f"{r.spec.network} t{r.spec.threads}"].append(
                (r.spec.params["side"] ** 2, r.median_s, model / 2**20))
    if not any(len(v) > 1 for v in lines.values()):
        return None
    from dlperf.report.plots import plt, save

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, (label, pts) in enumerate(sorted(lines.items())):
        pts.sort()
        a.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=f"C{i}",
               label=label)
        mem = [(p[0], p[2]) for p in pts if p[2] > 0]
        b.plot([m[0] for m in mem], [m[1] for m in mem], marker="o", color=f"C{i}", label=label)
    for ax in (a, b):
        ax.set_xscale("log")
        if any(y > 0 for line in ax.get_lines() for y in line.get_ydata()):
            ax.set_yscale("log")
        ax.set_xlabel("inputs per sample (side x side)")
        ax.grid(True, alpha=0.3)
    a.set_ylabel("time per mini-batch (s)")
    b.set_ylabel("memory of model and data (MiB)")
    a.legend(fontsize=7)
    return save(fig, path)


def input_section(store: Store, out: Path, filters: Filters) -> Section | None:
    rows = input_rows(store, filters)
    if not rows:
        return None
    img = input_plot(rows, out / "input_size.png")
    text = " ".join(x for x in (input_finding(rows), "Run with 'dlperf experiment "
                                "input-size'.") if x)
    return Section("input_size", "Input size", tables=[input_table(rows)],
                   images=[img] if img else [], text=text)


# ----------------------------------------------------------------------------- layout
def _per_step(r: RunResult) -> float | None:
    o = _outcome(r)
    return o.train_s / o.steps if o and o.steps else None


def layout_table(results: dict[str, RunResult]) -> Table:
    headers = ["layout", "widths", "params", "time/mini-batch", "time/epoch",
               "time to target", "steps to target", "final accuracy", "best", "status"]
    out, values = [], []
    for arm, r in results.items():
        o, w = _outcome(r), r.spec.params.get("widths", "")
        params = workloads.get(r.spec.network).param_count(r.spec.size, r.spec.params)
        vals = [arm.split(" ")[0], w, params, _per_step(r), o.time_per_epoch_s if o else None,
                o.time_to_target_s if o else None, o.steps_to_target if o else None,
                o.final_quality if o else None, o.best_quality if o else None, _status(r)]
        values.append(vals)
        out.append([vals[0], w, f"{params:,}", units.seconds(vals[3]), units.seconds(vals[4]),
                    units.seconds(vals[5]), str(vals[6] or "-"),
                    f"{vals[7]:.3f}" if vals[7] is not None else "-",
                    f"{vals[8]:.3f}" if vals[8] is not None else "-", vals[9]])
    return Table(
        title=EXPERIMENTS["layout"].title, headers=headers, rows=out, values=values,
        caption="Feed-forward nets with three hidden layers, widths solved for one parameter "
        "budget (three layers of 128 on the 64 digit inputs): shrinking toward the output "
        "(a funnel, as a convolutional net), constant, growing (as a deconvolutional net). "
        "Time per mini-batch: training time over steps (evaluation excluded).")


def layout_finding(results: dict[str, RunResult]) -> str:
    got = {arm.split(" ")[0]: r for arm, r in results.items() if _per_step(r)}
    if "shrinking" not in got or "growing" not in got:
        return ""
    s, g = got["shrinking"], got["growing"]
    text = (f"Found: at {workloads.get('ffn').param_count('small', s.spec.params):,} "
            f"parameters the growing layout's mini-batch took "
            f"{_per_step(g) / _per_step(s):.2f}x the shrinking one's")
    ts, tg = (_outcome(x).time_to_target_s for x in (s, g))
    if ts and tg:
        text += f", and it reached the target in {tg / ts:.2f}x the time"
    else:
        text += "; to target: " + ", ".join(
            f"{k} {'reached' if _outcome(v).target_reached else 'not reached'}"
            for k, v in got.items())
    return text + "."


# ----------------------------------------------------------------------------- task
def task_table(results: dict[str, RunResult]) -> Table:
    headers = ["task", "network", "data", "measure", "target", "guide's candidate",
               "time to target", "final", "best", "train time", "status"]
    out, values = [], []
    for task, (dataset, arms, advice) in TASKS.items():
        for net, params, _ in arms:
            r = results.get(task_arm_label(task, net, params))
            if r is None:
                continue
            o = _outcome(r)
            label = net + (f" depth {params['depth']}" if "depth" in params else "")
            q = o.quality.name if o else "-"
            vals = [task, label, dataset, q, TASK_TARGETS[task], net in advice,
                    o.time_to_target_s if o else None, o.final_quality if o else None,
                    o.best_quality if o else None, o.train_s if o else None, _status(r)]
            values.append(vals)
            out.append([task, label, dataset, q, f"{TASK_TARGETS[task]:g}",
                        "yes" if vals[5] else "", units.seconds(vals[6]),
                        f"{vals[7]:.4g}" if vals[7] is not None else "-",
                        f"{vals[8]:.4g}" if vals[8] is not None else "-",
                        units.seconds(vals[9]), vals[10]])
    return Table(
        title=EXPERIMENTS["task"].title, headers=headers, rows=out, values=values,
        caption="Each candidate trained on the task's offline data set with one target per "
        "task (accuracy for the classifiers; MMD^2 of generated against held-out digits for "
        "both generators, lower is better), the whole budget, time to target at the first "
        "evaluation that reached it. 'Guide's candidate': the guide's advice (CNN or DBN for "
        "vision, LSTM for sequences, GAN or VAE for generation; for simple tabular data "
        "dlperf's reading: a shallow feed-forward net).")


def task_finding(results: dict[str, RunResult]) -> str:
    parts = []
    for task, (_, arms, advice) in TASKS.items():
        got = [(net, params, results.get(task_arm_label(task, net, params)))
               for net, params, _ in arms]
        reached = [(o.time_to_target_s, net, params) for net, params, r in got
                   if r is not None and (o := _outcome(r)) and o.time_to_target_s]
        if reached:
            t, net, params = min(reached)
            label = net + (f" depth {params['depth']}" if "depth" in params else "")
            verdict = "one of" if net in advice and not (
                net == "ffn" and params.get("depth", 1) != 1) else "not among"
            parts.append(f"{task}: {label} reached the target first ({units.seconds(t)}), "
                         f"{verdict} the guide's candidates")
        elif any(r is not None for _, _, r in got):
            parts.append(f"{task}: no candidate reached the target")
    return ("Found: " + "; ".join(parts) + ".") if parts else ""


# ----------------------------------------------------------------------------- sections
def train_factor_section(name: str, store: Store, out: Path, filters: Filters,
                         curves_plot: Callable[..., Path | None]) -> Section | None:
    """The layout or task section; ``curves_plot`` is ``report.experiments``' (passed in:
    that module dispatches here)."""
    results = arm_results(store, name)
    if not results or (filters.networks and not {r.spec.network for r in results.values()}
                       & set(filters.networks)):
        return None
    if name == "layout":
        table, found = layout_table(results), layout_finding(results)
        img = curves_plot(results, out / "layout.png", "layout",
                          group=lambda r: r.spec.network)
    else:
        table, found = task_table(results), task_finding(results)
        img = curves_plot(results, out / "task.png", "task", group=_task_of)
    text = " ".join(x for x in (found, f"Run with 'dlperf experiment {name}'.") if x)
    return Section(name, EXPERIMENTS[name].title, tables=[table],
                   images=[img] if img else [], text=text)


def _task_of(r: RunResult) -> str:
    arm = r.spec.options.arm or ""
    return arm.split(":")[0] if ":" in arm else r.spec.network
