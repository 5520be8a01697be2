"""What a torchrun job that did not finish leaves behind, turned into one failed RunResult:
every rank's logged records (``read_progress``), the cause (``diagnose``: the rank that
died first, a rendezvous that never completed, an error a rank reported) and the failure
record that keeps every step already logged, the log's end and each worker's stacks."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

from dlperf.core.payload import Diagnostics
from dlperf.core.spec import RunResult, RunSpec
from dlperf.engine.launch.watch import describe_exit, last_meaningful_line, oom_kills
from dlperf.kinds.parallel import results
from dlperf.kinds.parallel.options import ParallelOptions, ParallelOutcome


def read_progress(outdir: Path) -> dict[int, dict[str, Any]]:
    """Every rank's logged records (a partial report each), for a run that did not finish."""
    out: dict[int, dict[str, Any]] = {}
    for p in sorted(outdir.glob("progress_rank*.jsonl")):
        rank = int(p.stem.removeprefix("progress_rank"))
        rep: dict[str, Any] = {"rank": rank, "steps": [], "evals": []}
        try:
            lines = p.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue  # the last line may be cut off by the kill
            kind = ev.pop("log", None)
            if kind == "start":
                rep.update(ev)
            elif kind == "step":
                rep["steps"].append(ev)
            elif kind == "eval":
                rep["evals"].append(ev)
        out[rank] = rep
    return out


_FAILURE_RE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


def _torchrun_failures(log: str) -> dict[int, int]:
    """{global rank: exit code} from torchrun's failure summary."""
    return {int(m.group(1)): int(m.group(3)) for m in _FAILURE_RE.finditer(log)}


def _errors(outdir: Path) -> dict[int, dict[str, Any]]:
    out = {}
    for p in outdir.glob("error_rank*.json"):
        try:
            e = json.loads(p.read_text())
            out[int(e["rank"])] = e
        except (OSError, ValueError, KeyError):
            continue
    return out


def _progress_text(rep: dict[str, Any] | None) -> str:
    if not rep or not rep.get("steps"):
        return "before its first step"
    s = rep["steps"][-1]
    return f"after {s['phase']} step {s['i']}"


def diagnose(outdir: Path, log: str, returncode: int, expected: list[int],
             partial: dict[int, dict[str, Any]], *, oom_killed: bool = False
             ) -> tuple[str, str]:
    """(reason, message) for a torchrun that exited without a result. A rank killed by
    SIGKILL is 'oom' only when ``oom_killed`` (the kernel counted an out-of-memory kill
    during the run) or its log says it ran out of memory."""
    if "RendezvousTimeoutError" in log or "RendezvousClosedError" in log:
        return "timeout", "rendezvous: not every node joined within the rendezvous timeout"
    if "RendezvousConnectionError" in log or "RendezvousError" in log:
        line = next((ln for ln in log.splitlines() if "Rendezvous" in ln and "Error" in ln), "")
        return "error", f"cannot reach the rendezvous: {line.strip()[:200]}"
    codes = _torchrun_failures(log)
    errors = _errors(outdir)
    # a worker killed by a signal (not torchrun's SIGTERM to the survivors) is the cause;
    # the collective errors of the others are its consequence
    killed = sorted(r for r, c in codes.items() if c < 0 and c != -signal.SIGTERM)
    if killed:
        r = killed[0]
        reason = "oom" if codes[r] == -signal.SIGKILL and (oom_killed or _oom_logged(log)) \
            else "crash"
        msg = f"rank {r}: {describe_exit(codes[r]).replace('worker ', '')} " \
              f"{_progress_text(partial.get(r))}"
        others = [f"rank {o}: {errors[o]['message']}" for o in sorted(errors) if o != r]
        return reason, msg + (f"; then {others[0]}" if others else "")
    if errors:
        r = min(errors, key=lambda k: errors[k].get("time", 0))
        e = errors[r]
        return e.get("reason", "error"), f"rank {r}: {e['message']} ({_progress_text(partial.get(r))})"
    if codes:
        r = min(codes)
        return "crash", f"rank {r}: exited with status {codes[r]} {_progress_text(partial.get(r))}"
    last = last_meaningful_line(log)
    return "crash", f"torchrun {describe_exit(returncode).replace('worker ', '')}" + (
        f": {last}" if last else "")


def _oom_logged(log: str) -> bool:
    return "out of memory" in log.lower()


def oom_rose(before: int | None) -> bool:
    after = oom_kills()
    return before is not None and after is not None and after > before


def failed_result(spec: RunSpec, o: ParallelOptions, failure: tuple[str, str],
            partial: dict[int, dict[str, Any]], log: str, meta: dict[str, Any],
            outdir: Path) -> RunResult:
    """A failure that keeps every step the ranks had logged."""
    reports = [partial[r] for r in sorted(partial)]
    extra: dict[str, Any] = {"strategy": o.strategy, "workers": o.workers, "launcher": meta}
    steps, warm = [], []
    if reports:
        phases = {s["phase"] for rep in reports for s in rep["steps"]}
        phase = next((p for p in ("timed", "train", "warmup") if p in phases), "timed")
        summary = results.summarize_ranks(spec, reports, phase)
        summary.pop("series", None)
        extra["partial"] = {**summary, "steps_logged": {str(rep["rank"]): len(rep["steps"])
                                                         for rep in reports}}
        r0 = partial.get(0, reports[0])
        steps = [s["t1"] - s["t0"] for s in r0["steps"] if s["phase"] in ("timed", "train")]
        warm = [s["t1"] - s["t0"] for s in r0["steps"] if s["phase"] == "warmup"]
        evals = next((rep["evals"] for rep in reports if rep.get("evals")), [])
        if evals:
            extra["partial"]["evals"] = evals
    stacks = {}
    for p in sorted(outdir.glob("stacks_rank*.txt")):
        try:
            text = p.read_text(errors="replace").strip()
        except OSError:
            continue
        if text:
            stacks[p.stem.removeprefix("stacks_rank")] = text[-4000:]
    # stacks: every thread of every worker, just before the kill
    return RunResult.failed(spec, failure[0], failure[1], step_times_s=steps,
                            warmup_times_s=warm, started_at=meta.get("started_at"),
                            finished_at=meta.get("finished_at"),
                            outcome=ParallelOutcome.model_validate(extra),
                            diagnostics=Diagnostics(log_tail=log[-6000:], stacks=stacks))
