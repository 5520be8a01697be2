"""The parallel section's tables for the guide's remaining factors, each with the one
sentence the data supports: asynchronous updates with a period (communication, staleness,
drift and time to target against the period), dedicated sharded parameter servers (the
servers' own load and traffic as workers grow), and hybrid parallelism beside the pure
strategies at the same worker count."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from dlperf.core import units
from dlperf.core.aggregate import ConfigResult
from dlperf.kinds.parallel.analysis import family, layout, name_of, opts, order, outcome, pct
from dlperf.report.tables import Table


def _share(row: ConfigResult, part: str) -> float | None:
    e = outcome(row)
    return getattr(e.breakdown.shares, part) if e.breakdown else None


def _comm(row: ConfigResult) -> float | None:
    """Blocked on the other side: transferring plus waiting (server lock, slow peers)."""
    c, w = _share(row, "comm"), _share(row, "wait")
    return None if c is None else c + (w or 0.0)


def times(before: float, after: float) -> str:
    """'2.4x shorter' / '1.3x longer': how ``after`` compares with ``before``."""
    if after <= before:
        return f"{before / after:.2g}x shorter"
    return f"{after / before:.2g}x longer"


# ----------------------------------------------------------------------------- period
def period_rows(rows: list[ConfigResult]) -> list[ConfigResult]:
    return [r for r in rows if opts(r).strategy == "async" and not opts(r).straggler_delay_s]


def period_table(rows: list[ConfigResult]) -> Table | None:
    rows = sorted(period_rows(rows), key=order)
    if not any(opts(r).push_every > 1 for r in rows):
        return None
    headers = ["network", "data", "workers", "servers", "push every", "time/mini-batch",
               "comm + wait", "staleness mean", "drift mean", "drift / norm of w",
               "time to target", "final accuracy"]
    out, values = [], []
    for r in rows:
        o, e = opts(r), outcome(r)
        st, dr, tr = e.staleness, e.drift, e.training
        vals = [name_of(r), o.data or "synthetic", o.workers, o.servers, o.push_every,
                r.median_s if r.measured else None, _comm(r), st.mean if st else None,
                dr.mean if dr else None, dr.mean_relative if dr else None,
                tr.time_to_target_s if tr else None,
                tr.final.accuracy if tr and tr.final else None]
        values.append(vals)
        out.append([*map(str, vals[:5]), units.seconds(vals[5]), pct(vals[6]),
                    f"{vals[7]:.2f}" if vals[7] is not None else "-",
                    f"{vals[8]:.3g}" if vals[8] is not None else "-", pct(vals[9]),
                    units.seconds(vals[10]) if tr else "-",
                    f"{vals[11]:.3f}" if vals[11] is not None else "-"])
    return Table(
        title="Asynchronous updates with a period", headers=headers, rows=out, values=values,
        caption="Each worker exchanges with the parameter server every k steps (pull, k local "
        "SGD steps, push of the summed gradient). Drift: the norm of the difference between a "
        "worker's weights after its k steps and the server's when its push arrives, at every "
        "exchange; relative: over the norm of the weights the worker had pulled. Time to "
        "target: real-data runs (wall time).")


def period_finding(rows: list[ConfigResult]) -> str:
    """k = 1 against the largest k measured with the same workload and workers."""
    groups: dict[tuple, dict[int, ConfigResult]] = defaultdict(dict)
    for r in period_rows(rows):
        o = opts(r)
        if r.measured and not o.data:
            groups[(family(r), o.workers, o.servers)][o.push_every] = r
    best = [(g, ks) for g, ks in groups.items() if 1 in ks and len(ks) > 1]
    if not best:
        return ""
    (fam, workers, _), ks = max(best, key=lambda kv: kv[0][1])
    k = max(ks)
    a, b = ks[1], ks[k]
    da, db = outcome(a).drift, outcome(b).drift
    text = (f"Period ({fam[0]}, {workers} workers): exchanging every {k} steps instead of "
            f"every step made the time per mini-batch {times(a.median_s, b.median_s)} and "
            f"moved the communication and waiting share from {pct(_comm(a))} to "
            f"{pct(_comm(b))}")
    if da and db and da.mean > 0:
        text += f", with a drift {db.mean / da.mean:.1f}x as large"
    return text + "."


# ----------------------------------------------------------------------------- servers
def server_table(rows: list[ConfigResult]) -> Table | None:
    rows = sorted((r for r in period_rows(rows) if not opts(r).data
                   and opts(r).push_every == 1), key=order)
    if not any(opts(r).servers for r in rows):
        return None
    headers = ["network", "workers", "servers", "time/mini-batch", "samples/s",
               "workers comm + wait", "busiest server busy", "server traffic (max)"]
    out, values = [], []
    for r in rows:
        o, e = opts(r), outcome(r)
        busy = max((s.busy_share for s in e.servers if s.busy_share is not None), default=None)
        rate = max((s.bytes_per_s for s in e.servers if s.bytes_per_s is not None),
                   default=None)
        sps = r.spec.batch_size / r.median_s if r.measured and r.median_s else None
        where = str(o.servers) if o.servers else "0 (beside rank 0)"
        values.append([name_of(r), o.workers, o.servers, r.median_s, sps, _comm(r), busy, rate])
        out.append([name_of(r), str(o.workers), where, units.seconds(r.median_s),
                    f"{sps:.4g}" if sps else "-", pct(_comm(r)), pct(busy),
                    f"{units.nbytes(rate)}/s" if rate else "-"])
    return Table(
        title="Parameter servers: the server's load as workers grow", headers=headers,
        rows=out, values=values,
        caption="Asynchronous training with the server beside rank 0 or on dedicated "
        "processes, the weights sharded over them by size. Busy: the share of the timed "
        "window a server spent applying pushes and copying weights out (under its lock); "
        "traffic: gradients in and weights out per second through the busiest server.")


def server_finding(rows: list[ConfigResult]) -> str:
    by: dict[tuple, dict[int, ConfigResult]] = defaultdict(dict)
    for r in period_rows(rows):
        o = opts(r)
        if r.measured and not o.data and o.push_every == 1:
            by[(family(r), o.servers)][o.workers] = r
    lines, nets = [], set()
    for (fam, servers), ws in sorted(by.items(), key=lambda kv: kv[0][1]):
        if len(ws) < 2:
            continue
        nets.add(fam[0])
        lo, hi = min(ws), max(ws)
        a, b = ws[lo], ws[hi]
        busy = [max((s.busy_share or 0.0 for s in outcome(x).servers), default=0.0)
                for x in (a, b)]
        lines.append(f"{servers or 'no dedicated'} server{'s' if servers != 1 else ''}: "
                     f"{lo} to {hi} workers made the time per mini-batch "
                     f"{times(a.median_s, b.median_s)}, the busiest server {pct(busy[0])} to "
                     f"{pct(busy[1])} busy")
    return (f"Servers ({', '.join(sorted(nets))}): " + "; ".join(lines) + ".") if lines else ""


# ----------------------------------------------------------------------------- hybrid
def hybrid_finding(rows: list[ConfigResult]) -> str:
    """Hybrid against the pure strategies at the same workers and workload."""
    hy = [r for r in rows if opts(r).strategy == "hybrid" and r.measured and not opts(r).data]
    if not hy:
        return ""
    h = min(hy, key=lambda r: r.median_s or 0.0)
    peers = {opts(r).strategy: r for r in rows if r.measured and not opts(r).data
             and opts(r).strategy in ("sync", "pipeline") and opts(r).workers == opts(h).workers
             and family(r) == family(h) and not opts(r).straggler_delay_s}
    text = (f"Hybrid ({name_of(h)}, {opts(h).workers} workers, {layout(h)}): "
            f"{units.seconds(h.median_s)} per mini-batch")
    for name in ("sync", "pipeline"):
        if name in peers:
            text += f", {times(peers[name].median_s, h.median_s)} than {name}"
    return text + "."


def factor_tables(rows: list[ConfigResult]) -> list[Table]:
    return [t for t in (period_table(rows), server_table(rows)) if t]


def factor_text(rows: list[ConfigResult]) -> str:
    return " ".join(x for x in (period_finding(rows), server_finding(rows),
                                hybrid_finding(rows)) if x)


def servers_plot(rows: list[ConfigResult], path: Path) -> Path | None:
    """Samples/s and the busiest server's busy share against workers, per server count."""
    lines: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    for r in period_rows(rows):
        o = opts(r)
        if r.measured and not o.data and o.push_every == 1 and r.median_s:
            busy = max((s.busy_share or 0.0 for s in outcome(r).servers), default=0.0)
            label = f"{name_of(r)}, {o.servers or 'no dedicated'} server(s)"
            lines[label].append((o.workers, r.spec.batch_size / r.median_s, busy))
    if not any(len(v) > 1 for v in lines.values()) or not any(
            opts(r).servers for r in period_rows(rows)):
        return None
    from dlperf.report.plots import plt, save

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, (label, pts) in enumerate(sorted(lines.items())):
        pts.sort()
        a.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=f"C{i}", label=label)
        b.plot([p[0] for p in pts], [p[2] for p in pts], marker="o", color=f"C{i}", label=label)
    a.set_ylabel("samples/s")
    b.set_ylabel("busiest server: busy share")
    for ax in (a, b):
        ax.set_xlabel("workers")
        ax.grid(True, alpha=0.3)
    a.set_title("throughput")
    b.set_title("the server's own load")
    b.legend(fontsize=7)
    return save(fig, path)


def period_plot(rows: list[ConfigResult], path: Path) -> Path | None:
    """Communication share and drift against the period, per workload and workers."""
    lines: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    for r in period_rows(rows):
        o, d = opts(r), outcome(r).drift
        if r.measured and not o.data and _comm(r) is not None and d:
            lines[f"{name_of(r)} x{o.workers}"].append((o.push_every, _comm(r), d.mean))
    if not any(len(v) > 1 for v in lines.values()):
        return None
    from dlperf.report.plots import plt, save

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, (label, pts) in enumerate(sorted(lines.items())):
        pts.sort()
        ks = [p[0] for p in pts]
        a.plot(ks, [p[1] for p in pts], marker="o", color=f"C{i}", label=label)
        b.plot(ks, [p[2] for p in pts], marker="o", color=f"C{i}", label=label)
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("push every k steps")
        ax.grid(True, alpha=0.3)
    a.set_ylabel("communication + wait share")
    b.set_ylabel("drift at an exchange (norm)")
    b.legend(fontsize=7)
    return save(fig, path)
