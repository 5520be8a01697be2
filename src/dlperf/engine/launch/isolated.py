"""Run one RunSpec in a fresh worker process, with a timeout and a memory limit.

The parent watches the child (``launch.watch``): its exit status, its wall time against
``timeout_s`` and its resident memory (the whole process tree) against
``memory_limit_bytes``. Whatever happens, a RunResult comes back: the worker's own, or a
failure built here (crash, oom, timeout, interrupted) that keeps every step time the
worker had already reported.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from dlperf.backends import device_memory
from dlperf.core import framework_table, separate_envs
from dlperf.core.orphans import child_env
from dlperf.core.payload import Diagnostics
from dlperf.core.spec import Failure, RunResult, RunSpec
from dlperf.engine.launch.scratch import scratch_dir, temp_env
from dlperf.engine.launch.watch import (
    Outcome,
    ProgressReader,
    describe_exit,
    gib,
    last_meaningful_line,
    oom_kills,
    watch,
)
from dlperf.kinds import KINDS

#: the directory holding 'dlperf' (as many folders up as this module's name has parts
#: below it), put on a worker's path for an interpreter of another environment
SRC_DIR = str(Path(__file__).resolve().parents[len(__name__.split(".")) - 1])


class LaunchInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM while a worker ran: the worker is gone, and ``result`` is the
    configuration in flight, recorded as 'interrupted' with the steps it had streamed."""

    def __init__(self, result: RunResult):
        super().__init__("interrupted")
        self.result = result


def with_src_path(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this dlperf's source first on PYTHONPATH, so a child runs this code."""
    rest = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": SRC_DIR + (os.pathsep + rest if rest else "")}


def worker_env(spec: RunSpec, memory_limit_bytes: int | None = None) -> dict[str, str]:
    """The worker's environment: its framework's thread settings, this dlperf first on
    its path and, for a GPU run under a memory limit, the limit its allocator takes."""
    env = dict(os.environ)
    env.update(framework_table.info(spec.framework).thread_env(spec.threads, spec.variant))
    env.pop(device_memory.ENV, None)
    if memory_limit_bytes and spec.device == "gpu":
        env[device_memory.ENV] = str(memory_limit_bytes)
    env = with_src_path(env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return child_env(env)


def partial_steps(events: list[dict]) -> tuple[list[float], list[float]]:
    """(warm-up times, timed step times) among a worker's progress events."""
    warm = [e["s"] for e in events if e.get("phase") == "warmup"]
    steps = [e["s"] for e in events if e.get("phase") == "step"]
    return warm, steps


def kill_reason(out: Outcome, oom_before: int | None, tail: str) -> tuple[str, str]:
    """(reason, message) for a worker that died without a result. A SIGKILL is 'oom' only
    when the kernel's OOM killer counted a kill meanwhile; an allocator that gave up says
    so in the log; anything else is a crash with its signal or status."""
    last = last_meaningful_line(tail)
    message = describe_exit(out.returncode) + (f": {last}" if last else "")
    after = oom_kills()
    if out.returncode == -signal.SIGKILL and oom_before is not None and after is not None \
            and after > oom_before:
        return "oom", message + " (the kernel's out-of-memory killer)"
    if "out of memory" in tail.lower() or "bad_alloc" in tail:
        return "oom", message
    return "crash", message


def over_limit(result: RunResult, limit: int | None) -> RunResult:
    """A run that finished, but whose own peak passed ``limit``: on a CPU its resident
    memory before the watch read it (a short run, a brief peak), on a GPU its device
    memory where the framework's allocator was not capped (JAX's). Out of memory, its
    step times kept."""
    gpu = result.spec.device == "gpu"
    m = result.metrics if result.ok else None
    peak = (m.device_peak_bytes if gpu else m.peak_rss_bytes) if m else None
    if not limit or not peak or peak <= limit:
        return result
    where = "its device peak" if gpu else "its peak resident"
    when = "" if gpu else ", reached between two of the watch's reads"
    return result.model_copy(update={
        "status": "failed", "metrics": None, "failure": Failure(reason="oom", message=(
            f"exceeded --memory-limit {gib(limit)} ({where} {gib(peak)}{when})"))})


def run_isolated(
    spec: RunSpec,
    *,
    timeout_s: float | None = None,
    memory_limit_bytes: int | None = None,
    on_event: Callable[[dict], None] | None = None,
    resume: BaseModel | None = None,
) -> RunResult:
    """Measure ``spec`` in a child process; never raises for what happens in the child.

    Interrupted (KeyboardInterrupt, which the CLI also raises for SIGTERM), it kills the
    child and raises ``LaunchInterrupted`` carrying the 'interrupted' result, with what the
    kind salvages from the child's progress (``Kind.salvage``: a calibration's timed
    shapes). ``resume``: what an interrupted run of ``spec`` had measured (its kind's
    outcome, handed to the worker, which keeps it).
    """
    # a versioned environment (dlperf setup torch==2.12.0) runs the framework of its own
    python = (separate_envs.python(spec.env) if spec.env
              else framework_table.info(spec.framework).python or sys.executable)
    with scratch_dir("dlperf-") as d:
        spec_path, result_path, progress = d / "spec.json", d / "result.json", d / "progress.jsonl"
        spec_path.write_text(spec.model_dump_json())
        progress.touch()
        extra = []
        if resume is not None:
            (d / "resume.json").write_text(resume.model_dump_json())
            extra = [str(d / "resume.json")]
        reader, events = ProgressReader(progress), []

        def forward(notify: bool = True) -> None:
            new = reader.read()
            events.extend(new)
            if notify and on_event is not None:
                for ev in new:
                    on_event(ev)

        log = (d / "worker.log").open("w+b")
        started, oom_before = time.time(), oom_kills()
        popen = subprocess.Popen(
            [python, "-m", "dlperf.engine.worker", str(spec_path), str(result_path), str(progress),
             *extra],
            env=worker_env(spec, memory_limit_bytes) | temp_env(d), stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a kill takes its children too
        )
        interrupted = False
        try:
            # a GPU run's limit is its device's (``worker_env``), not the host's
            out = watch(popen, timeout_s=timeout_s, check=lambda: forward(),
                        memory_limit_bytes=None if spec.device == "gpu" else memory_limit_bytes)
        except KeyboardInterrupt:
            interrupted = True
            out = Outcome(("interrupted", "interrupted by the user (Ctrl-C or SIGTERM) "
                           "while running"), popen.returncode or 0)
        finally:
            log.seek(0)
            tail = log.read()[-4000:].decode(errors="replace")
            log.close()
        forward(notify=False)  # the last lines, kept but not announced
        if out.failure is None and result_path.exists():
            result = RunResult.model_validate_json(result_path.read_text())
            return over_limit(result, memory_limit_bytes).model_copy(
                update={"launcher_cpu_s": out.cpu_s})
        warm, steps = partial_steps(events)
        failure = out.failure or kill_reason(out, oom_before, tail)
        result = RunResult.failed(
            spec, failure[0], failure[1], step_times_s=steps, warmup_times_s=warm,
            outcome=salvage(events) if (salvage := KINDS[spec.kind].salvage) else None,
            started_at=started, finished_at=time.time(),
            diagnostics=Diagnostics(log_tail=tail[-1500:], peak_rss_bytes=out.peak_rss),
            launcher_cpu_s=out.cpu_s,
        )
        if interrupted:
            raise LaunchInterrupted(result)
        return result
