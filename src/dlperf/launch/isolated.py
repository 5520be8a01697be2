"""Run one RunSpec in a fresh worker process, with a timeout and a memory limit.

The parent watches the child: its exit status, its wall time against ``timeout_s`` and its
resident memory (the whole process tree) against ``memory_limit_bytes``. Whatever
happens, a RunResult comes back: the worker's own, or a failure built here (crash, oom,
timeout) that keeps every step time the worker had already reported.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from dlperf import backends
from dlperf.spec import RunResult, RunSpec

POLL_S = 0.05
SRC_DIR = str(Path(__file__).resolve().parents[2])  # the directory holding 'dlperf'


def worker_env(spec: RunSpec) -> dict[str, str]:
    env = dict(os.environ)
    env.update(backends.info(spec.framework).thread_env(spec.threads, spec.variant))
    env["PYTHONPATH"] = SRC_DIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    try:
        for p in [proc, *proc.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return total


def _kill_group(popen: subprocess.Popen) -> None:
    try:
        os.killpg(popen.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    popen.wait()


def _partial(progress: Path) -> tuple[list[float], list[float]]:
    warm, steps = [], []
    try:
        for line in progress.read_text().splitlines():
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue  # the last line may be cut off by the kill
            if ev.get("phase") == "warmup":
                warm.append(ev["s"])
            elif ev.get("phase") == "step":
                steps.append(ev["s"])
    except OSError:
        pass
    return warm, steps


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"worker killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"worker killed by signal {-code}"
    return f"worker exited with status {code} without a result"


def run_isolated(
    spec: RunSpec,
    *,
    timeout_s: float | None = None,
    memory_limit_bytes: int | None = None,
    on_event: Callable[[dict], None] | None = None,
) -> RunResult:
    """Measure ``spec`` in a child process; never raises for what happens in the child.

    KeyboardInterrupt in the parent kills the child and propagates (nothing is recorded
    for the interrupted configuration, so a resumed sweep runs it again).
    """
    python = backends.info(spec.framework).python or sys.executable
    with tempfile.TemporaryDirectory(prefix="dlperf-") as tmp:
        d = Path(tmp)
        spec_path, result_path, progress = d / "spec.json", d / "result.json", d / "progress.jsonl"
        spec_path.write_text(spec.model_dump_json())
        progress.touch()
        log = (d / "worker.log").open("w+b")
        started = time.time()
        popen = subprocess.Popen(
            [python, "-m", "dlperf.worker", str(spec_path), str(result_path), str(progress)],
            env=worker_env(spec),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a kill takes its children too
        )
        peak_rss, failure, seen = 0, None, 0
        try:
            proc = psutil.Process(popen.pid)
            while popen.poll() is None:
                time.sleep(POLL_S)
                rss = tree_rss(proc)
                peak_rss = max(peak_rss, rss)
                if on_event is not None:
                    seen = forward_events(progress, seen, on_event)
                if memory_limit_bytes and rss > memory_limit_bytes:
                    failure = ("oom", f"exceeded --memory-limit {gib(memory_limit_bytes)} "
                                      f"(resident {gib(rss)})")
                    _kill_group(popen)
                elif timeout_s and time.time() - started > timeout_s:
                    failure = ("timeout", f"exceeded --timeout {timeout_s:g} s")
                    _kill_group(popen)
        except BaseException:
            _kill_group(popen)
            raise
        finally:
            log.seek(0)
            tail = log.read()[-4000:].decode(errors="replace")
            log.close()

        if failure is None and result_path.exists():
            return RunResult.model_validate_json(result_path.read_text())
        warm, steps = _partial(progress)
        if failure is None:
            last = last_meaningful_line(tail)
            failure = ("crash", describe_exit(popen.returncode) + (f": {last}" if last else ""))
            if _looks_oom(popen.returncode, tail):
                failure = ("oom", failure[1])
        extra = {"worker_log_tail": tail[-1500:], "peak_rss_bytes": peak_rss}
        return RunResult.failed(
            spec, failure[0], failure[1], step_times_s=steps, warmup_times_s=warm,
            started_at=started, finished_at=time.time(), extra=extra,
        )


def forward_events(progress: Path, seen: int, on_event: Callable[[dict], None]) -> int:
    """Pass each complete JSON line of ``progress`` after the first ``seen`` to
    ``on_event``; returns the new count of lines read."""
    try:
        lines = progress.read_text().splitlines()
    except OSError:
        return seen
    for line in lines[seen:]:
        try:
            on_event(json.loads(line))
        except json.JSONDecodeError:
            return seen  # half-written line; read it next time
        seen += 1
    return seen


def last_meaningful_line(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line and not line.startswith(("WARNING", "I0000", "W0000")):
            return line[:300]
    return ""


def _looks_oom(code: int, tail: str) -> bool:
    # the kernel's OOM killer sends SIGKILL; allocators that give up print a message
    return code == -signal.SIGKILL or "out of memory" in tail.lower() or "bad_alloc" in tail


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
