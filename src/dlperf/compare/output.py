"""A comparison as a table (every exporter's format), a summary line, JSON and a plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlperf.compare.sides import Loaded
from dlperf.compare.verdicts import TOO_FEW, Comparison, Outcome, percent
from dlperf.core import speed_probe
from dlperf.core.units import seconds
from dlperf.report.tables import Table, machine_label

METHOD_NAMES = {"welch": "Welch's t on log per-process medians",
                "bootstrap": "hierarchical bootstrap over processes and steps"}


def summary_line(o: Outcome) -> str:
    s = o.summary
    judged = len(o.comparisons) - o.count(TOO_FEW)
    counts = ", ".join(f"{o.count(v)} {v}" for v in ("slower", "faster", "no significant change",
                                                     TOO_FEW) if o.count(v))
    head = (f"B/A over {judged} configuration{'s' if judged != 1 else ''} (geometric mean): "
            f"{s.ratio:.3f} ({percent(s.ratio)}), {o.level:.0%} CI {_ci(s)}: "
            f"{s.verdict}" if s else "no configuration judged")
    return f"{head}; {counts}"


def table(o: Outcome, a: Loaded, b: Loaded) -> Table:
    rows, values, footnotes = [], [], []
    for c in o.comparisons:
        i = c.interval
        notes = _notes(c, o)
        if notes:
            footnotes.append(f"* {c.label}: {'; '.join(notes)}")
        rows.append([c.label, seconds(c.a.median_s), seconds(c.b.median_s),
                     percent(i.ratio) if i else "", _ci(i), c.verdict + ("*" if notes else ""),
                     f"{c.a.processes}/{c.b.processes}"])
        values.append([c.label, c.a.median_s, c.b.median_s, i.ratio if i else None,
                       f"{i.low:.4f}..{i.high:.4f}" if i else None, c.verdict,
                       f"{c.a.processes}/{c.b.processes}"])
    return Table(
        title=f"B against A: {a.side.text} -> {b.side.text}",
        headers=["configuration", "A", "B", "change", f"{o.level:.0%} CI", "verdict",
                 "processes"],
        rows=rows, values=values,
        caption=(f"A: {_describe(a)}. B: {_describe(b)}. Median time per step; change: B's "
                 f"time over A's (+: slower). Interval: {METHOD_NAMES[o.method]} "
                 "(docs/compare.md)."),
        footnotes=[summary_line(o), *footnotes])


def _ci(i) -> str:
    return f"{percent(i.low)} .. {percent(i.high)}" if i else ""


def _notes(c: Comparison, o: Outcome) -> list[str]:
    notes = []
    if c.needed:
        notes.append(f"about {c.needed} processes per side would resolve "
                     f"+-{o.threshold:.0%}" if c.interval else
                     f"needs at least {c.needed} processes per side (dlperf sweep --repeat "
                     f"{c.needed})")
    for name, s in (("A", c.a), ("B", c.b)):
        if why := s.disturbed():
            notes.append(f"{name} disturbed: {why}")
    if c.machines[0] != c.machines[1]:
        notes.append(f"machines {machine_label(c.machines[0])} / {machine_label(c.machines[1])}")
    elif speed_probe.moved(move := speed_drift(c)):
        notes.append(f"machine speed: with B {speed_probe.describe(move, 'with A')}: part "  # type: ignore[arg-type]
                     "of the difference may be the machine's own")
    return notes


def speed_drift(c: Comparison) -> tuple[str, float] | None:
    """How far the machine's speed probe moved from side A's processes to side B's
    (``core.speed_probe.drift``; None: either side unprobed)."""
    return speed_probe.drift(c.b.speed_probe, c.a.speed_probe)


def _describe(side: Loaded) -> str:
    machines = ", ".join(f"{machine_label(m)}{f' ({h})' if h else ''}"
                         for m, h in side.machines.items())
    versions = "; ".join(f"{p} {', '.join(sorted(v))}" for p, v in side.versions.items())
    return f"{side.side.path}, machine {machines}" + (f", {versions}" if versions else "")


def to_json(o: Outcome, a: Loaded, b: Loaded) -> dict[str, Any]:
    def interval(i):
        return None if i is None else {"ratio": i.ratio, "low": i.low, "high": i.high,
                                       "verdict": i.verdict}

    return {
        "a": _describe(a), "b": _describe(b), "method": o.method, "level": o.level,
        "threshold": o.threshold, "summary": interval(o.summary),
        "comparisons": [{
            "configuration": c.label, "config_id": c.config_id,
            "machines": list(c.machines), "a_median_s": c.a.median_s,
            "b_median_s": c.b.median_s, "a_processes": c.a.processes,
            "b_processes": c.b.processes, **(interval(c.interval) or {"verdict": TOO_FEW}),
            "processes_needed": c.needed, "a_disturbed": c.a.disturbed(),
            "b_disturbed": c.b.disturbed(),
            "speed_drift": {"part": d[0], "change": d[1]} if (d := speed_drift(c)) else None}
            for c in o.comparisons],
    }


def plot(o: Outcome, path: Path) -> Path:
    """Each configuration's ratio with its interval (a forest plot), the summary last; the
    band is the threshold a change must pass to matter."""
    from dlperf.report import plots

    judged = [c for c in o.comparisons if c.interval]
    labels = [c.label for c in judged] + ["geometric mean"]
    ivs = [c.interval for c in judged] + [o.summary]
    fig, (ax,) = plots.grid(1)
    fig.set_size_inches(7, 1.2 + 0.35 * len(labels))
    ys = list(range(len(labels)))[::-1]
    colours = {"slower": "tab:red", "faster": "tab:green", "no significant change": "tab:grey"}
    for y, i in zip(ys, ivs, strict=True):
        ax.errorbar(i.ratio, y, xerr=[[i.ratio - i.low], [i.high - i.ratio]], fmt="o",
                    color=colours[i.verdict], capsize=3)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.axvspan(1 / (1 + o.threshold), 1 + o.threshold, color="0.9", zorder=0)
    ax.set_yticks(ys, labels)
    ax.set_xlabel(f"B / A time per step ({o.level:.0%} interval; right of 1: slower)")
    return plots.save(fig, path)
