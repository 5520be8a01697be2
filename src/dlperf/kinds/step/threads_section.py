"""Thread scaling and framework ranking: the two readings of the DLBench table that a
practitioner acts on (how many threads, which framework), from the store alone.

Both compare only rows that differ in the one thing being compared: the thread count
(same network, framework, batch, settings and machine) or the framework (same network,
batch, device, thread count, settings and machine).
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from dlperf import workloads
from dlperf.core import units
from dlperf.core.aggregate import SAME_WITHIN, ConfigResult, direction, settings_names
from dlperf.core.store import Store
from dlperf.kinds.step import plots
from dlperf.kinds.step.rows import plain_steps, step_rows
from dlperf.report.base import Filters, Section
from dlperf.report.machines import machine_records
from dlperf.report.tables import Table, machine_label, sort_rows


def _name(r: ConfigResult) -> str:
    return r.spec.network if r.spec.size in ("full", "") else f"{r.spec.network} [{r.spec.size}]"


def default_batch_cpu(rows: list[ConfigResult]) -> list[ConfigResult]:
    return [r for r in rows if r.spec.kind == "step" and r.spec.device == "cpu"
            and r.spec.network in workloads.WORKLOADS
            and r.spec.batch_size == workloads.get(r.spec.network).default_batch]


def scaling_curves(rows: list[ConfigResult]) -> dict[tuple, dict[int, ConfigResult]]:
    """(network, size, framework label, settings, machine) -> threads -> measured row."""
    curves: dict[tuple, dict[int, ConfigResult]] = defaultdict(dict)
    for r in sort_rows(default_batch_cpu(rows)):
        if r.measured:
            key = (r.spec.network, r.spec.size, r.framework_label, r.spec.measurement,
                   r.machine_id)
            curves[key][r.spec.threads] = r
    return {k: v for k, v in curves.items() if len(v) > 1}


def past_cores(by_t: dict[int, ConfigResult], cores: int | None) -> tuple[int, int, float] | None:
    """(cores, most threads, time there / time at the cores) when the curve has the
    physical core count and a count above it; above 1: slower past the cores."""
    if not cores or cores not in by_t:
        return None
    beyond = [t for t in by_t if t > cores]
    if not beyond:
        return None
    t = max(beyond)
    return cores, t, by_t[t].median_s / by_t[cores].median_s


def scaling_table(rows: list[ConfigResult], cores_of: dict[str | None, int]) -> Table | None:
    curves = scaling_curves(rows)
    if not curves:
        return None
    threads = sorted({t for c in curves.values() for t in c})
    names = settings_names([r for c in curves.values() for r in c.values()])
    several = len({k[4] for k in curves}) > 1
    headers = ["network", "framework", "settings", *(["machine"] if several else []),
               *[f"x{t}" for t in threads[1:]], "cores", "past the cores"]
    out, values = [], []
    for (net, size, fw, meas, mid), by_t in curves.items():
        base = by_t.get(min(by_t))
        t0 = min(by_t)
        head = [net if size in ("full", "") else f"{net} [{size}]", fw, names[meas],
                *([machine_label(mid)] if several else [])]
        line, vals = list(head), list(head)
        for t in threads[1:]:
            s = base.median_s / by_t[t].median_s if t in by_t and t > t0 else None
            line.append(f"{s:.2f}x" if s else "")
            vals.append(s)
        cores = cores_of.get(mid)
        pc = past_cores(by_t, cores)
        line.append(str(cores or "?"))
        vals.append(cores)
        if pc:
            c, t, ratio = pc
            line.append(f"{ratio:.2f}x the time at {c} ({t} threads: {direction(ratio)})")
            vals.append(ratio)
        else:
            line.append("not measured")
            vals.append(None)
        out.append(line)
        values.append(vals)
    return Table(title="Speed-up over the fewest threads measured", headers=headers, rows=out,
                 values=values,
                 caption="Time per mini-batch at the fewest threads over the time at N threads "
                 "(xN), DLBench's default batch. 'past the cores': time at the most threads "
                 "measured above the physical cores over the time at the physical cores; "
                 f"above {1 + SAME_WITHIN:g}x, the extra threads slowed training down (as Caffe's 8 threads on "
                 "4 cores did in DLBench).")


def thread_section(store: Store, out: Path, filters: Filters) -> Section | None:
    rows = plain_steps(step_rows(store, filters))
    records = machine_records(store, [r.results[0] for r in rows])
    cores_of = {mid: m.get("physical_cores") for mid, m in records.items()}
    t = scaling_table(rows, cores_of)
    if t is None:
        return None
    cores = sorted({c for c in cores_of.values() if c})
    img = plots.thread_scaling(default_batch_cpu(rows), out / "thread_scaling.png",
                               cores[0] if len(cores) == 1 else None)
    return Section("threads", "Thread scaling", tables=[t], images=[img] if img else [])


# ----------------------------------------------------------------------------- ranking
def ranking(rows: list[ConfigResult]) -> dict[tuple, list[ConfigResult]]:
    """(network, size, batch, device, threads, settings, machine) -> measured rows of
    different frameworks, fastest first; only where two or more frameworks ran."""
    groups: dict[tuple, list[ConfigResult]] = defaultdict(list)
    for r in sort_rows(rows):
        if r.spec.kind == "step" and r.measured:
            groups[(r.spec.network, r.spec.size, r.spec.batch_size, r.spec.device,
                    r.spec.threads, r.spec.measurement, r.machine_id)].append(r)
    return {k: sorted(v, key=lambda r: r.median_s) for k, v in groups.items()
            if len({r.framework_label for r in v}) > 1}


def ranking_tables(rows: list[ConfigResult]) -> list[Table]:
    ranked = ranking(rows)
    if not ranked:
        return []
    several = len({k[6] for k in ranked}) > 1
    places = max(len(v) for v in ranked.values())
    headers = ["network", "batch", "device", *(["machine"] if several else []),
               *[f"#{i + 1}" for i in range(places)]]
    out, values = [], []
    wins: dict[str, int] = defaultdict(int)
    ratios: dict[str, list[float]] = defaultdict(list)
    for (net, size, batch, dev, threads, _, mid), rs in ranked.items():
        best = rs[0].median_s
        wins[rs[0].framework_label] += 1
        head = [net if size in ("full", "") else f"{net} [{size}]", str(batch),
                f"cpu x{threads}" if dev == "cpu" else dev,
                *([machine_label(mid)] if several else [])]
        cells = []
        for r in rs:
            ratios[r.framework_label].append(r.median_s / best)
            rel = "" if r is rs[0] else f", {r.median_s / best:.2f}x"
            cells.append(f"{r.framework_label} {units.seconds(r.median_s)}{rel}")
        out.append(head + cells + [""] * (places - len(rs)))
        values.append(head + [r.median_s for r in rs] + [None] * (places - len(rs)))
    detail = Table(title="Frameworks ranked, fastest first", headers=headers, rows=out,
                   values=values, caption="Each line compares the frameworks on one "
                   "configuration (network, batch, device and threads, settings, machine); "
                   "the ratio is the time over the fastest's.")
    summary_rows, summary_vals = [], []
    for fw, rs in sorted(ratios.items(), key=lambda kv: _geomean(kv[1])):
        g = _geomean(rs)
        summary_rows.append([fw, f"{wins.get(fw, 0)} of {len(rs)}", f"{g:.2f}x"])
        summary_vals.append([fw, wins.get(fw, 0), g])
    summary = Table(title="Framework ranking", headers=["framework", "fastest in",
                    "time over the fastest (geometric mean)"], rows=summary_rows,
                    values=summary_vals, caption="Over every configuration above that the "
                    "framework ran; 1.00x: fastest everywhere it ran.")
    return [summary, detail]


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def ranking_section(store: Store, out: Path, filters: Filters) -> Section | None:
    tables = ranking_tables(plain_steps(step_rows(store, filters)))
    if not tables:
        return None
    return Section("ranking", "Framework ranking", tables=tables)
