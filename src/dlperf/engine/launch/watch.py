"""The one watch loop of every launcher: a child process tree against its limits.

The isolated worker and a torchrun job are both a process started in a session of its
own; the driver waits for it while checking the wall-time limit and the resident memory
of the whole tree, forwards progress events, and kills the tree when a limit is passed or
the driver itself is interrupted.

The watch shares the CPUs with the measurement, so it is kept cheap: it sleeps in
``waitpid`` (an exiting child wakes it at once), walks the process table for new
descendants only once a second, reads resident memory from ``/proc/PID/status`` of the
pids it knows (now and each process's high-water mark, so a peak between two reads still
counts against the limit), and reads progress files from where it stopped, never from the
start.
``Outcome.cpu_s`` reports what the watching cost (``benchmarks/bench_harness.py``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from dlperf.core.orphans import kill_tree

FIRST_POLL_S = 0.02  # short steps start fast: poll often at first...
MAX_POLL_S = 0.25  # ...then back off to this
TREE_EVERY_S = 1.0  # how often to look for new descendants

#: (reason, message) of a failure the watch decided on
Failure = tuple[str, str]


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _rss(pid: int) -> tuple[int, int]:
    """(resident now, the process's resident high-water mark) in bytes; (0, 0) when gone."""
    now = hwm = 0
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:  # VmHWM comes just before VmRSS: read no further
                if line.startswith(b"VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
                elif line.startswith(b"VmRSS:"):
                    now = int(line.split()[1]) * 1024
                    break
    except (OSError, IndexError, ValueError):
        pass
    return now, hwm


def tree_resident(pids: set[int]) -> int:
    """The tree's resident memory as a limit sees it: the sum over its processes now, or
    one process's own peak when that was higher (a step's transient peak that came and
    went between two reads; the sum of peaks would overstate processes that peaked apart)."""
    reads = [_rss(p) for p in pids]
    return max(sum(now for now, _ in reads), max((hwm for _, hwm in reads), default=0))


def _descendants(pid: int) -> set[int]:
    try:
        return {pid, *(p.pid for p in psutil.Process(pid).children(recursive=True))}
    except psutil.Error:
        return {pid}


class ProgressReader:
    """Complete JSON lines appended to a file since the last read (a half-written last
    line waits for the next read)."""

    def __init__(self, path: Path):
        self.path = path
        self._offset = 0

    def read(self) -> list[dict]:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return []
        end = chunk.rfind(b"\n") + 1
        self._offset += end
        events = []
        for line in chunk[:end].splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut off by a kill
        return events


@dataclass
class Outcome:
    failure: Failure | None
    returncode: int
    peak_rss: int = 0
    cpu_s: float = 0.0  # the driver's CPU time while watching
    wall_s: float = 0.0
    pids: set[int] = field(default_factory=set)


def watch(
    popen: subprocess.Popen,
    *,
    timeout_s: float | None = None,
    memory_limit_bytes: int | None = None,
    check: Callable[[], Failure | None] | None = None,
    before_kill: Callable[[set[int]], None] | None = None,
    what: str = "",
) -> Outcome:
    """Wait for ``popen`` (started with ``start_new_session=True``) within the limits.

    ``check`` runs on every wake-up (progress forwarding, a stall detector) and may return
    a failure; ``before_kill`` runs before a kill the watch decided on (e.g. to ask for
    stack dumps). Interrupted (Ctrl-C, SIGTERM turned into KeyboardInterrupt), it kills
    the tree and re-raises. ``what`` qualifies the memory message ("over all workers").
    """
    started, cpu0 = time.monotonic(), time.process_time()
    pids = _descendants(popen.pid)
    next_tree = started + TREE_EVERY_S
    poll, peak, failure = FIRST_POLL_S, 0, None
    try:
        while True:
            try:
                popen.wait(timeout=poll)
                break
            except subprocess.TimeoutExpired:
                pass
            poll = min(MAX_POLL_S, poll * 1.5)
            now = time.monotonic()
            if now >= next_tree:
                pids |= _descendants(popen.pid)
                next_tree = now + TREE_EVERY_S
            rss = tree_resident(pids)
            peak = max(peak, rss)
            failure = check() if check else None
            if failure is None and memory_limit_bytes and rss > memory_limit_bytes:
                failure = ("oom", f"exceeded --memory-limit {gib(memory_limit_bytes)} "
                                  f"(resident {gib(rss)}{what})")
            elif failure is None and timeout_s and now - started > timeout_s:
                failure = ("timeout", f"exceeded --timeout {timeout_s:g} s")
            if failure:
                if before_kill:
                    before_kill(pids)
                kill_tree(popen, pids | _descendants(popen.pid))
                break
    except BaseException:
        kill_tree(popen, pids | _descendants(popen.pid))
        raise
    return Outcome(failure, popen.returncode, peak, time.process_time() - cpu0,
                   time.monotonic() - started, pids)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"worker killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"worker killed by signal {-code}"
    return f"worker exited with status {code} without a result"


def last_meaningful_line(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line and not line.startswith(("WARNING", "I0000", "W0000")):
            return line[:300]
    return ""


def oom_kills() -> int | None:
    """How many processes the kernel's OOM killer has killed in this cgroup so far, or None
    where that is not readable: the ``oom_kill`` counter of cgroup v2 ``memory.events`` or
    of cgroup v1 ``memory.oom_control`` (Linux Documentation/admin-guide/cgroup-v2.rst and
    cgroup-v1/memory.rst). A SIGKILL is an out-of-memory kill only when it rose."""
    files = []
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                files.append(Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events")
            elif "memory" in controllers.split(","):
                files.append(Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.oom_control")
    except (OSError, ValueError):
        pass
    files += [Path("/sys/fs/cgroup/memory.events"), Path("/sys/fs/cgroup/memory/memory.oom_control")]
    for f in files:
        try:
            for line in f.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None
