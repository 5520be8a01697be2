"""One measurement at a time on this machine.

Two sweeps (two shells, two users, two stores) that time workers on the same cores at
once make both numbers wrong. Every launch takes an exclusive ``flock`` on one file per
machine before it starts its workers and drops it when they are gone; a second dlperf
waits for it, saying who holds it. The kernel releases the lock when its holder dies, so a
killed sweep never leaves it behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

POLL_S = 0.5


def lock_path() -> Path:
    """$DLPERF_CPU_LOCK, else one file per machine in the temporary directory. A '%n' in
    it is the Slurm node's name (``SLURMD_NODENAME``, else the host's): a lock per node
    where several nodes of a test cluster share one machine."""
    path = os.environ.get("DLPERF_CPU_LOCK") or "/tmp/dlperf-cpus.lock"
    if "%n" in path:
        path = path.replace("%n", os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    return Path(path)


def holder(path: Path | None = None) -> str:
    try:
        return (path or lock_path()).read_text().strip()
    except OSError:
        return ""


@contextlib.contextmanager
def cpus_held(label: str, on_wait: Callable[[str], None] | None = None,
              wait_s: float | None = None) -> Iterator[None]:
    """Hold the machine's measurement lock for the body. ``on_wait(holder)`` is called once
    if another process holds it; after ``wait_s`` seconds of waiting, TimeoutError."""
    path = lock_path()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)  # one lock for every user of the machine
        waited, t0 = False, time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited and on_wait:
                    on_wait(holder(path) or "another process")
                waited = True
                if wait_s is not None and time.monotonic() - t0 > wait_s:
                    raise TimeoutError(f"the CPUs are busy: {holder(path)}") from None
                time.sleep(POLL_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"dlperf pid {os.getpid()}: {label}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing drops the lock
