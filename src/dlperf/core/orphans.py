"""No process outlives the command that started it.

Two mechanisms, because each covers what the other cannot:

- The kernel's parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, Linux
  ``prctl(2)``): a child armed with it is killed the moment its parent dies, even by
  SIGKILL, when no Python code of the parent runs any more. Every process dlperf starts
  (a worker, torchrun, each torchrun worker) arms itself first thing, so a kill of
  ``dlperf sweep`` takes the whole chain down.
- A process-tree kill by the driver (``kill_tree``) for every exit it does see: Ctrl-C,
  SIGTERM, a timeout, a memory limit.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Iterable
from typing import NoReturn

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
#: the driver's pid, handed to its children so they can tell that it died before they armed
PARENT_ENV = "DLPERF_PARENT_PID"


def die_with_parent(expected_parent: int | None = None) -> bool:
    """Arm the parent-death signal for this process; returns False where the platform has
    none. If the parent is already gone (we were re-parented before arming), exit now."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if (expected_parent is not None and os.getppid() != expected_parent) or os.getppid() == 1:
        os._exit(1)  # orphaned between fork and here: the parent-death signal came too early
    return True


def parent_from_env() -> int | None:
    """The parent pid the launcher recorded in the child's environment (``child_env``)."""
    value = os.environ.get(PARENT_ENV, "")
    return int(value) if value.isdigit() else None


def child_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` plus this process's pid as the parent the child must outlive no longer."""
    return {**env, PARENT_ENV: str(os.getpid())}


def kill_tree(popen: subprocess.Popen, known: Iterable[int] = ()) -> None:
    """SIGKILL the child's process group, every pid seen in its tree (torchrun puts each
    worker in a session of its own, beyond the group's reach), and reap the child."""
    for pid in set(known) - {os.getpid()}:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(popen.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    popen.wait()


def exit_without_teardown(code: int) -> NoReturn:
    """Leave a worker whose results are written and closed at once: the interpreter's
    teardown of the framework and its threads takes about a second per worker and
    measures nothing."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
