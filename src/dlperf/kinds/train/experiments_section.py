"""Report sections of the guide's network-choice experiments (``dlperf.kinds.train.experiments``):
tables and plots from the store alone."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlperf.core import environment, units
from dlperf.core.aggregate import aggregate, settings_names, settings_notes
from dlperf.core.spec import RunResult
from dlperf.core.store import Store
from dlperf.kinds.step.tables import time_cell
from dlperf.kinds.train.experiments import (
    EXPERIMENTS,
    FAMILY_EXPERIMENT,
    GAN_NOTE,
    NAMES,
    arm_results,
)
from dlperf.kinds.train.options import TrainOutcome
from dlperf.kinds.train.quality import QUALITY
from dlperf.report.base import Filters, Section
from dlperf.report.tables import Table
from dlperf.workloads.families import FAMILIES


def _outcome(r: RunResult) -> TrainOutcome | None:
    return r.outcome if isinstance(r.outcome, TrainOutcome) else None


def _q(r: RunResult, key: str) -> float | None:
    """A number of the run's training outcome (None when it has none)."""
    v = getattr(_outcome(r), key, None)
    return float(v) if isinstance(v, int | float) else None


def _fmt_q(v: float | None, name: str) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if name == "accuracy" else f"{v:.4g}"


def _status(r: RunResult) -> str:
    if r.ok:
        return "target reached" if (o := _outcome(r)) and o.target_reached else "ok"
    if r.failure and r.failure.reason == "budget":
        return "target not reached"
    return f"{r.failure.reason}: {r.failure.message[:60]}" if r.failure else "failed"


def train_table(name: str, results: dict[str, RunResult], extra_cols=()) -> Table:
    """One row per arm: time per epoch, time to target, final and best quality."""
    headers = [
        "arm",
        "network",
        "quality",
        "target",
        "time/epoch",
        "time to target",
        "steps to target",
        "final",
        "best",
        "epochs",
        "train time",
        *[c[0] for c in extra_cols],
        "status",
    ]
    rows, values = [], []
    for arm, r in results.items():
        o = _outcome(r)
        q = o.quality if o else None
        qn = q.name if q else ""
        target = q.target if q else None
        steps_to_target = o.steps_to_target if o else None
        ttt, tpe = _q(r, "time_to_target_s"), _q(r, "time_per_epoch_s")
        final, best = _q(r, "final_quality"), _q(r, "best_quality")
        ex_cells = [fn(r) for _, fn in extra_cols]
        rows.append(
            [
                arm,
                r.spec.network,
                qn,
                _fmt_q(target, qn),
                units.seconds(tpe),
                units.seconds(ttt),
                str(steps_to_target or "-"),
                _fmt_q(final, qn),
                _fmt_q(best, qn),
                f"{_q(r, 'epochs') or 0:.1f}",
                units.seconds(_q(r, "train_s")),
                *[units.seconds(v) if v else "-" for v in ex_cells],
                _status(r),
            ]
        )
        values.append(
            [
                arm,
                r.spec.network,
                qn,
                target,
                tpe,
                ttt,
                steps_to_target,
                final,
                best,
                _q(r, "epochs"),
                _q(r, "train_s"),
                *ex_cells,
                _status(r),
            ]
        )
    return Table(
        title=EXPERIMENTS[name].title,
        headers=headers,
        rows=rows,
        values=values,
        caption=f"Tested: {EXPERIMENTS[name].claim}. Times are training time on "
        "real data, evaluation excluded; time to target is the training time "
        "until the first evaluation on held-out data that reached it.",
    )


# ----------------------------------------------------------------------------- plots
def _plt():
    import dlperf.report.plots  # noqa: F401  (selects the Agg backend first)

    return sys.modules["matplotlib.pyplot"]


def curves_plot(
    results: dict[str, RunResult],
    path: Path,
    title: str,
    group: Callable[[RunResult], str] = lambda r: r.spec.network,
) -> Path | None:
    """Quality against training time, one panel per group, one line per arm."""
    groups: dict[str, dict[str, RunResult]] = {}
    for arm, r in results.items():
        if (o := _outcome(r)) and o.curve:
            groups.setdefault(group(r), {})[arm] = r
    if not groups:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(groups), figsize=(5.2 * len(groups), 3.8), squeeze=False)
    for ax, (g, arms) in zip(axes[0], groups.items(), strict=True):
        for i, (arm, r) in enumerate(arms.items()):
            c = r.outcome.curve
            ax.plot([p[1] for p in c], [p[2] for p in c], color=f"C{i}", label=arm)
        q = next(iter(arms.values())).outcome.quality
        if q.target is not None:
            ax.axhline(q.target, color="grey", ls=":", label=f"target {q.target:g}")
        if not q.higher_is_better and all(
            p[2] > 0 for r in arms.values() for p in r.outcome.curve
        ):
            ax.set_yscale("log")
        ax.set_title(f"{title}: {g}")
        ax.set_xlabel("training time (s)")
        ax.set_ylabel(f"held-out {q.name}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    from dlperf.report.plots import save  # matplotlib only when a plot is drawn

    return save(fig, path)


def hidden_plot(results: dict[str, RunResult], path: Path) -> Path | None:
    """Final quality and time per epoch against the hidden-node count, per network."""
    pts: dict[str, list[tuple[int, float, float]]] = {}
    for r in results.values():
        h, q, t = r.spec.params.get("hidden"), _q(r, "final_quality"), _q(r, "time_per_epoch_s")
        if h is not None and q is not None and t is not None:
            pts.setdefault(r.spec.network, []).append((int(h), q, t))
    if not pts:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, (net, p) in enumerate(sorted(pts.items())):
        p.sort()
        axq = axes[0] if net == "ffn" else axes[0].twinx()
        axq.plot(
            [x[0] for x in p],
            [x[1] for x in p],
            marker="o",
            color=f"C{i}",
            label=f"{net}: {QUALITY[net].name}",
        )
        axq.set_ylabel(f"{net}: final {QUALITY[net].name}", color=f"C{i}")
        axes[1].plot([x[0] for x in p], [x[2] for x in p], marker="o", color=f"C{i}", label=net)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.axvline(64, color="grey", ls=":")  # the 64 inputs of the 8x8 digits
        ax.set_xlabel("hidden nodes (dotted: 64 inputs)")
        ax.grid(True, alpha=0.3)
    axes[0].set_title("final quality against hidden nodes")
    axes[1].set_title("time per epoch against hidden nodes")
    axes[1].set_ylabel("time per epoch (s)")
    axes[1].legend(fontsize=7)
    return _save(fig, path)


# ----------------------------------------------------------------------------- sections
def _wanted(filters: Filters, networks: set[str]) -> bool:
    return not filters.networks or bool(networks & set(filters.networks))


def train_section(name: str, store: Store, out: Path, filters: Filters) -> Section | None:
    results = arm_results(store, name)
    if not results or not _wanted(filters, {r.spec.network for r in results.values()}):
        return None
    exp = EXPERIMENTS[name]
    stem = name.replace("-", "_")
    extra_cols: tuple = ()
    if name == "dbn-pretraining":
        extra_cols = (
            ("pre-training", lambda r: _q(r, "pretrain_s") or None),  # '-': none
            ("fine-tuning", lambda r: _q(r, "finetune_s")),
        )
    if name == "hidden-nodes":
        img = hidden_plot(results, out / f"{stem}.png")
    elif name == "init-scale":
        img = curves_plot(
            results, out / f"{stem}.png", "convergence", group=lambda r: r.spec.network
        )
    else:
        img = curves_plot(
            results,
            out / f"{stem}.png",
            exp.title.split(" (")[0],
            group=lambda r: QUALITY[r.spec.network].name,
        )
    text = f"Tested: {exp.claim}. Run with 'dlperf experiment {name}'."
    if name == "dbn-pretraining":
        text += (
            " The DBN's training time includes its pre-training: its curve starts when "
            "the pre-training ends."
        )
    return Section(
        stem,
        exp.title,
        tables=[train_table(name, results, extra_cols)],
        images=[img] if img else [],
        text=text,
    )


def families_table(store: Store, filters: Filters | None = None) -> Table | None:
    """Experiment 5: time per mini-batch of every family and size, by thread count, fp32
    on this machine; a family measured with several settings has a line per setting."""
    filters = filters or Filters()
    names = [n for n in FAMILIES if not filters.networks or n in filters.networks]
    rows = [
        r
        for r in aggregate(store.results(kind="step", network=names, framework="torch",
                                         machine_id=environment.machine_id()))
        if r.spec.size in ("small", "large")
        and r.spec.device == "cpu"
        and r.spec.precision == "fp32"
        and r.spec.batch_size == FAMILIES[r.spec.network].default_batch
        and not r.spec.params
    ]
    if not rows:
        return None
    threads = sorted({r.spec.threads for r in rows})
    settings = settings_names(rows)
    several = len(set(settings.values())) > 1
    cells: dict[tuple[str, str, str], dict[int, Any]] = {}
    for r in rows:
        key = (r.spec.network, r.spec.size, settings[r.spec.measurement] if several else "")
        cells.setdefault(key, {})[r.spec.threads] = r
    headers = [
        "family",
        "size",
        "params",
        "FLOPs/step",
        "batch",
        *[f"{t} thread{'s' if t > 1 else ''}" for t in threads],
    ]
    if len(threads) > 1:
        headers.append(f"speed-up {threads[-1]}/{threads[0]}")
    out, values, notes = [], [], []
    order = {n: i for i, n in enumerate(FAMILIES)}
    for (net, size, setting), by_t in sorted(
        cells.items(), key=lambda kv: (order[kv[0][0]], kv[0][1] != "small", kv[0][2])
    ):
        wl = FAMILIES[net]
        label = (f"{net}*" if net == "gan" else net) + (f" ({setting})" if setting else "")
        line = [
            label,
            size,
            units.count(wl.param_count(size)),
            units.flops(wl.train_flops(wl.default_batch, size)),
            str(wl.default_batch),
        ]
        vals: list[Any] = [
            net,
            size,
            wl.param_count(size),
            wl.train_flops(wl.default_batch, size),
            wl.default_batch,
        ]
        for t in threads:
            text, value = time_cell(by_t.get(t), notes, f"{net} [{size}] {t} threads",
                                    units.seconds)
            line.append(text)
            vals.append(value)
        if len(threads) > 1:
            a, b = vals[5], vals[-1]
            line.append(f"{a / b:.2f}x" if a and b else "-")
            vals.append(a / b if a and b else None)
        out.append(line)
        values.append(vals)
    return Table(
        title="The guide's families: time per mini-batch (s)",
        headers=headers,
        rows=out,
        values=values,
        footnotes=[f"* {GAN_NOTE}"] + [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
        + settings_notes(settings),
        caption="PyTorch eager on the CPU, synthetic data of the real data's shapes, "
        "default batch; median over the timed steps. One step is forward, "
        "backward and update; for the RBM one CD-k update, for the DBN one "
        "fine-tuning step.",
    )


def families_plot(table: Table, path: Path) -> Path | None:
    """Time per mini-batch per family (log scale), bars per size and thread count."""
    cols = [i for i, h in enumerate(table.headers) if "thread" in h]
    if not table.values or not cols:
        return None
    plt = _plt()
    labels = [f"{v[0]} [{v[1]}]" for v in table.values]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(labels)), 4.0))
    width = 0.8 / len(cols)
    for j, c in enumerate(cols):
        ys = [v[c] if v[c] else math.nan for v in table.values]
        ax.bar([i + j * width for i in range(len(labels))], ys, width, label=table.headers[c])
    ax.set_xticks(
        [i + 0.4 - width / 2 for i in range(len(labels))],
        labels,
        rotation=60,
        ha="right",
        fontsize=8,
    )
    ax.set_yscale("log")
    # bars grow from below the smallest one (on a log axis matplotlib would start them at
    # the smallest value, and that bar would vanish)
    low = min((v[c] for v in table.values for c in cols if v[c]), default=None)
    if low:
        ax.set_ylim(bottom=low / 2)
    ax.set_ylabel("time per mini-batch (s)")
    ax.set_title("guide's families (gan: 1 D + 1 G update)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def families_section(store: Store, out: Path, filters: Filters) -> Section | None:
    t = families_table(store, filters)
    if t is None:
        return None
    img = families_plot(t, out / "families.png")
    return Section(
        "families",
        t.title,
        tables=[t],
        images=[img] if img else [],
        text=f"{GAN_NOTE} Run with 'dlperf experiment families'.",
    )


def section(name: str, store: Store, out: Path, filters: Filters | None = None) -> Section | None:
    filters = filters or Filters()
    if name == FAMILY_EXPERIMENT:
        return families_section(store, out, filters)
    if name in ("input-size", "layout", "task"):  # the guide's remaining factors
        from dlperf.kinds.train import factor_section as fx

        if name == "input-size":
            return fx.input_section(store, out, filters)
        return fx.train_factor_section(name, store, out, filters, curves_plot)
    return train_section(name, store, out, filters)


def sections() -> list:
    """One section builder per experiment, in the order of ``NAMES``."""

    def builder(name: str):
        def build(store: Store, out: Path, filters: Filters) -> Section | None:
            return section(name, store, out, filters)

        build.__name__ = f"experiment_{name.replace('-', '_')}"
        return build

    return [builder(n) for n in NAMES]
