"""What watching a worker costs the measurement: dlperf's watch loop against the loop it
replaced (kept here as the reference), side by side in ABBA order.

The old loop woke every 50 ms, walked the whole process table for the worker's
descendants and their memory (psutil), and re-read and re-parsed the whole progress file.
On a machine whose every core runs the worker's threads, the parent's CPU time is taken
from the measurement. Printed: the parent's CPU time per second of the run (as a share of
one core) under each loop, and the worker's median step time under each.

    python benchmarks/watch_overhead.py [--rounds 4] [--threads N] [--min-time 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from dlperf.core.spec import Measurement, RunResult, RunSpec
from dlperf.engine.launch.isolated import worker_env
from dlperf.engine.launch.watch import watch


def _old_loop(popen: subprocess.Popen, progress: Path) -> None:
    """The watch loop before: 50 ms sleeps, a process-table walk and a full re-read each."""
    proc, seen = psutil.Process(popen.pid), 0
    while popen.poll() is None:
        time.sleep(0.05)
        try:
            for p in [proc, *proc.children(recursive=True)]:
                p.memory_info()
        except psutil.Error:
            pass
        lines = progress.read_text().splitlines()
        for line in lines[seen:]:
            try:
                json.loads(line)
            except json.JSONDecodeError:
                break
            seen += 1


def one_run(spec: RunSpec, loop: str) -> tuple[float, float, float]:
    """(parent CPU s, wall s, worker median step s) for one worker under ``loop``."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "spec.json").write_text(spec.model_dump_json())
        (d / "progress.jsonl").touch()
        cpu0, t0 = time.process_time(), time.monotonic()
        popen = subprocess.Popen([sys.executable, "-m", "dlperf.engine.worker", str(d / "spec.json"),
                                  str(d / "result.json"), str(d / "progress.jsonl")],
                                 env=worker_env(spec), start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if loop == "old":
            _old_loop(popen, d / "progress.jsonl")
        else:
            watch(popen, timeout_s=3600)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
        r = RunResult.model_validate_json((d / "result.json").read_text())
        return cpu, wall, r.metrics.median_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--min-time", type=float, default=6.0)
    a = ap.parse_args()
    spec = RunSpec(network="fcn5", batch_size=64, threads=a.threads,
                   measurement=Measurement(min_time_s=a.min_time))
    res: dict[str, list[tuple[float, float, float]]] = {"old": [], "new": []}
    print(f"fcn5 batch 64 at {a.threads} threads (all cores), {a.rounds} rounds, ABBA")
    for i in range(a.rounds):
        for loop in (("new", "old") if i % 2 == 0 else ("old", "new")):
            res[loop].append(one_run(spec, loop))
            cpu, wall, med = res[loop][-1]
            print(f"  round {i + 1} {loop}: parent {cpu:.3f} CPU s in {wall:.1f} s "
                  f"({cpu / wall:.2%} of a core), step median {med * 1e3:.1f} ms", flush=True)
    share = {k: statistics.median(c / w for c, w, _ in v) for k, v in res.items()}
    ratio = statistics.median(o[2] / n[2] for o, n in zip(res["old"], res["new"], strict=True))
    print(f"\nparent CPU while watching: old loop {share['old']:.2%} of a core, "
          f"dlperf's watch {share['new']:.2%} ({share['old'] / max(share['new'], 1e-9):.1f}x less)")
    print(f"worker step time, old loop / dlperf's watch = {ratio:.3f} (median of paired rounds)")


if __name__ == "__main__":
    main()
