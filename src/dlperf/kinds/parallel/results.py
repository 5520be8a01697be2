"""From the ranks' raw step records to one RunResult. Framework-free (runs in the launcher).

Each rank records, per step, its start and end and every communication it blocked on
(start, end, and a key naming the collective or the message). Matching the keys across
ranks splits each blocked interval in two: **waiting**, until the last participant arrived
(max of the participants' start times minus this rank's start), and **communicating**, the
rest. For the parameter server, whose requests are served by other threads, the server
reports its lock wait and its own work, and the remainder is the transfer.

DDP overlaps its all-reduce with the backward pass, so its in-flight time is not time the
step waited. What the step waited is measured from the launch of the last bucket (when this
rank's backward compute is done) to the return of ``backward()``; the part of that before
the slowest rank launched its last bucket is waiting, the rest communicating. The full
in-flight time (the union over buckets, from the last rank's launch to completion) is
reported beside it as ``allreduce_inflight``, with the bytes reduced.

Everything that is neither communication nor waiting nor server work is compute (the
straggler's injected delay included: it is the slow compute being modelled).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from dlperf.core.spec import Metrics, RunResult, RunSpec
from dlperf.core.stats import summarize
from dlperf.core.target_rules import Budget, accuracy_and_loss_goals, reached
from dlperf.kinds.parallel.options import THROUGH_A_SERVER, ParallelOptions, ParallelOutcome
from dlperf.perfmodel.formulas import pipeline_bubble_fraction

PARTS = ("compute", "comm", "wait", "server")


def oversubscribed_warning(strategy: str, threads: int, cores: int) -> str:
    """The warning of a run with more threads than physical cores; for an RPC strategy,
    also what its waits cost there: TensorPipe's shared-memory reactor polls without
    sleeping, and torchrun starts each rank in a session of its own, so where the kernel
    shares cores among sessions every process keeps its share of its core while it
    waits for the server (docs/parallel.md)."""
    text = (f"{threads} threads on {cores} physical cores: the workers compete for cores "
            "(lower --threads to avoid it)")
    if strategy in THROUGH_A_SERVER:  # their processes join an RPC group (TensorPipe)
        text += ("; each process of the parameter server's RPC group also keeps its share of "
                 "its core while it waits for the server (TensorPipe polls), time a worker "
                 "on a core of its own does not lose")
    return text


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping intervals."""
    total, end = 0.0, -math.inf
    for a, b in sorted((a, b) for a, b in intervals if b > a):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def breakdown(reports: list[dict[str, Any]], phases: tuple[str, ...]) -> dict[int, list[dict]]:
    """Per rank, per step of the given phases: its time and the split of that time."""
    starts: dict[str, float] = {}  # message/collective key -> last participant's start
    last_launch: dict[str, float] = {}  # DDP step key -> last rank's last bucket launch
    bucket_launch: dict[tuple[str, int], float] = {}
    for rep in reports:
        for s in rep.get("steps", []):
            if s["phase"] not in phases:
                continue
            for _kind, key, a, *_ in s.get("ev") or []:
                if key is not None:
                    starts[key] = max(starts.get(key, a), a)
            d = s.get("ddp")
            if d and d["b"]:
                last = max(b[1] for b in d["b"])
                last_launch[d["key"]] = max(last_launch.get(d["key"], last), last)
                for idx, launch, *_ in d["b"]:
                    k = (d["key"], idx)
                    bucket_launch[k] = max(bucket_launch.get(k, launch), launch)
    out: dict[int, list[dict]] = {}
    for rep in reports:
        rows = []
        for s in rep.get("steps", []):
            if s["phase"] not in phases:
                continue
            step = s["t1"] - s["t0"]
            part = dict.fromkeys(PARTS[1:], 0.0)
            kinds: dict[str, float] = defaultdict(float)
            for kind, key, a, b, hint, srv in s.get("ev") or []:
                dur = max(0.0, b - a)
                if key is not None and key in starts:
                    w = min(max(0.0, starts[key] - a), dur)
                else:
                    w = min(hint or 0.0, dur)
                sv = min(srv or 0.0, dur - w)
                part["wait"] += w
                part["server"] += sv
                part["comm"] += dur - w - sv
                kinds[kind] += dur - w - sv
            inflight, nbytes = 0.0, 0
            d = s.get("ddp")
            if d and d["b"]:
                last = max(b[1] for b in d["b"])
                exposed = max(0.0, d["bw"][1] - last)
                w = min(max(0.0, last_launch[d["key"]] - last), exposed)
                part["wait"] += w
                part["comm"] += exposed - w
                kinds["allreduce"] += exposed - w
                inflight = union_length(
                    (min(bucket_launch[(d["key"], idx)], done), done) for idx, _, done, _ in d["b"])
                nbytes = sum(b[3] for b in d["b"])
            compute = max(0.0, step - sum(part.values()))
            rows.append({"i": s["i"], "phase": s["phase"], "step": step, "compute": compute,
                         **part, "delay": s.get("delay") or 0.0, "kinds": dict(kinds),
                         "inflight": inflight, "bytes": nbytes})
        out[int(rep["rank"])] = rows
    return out


def _share(rows: list[dict], key: str) -> float | None:
    total = sum(r["step"] for r in rows)
    return sum(r[key] for r in rows) / total if total > 0 else None


def _mean(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows) if rows else 0.0


def rank_summary(rep: dict[str, Any], rows: list[dict]) -> dict[str, Any]:
    steps = [r["step"] for r in rows]
    kinds: dict[str, float] = defaultdict(float)
    for r in rows:
        for k, v in r["kinds"].items():
            kinds[k] += v / len(rows)
    out = {
        "rank": rep.get("rank"), "host": rep.get("host"), "pid": rep.get("pid"),
        "node": rep.get("node"),
        "cpus": rep.get("cpus"), "threads_in_force": rep.get("threads_in_force"),
        "role": (rep.get("strategy") or {}).get("role"), "steps": len(rows),
        "median_step_s": statistics.median(steps) if steps else None,
        "samples_per_s": (sum(len_ for len_ in _samples(rep, rows)) / sum(steps)
                          if steps and sum(steps) > 0 else None),
        **{f"{p}_share": _share(rows, p) for p in PARTS},
        "per_step_s": {p: _mean(rows, p) for p in (*PARTS, "delay", "inflight")},
        "comm_by_kind_s": dict(kinds),
        "allreduce_bytes": _mean(rows, "bytes") if rows else 0,
        "updates": rep.get("updates"),
    }
    if "stages" in (rep.get("strategy") or {}):
        st = rep["strategy"]
        out["stage"] = next((s for s in st["stages"] if s["rank"] == rep.get("rank")), None)
    return out


def _samples(rep: dict[str, Any], rows: list[dict]) -> list[int]:
    n = {(s["phase"], s["i"]): s.get("n", 0) for s in rep.get("steps", [])}
    return [n.get((r["phase"], r["i"]), 0) for r in rows]


def lockstep_series(bd: dict[int, list[dict]]) -> list[float]:
    """Time of each global step: the slowest rank's (they finish together anyway)."""
    by_step: dict[int, float] = {}
    for rows in bd.values():
        for r in rows:
            by_step[r["i"]] = max(by_step.get(r["i"], 0.0), r["step"])
    return [by_step[i] for i in sorted(by_step)]


def server_series(server: dict[str, Any], phase: str, batch: int, start: float) -> list[float]:
    """Time to consume each global mini-batch of ``batch`` samples at the server: the
    pushes it applied, in order, each carrying its samples (async: a worker's share, or k
    shares with a period k; mixed: a group's); a push that completes part of a mini-batch
    contributes that part of the time since the push before it."""
    rows = sorted((row[0], row[5]) for row in server.get("log", []) if row[4] == phase)
    out: list[float] = []
    prev, carry_t, carry_n = start, 0.0, 0
    for t, n in rows:
        d, left = max(0.0, t - prev), n
        prev = t
        while left > 0 and carry_n + left >= batch:
            dt = d * (batch - carry_n) / left
            out.append(carry_t + dt)
            d, left, carry_t, carry_n = d - dt, left - (batch - carry_n), 0.0, 0
        carry_t, carry_n = carry_t + d, carry_n + left
    return [x for x in out if x > 0]


def drift_stats(reports: list[dict[str, Any]], phase: str) -> dict[str, Any] | None:
    """The drift at every exchange of the phase, over every worker."""
    steps = [s for rep in reports for s in rep.get("steps", [])
             if s["phase"] == phase and s.get("drift") is not None]
    if not steps:
        return None
    vals = sorted(float(s["drift"]) for s in steps)
    rel = [s["drift"] / s["weights_norm"] for s in steps if s.get("weights_norm")]
    return {"count": len(vals), "mean": statistics.fmean(vals),
            "median": statistics.median(vals),
            "p90": vals[min(len(vals) - 1, math.ceil(0.9 * len(vals)) - 1)], "max": vals[-1],
            "mean_relative": statistics.fmean(rel) if rel else None}


def server_loads(servers: list[tuple[int, dict[str, Any]]], start: float,
                 end: float) -> list[dict[str, Any]]:
    """Each server's own load over the window [start, end]: the share of it spent holding
    its lock (applying pushes, copying weights out) and the bytes it moved."""
    window = max(end - start, 1e-12)
    out = []
    for rank, srv in servers:
        rows = [b for b in srv.get("busy", []) if b[1] > start and b[0] < end]
        busy = sum(min(b[1], end) - max(b[0], start) for b in rows)
        bytes_in = float(sum(b[3] for b in rows if b[2] == "push"))
        bytes_out = float(sum(b[3] for b in rows if b[2] == "pull"))
        out.append({"rank": rank, "shard_params": int((srv.get("shard") or [0, 0])[1]),
                    "busy_share": busy / window, "requests": len(rows), "bytes_in": bytes_in,
                    "bytes_out": bytes_out, "bytes_per_s": (bytes_in + bytes_out) / window,
                    "window_s": window})
    return out


def staleness_stats(server: dict[str, Any], phase: str) -> dict[str, Any] | None:
    vals = [row[3] for row in server.get("log", []) if row[4] == phase and row[3] is not None]
    if not vals:
        return None
    s = sorted(vals)
    return {"count": len(s), "mean": statistics.fmean(s), "median": statistics.median(s),
            "p90": s[min(len(s) - 1, math.ceil(0.9 * len(s)) - 1)], "max": s[-1],
            "histogram": {str(k): v for k, v in sorted(Counter(s).items())}}


def _threads(reports: list[dict[str, Any]]) -> dict[str, Any]:
    by_host: dict[str, dict[str, int]] = {}
    for rep in reports:
        h = by_host.setdefault(str(rep.get("host")), {"threads": 0, "physical_cores": 0,
                                                      "workers": 0})
        h["threads"] += int(rep.get("threads_in_force") or 0)
        h["physical_cores"] = int(rep.get("physical_cores") or 0)
        h["workers"] += 1
    return {"total_threads": sum(h["threads"] for h in by_host.values()),
            "physical_cores": sum(h["physical_cores"] for h in by_host.values()),
            "hosts": by_host,
            "oversubscribed": any(h["threads"] > h["physical_cores"] for h in by_host.values())}


def _training(o: ParallelOptions, spec: RunSpec, reports: list[dict[str, Any]]) -> dict[str, Any]:
    evals = next((r["evals"] for r in reports if r.get("evals")), [])
    wanted = accuracy_and_loss_goals(o.target_accuracy, o.target_loss)
    hit = next((e for e in evals if reached(wanted, e)), None)
    final = evals[-1] if evals else None
    return {
        "data": o.data, "target": {"accuracy": o.target_accuracy, "loss": o.target_loss},
        "budget": {"max_steps": o.max_steps, "max_time_s": o.max_time_s},
        "reached": hit is not None,
        "time_to_target_s": hit["train_s"] if hit else None,
        "steps_to_target": hit["samples"] / spec.batch_size if hit else None,
        "final": {"loss": final["loss"], "accuracy": final["accuracy"],
                  "steps": final["samples"] / spec.batch_size,
                  "train_s": final["train_s"]} if final else None,
        "best_accuracy": max((e["accuracy"] for e in evals), default=None),
        "eval_s_total": max((e.get("eval_s", 0.0) for e in evals), default=0.0),
        "curve": [{"train_s": e["train_s"], "steps": e["samples"] / spec.batch_size,
                   "loss": e["loss"], "accuracy": e["accuracy"]} for e in evals],
        "time_axis": ("training time; evaluation pauses, which every worker waited for, "
                      "excluded") if o.lockstep else (
                      "wall time; the other workers kept training while rank 0 evaluated"),
    }


def summarize_ranks(spec: RunSpec, reports: list[dict[str, Any]], phase: str) -> dict[str, Any]:
    """The parts of the result that partial records support too."""
    o = spec.options
    bd = breakdown(reports, (phase,))
    per_rank = [rank_summary(rep, bd.get(int(rep["rank"]), [])) for rep in reports]
    shares = {p: _avg(r[f"{p}_share"] for r in per_rank) for p in PARTS}
    kinds: dict[str, list[float]] = defaultdict(list)
    for r in per_rank:
        for k, v in r["comm_by_kind_s"].items():
            kinds[k].append(v)
    out = {
        "phase": phase,
        "breakdown": {
            "shares": shares,
            "per_step_s": {p: _avg(r["per_step_s"][p] for r in per_rank)
                           for p in (*PARTS, "delay", "inflight")},
            "comm_by_kind_s": {k: statistics.fmean(v) for k, v in kinds.items()},
            "allreduce_inflight_s": _avg(r["per_step_s"]["inflight"] for r in per_rank),
            "allreduce_bytes": _avg(r["allreduce_bytes"] for r in per_rank),
            "note": "shares: averaged over ranks, of each rank's step time",
        },
        "per_rank": per_rank,
        "per_rank_step_times_s": {str(rep["rank"]): [r["step"] for r in bd.get(int(rep["rank"]), [])]
                                  for rep in reports},
    }
    if o.lockstep:
        out["series"] = lockstep_series(bd)
    return out


def _avg(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def assemble(spec: RunSpec, reports: list[dict[str, Any]], *,
             launcher: dict[str, Any] | None = None) -> RunResult:
    """One RunResult from every rank's report (rank 0's ``all.json``)."""
    o = spec.options
    reports = sorted(reports, key=lambda r: r["rank"])
    r0 = reports[0]
    phase = "train" if o.data else "timed"
    summary = summarize_ranks(spec, reports, phase)
    servers = [(int(r["rank"]), r["strategy"]["server"]) for r in reports
               if (r.get("strategy") or {}).get("server")]
    server = servers[0][1] if servers else None  # shard 0: every push reaches every shard
    if o.lockstep:
        series = summary.pop("series")
    else:
        series = server_series(server or {}, phase, spec.batch_size, r0["timing"]["start"])
    extra: dict[str, Any] = {
        "strategy": o.strategy, "workers": o.workers, "nodes": o.nodes,
        "threads_per_worker": spec.threads, **_threads(reports),
        "straggler": ({"rank": o.straggler_rank, "delay_s": o.straggler_delay_s}
                      if o.straggler_delay_s else None),
        **summary,
        "timing": r0.get("timing"),
    }
    if o.strategy in ("mixed", "hybrid"):
        extra["groups"] = o.groups
    if server is not None:
        extra["staleness"] = staleness_stats(server, phase)
        pushed = sum(int((r.get("strategy") or {}).get("pushes") or 0) for r in reports)
        extra["ps"] = {"pushes": pushed, "applied": server["applied"],
                       "duplicates": sum(srv["duplicates"] for _, srv in servers),
                       "versions": server["versions"], "samples": server["samples"]}
        ends = [st["t1"] for rep in reports for st in rep.get("steps", [])
                if st["phase"] == phase]
        start = r0["timing"]["start"]
        extra["servers"] = server_loads(servers, start, max(ends, default=start))
        extra["drift"] = drift_stats(reports, phase)
    if o.strategy == "async":
        extra["push_every"] = o.push_every
    if o.strategy in ("pipeline", "hybrid"):
        st = r0.get("strategy") or {}
        extra["pipeline"] = {"micro_batches": o.micro_batches, "stages": st.get("stages"),
                             "cost_source": st.get("cost_source"),
                             "ideal_bubble_share": pipeline_bubble_fraction(o.stages,
                                                                            o.micro_batches)}
    if launcher:
        extra["launcher"] = launcher
    warm = [s["t1"] - s["t0"] for s in r0.get("steps", []) if s["phase"] == "warmup"]
    common = dict(
        step_times_s=series, warmup_times_s=warm, threads_in_force=r0.get("threads_in_force"),
        cpus=r0.get("cpus") or [], param_count=r0.get("param_count"),
        software=r0.get("software") or {}, started_at=(launcher or {}).get("started_at"),
        finished_at=(launcher or {}).get("finished_at"),
    )
    metrics = _metrics(spec, series, reports, warm)
    warnings = []
    if extra["oversubscribed"]:
        warnings.append(oversubscribed_warning(o.strategy, extra["total_threads"],
                                               extra["physical_cores"]))
    if o.data:
        extra["training"] = training = _training(o, spec, reports)
        if o.has_target and not training["reached"]:
            best = training["best_accuracy"]
            return RunResult.failed(
                spec, "budget", "target not reached within the budget "
                f"({_budget_text(o)}; best held-out accuracy "
                f"{'-' if best is None else f'{best:.3f}'})",
                metrics=metrics, outcome=ParallelOutcome.model_validate(extra),
                warnings=warnings, **common)
    outcome = ParallelOutcome.model_validate(extra)
    if metrics is None:
        return RunResult.failed(spec, "error", "no timed step completed", outcome=outcome,
                                **common)
    return RunResult(spec=spec, status="ok", metrics=metrics, outcome=outcome,
                     warnings=warnings, **common)


def _budget_text(o: ParallelOptions) -> str:
    return Budget(max_steps=o.max_steps, max_time_s=o.max_time_s).describe("mini-batches")


def _metrics(spec: RunSpec, series: list[float], reports: list[dict[str, Any]],
             warm: list[float]) -> Metrics | None:
    if not series:
        return None
    s = summarize(series)
    flops = (reports[0].get("flops_per_sample") or 0.0) * spec.batch_size or None
    rss = [r.get("peak_rss_bytes") for r in reports if r.get("peak_rss_bytes")]
    timing = reports[0].get("timing") or {}
    return Metrics(
        steps=s.n, median_s=s.median, mean_s=s.mean, std_s=s.std, min_s=s.min, max_s=s.max,
        mad_s=s.mad, iqr_s=s.iqr, cv=s.cv, samples_per_s=spec.batch_size / s.median,
        flops_per_step=flops, achieved_flops=flops / s.median if flops else None,
        peak_rss_bytes=max(rss) if rss else None, warmup_steps=len(warm),
        warmup_settled=bool(timing.get("settled", True)),
        speed_probe=reports[0].get("speed_probe"),
    )
