"""How much of the CPUs a measurement ran on other processes took while it ran.

A measurement pinned to CPUs P is disturbed when something else runs there: another
user's job, a busy loop, the hypervisor (steal time). The kernel counts each CPU's busy
time in /proc/stat (user, nice, system, irq, softirq; steal apart: the time a virtual
CPU waited for its physical one, proc(5)); the process's own CPU time (all its threads,
user and system) is part of it. What the pinned CPUs spent beyond the process's own time
is other processes' work:

    other share = (busy time of P - own CPU time) / (wall time x |P|)
    steal share = steal time of P / (wall time x |P|)

The counters tick at USER_HZ (100 per second here), so a window shorter than
``MIN_WINDOW_S`` says nothing (None). Linux only; elsewhere None.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

#: a measurement whose CPUs others kept busy this share of the time is disturbed
DISTURBED = 0.10
#: below this wall time, the counters' ticks (10 ms) are too coarse to tell
MIN_WINDOW_S = 0.2
_STAT = Path("/proc/stat")
_BUSY = (0, 1, 2, 5, 6)  # user nice system irq softirq (guest time is inside user)
_STEAL = 7


@dataclass(frozen=True)
class Reading:
    busy_s: float
    steal_s: float
    own_s: float
    at: float
    cpus: tuple[int, ...]


@dataclass(frozen=True)
class Disturbance:
    other_share: float  # of the pinned CPUs' time, used by other processes
    steal_share: float  # of the pinned CPUs' time, taken by the hypervisor
    cpus: int
    seconds: float

    @property
    def disturbed(self) -> bool:
        return self.other_share + self.steal_share > DISTURBED

    def describe(self) -> str:
        steal = f", steal {self.steal_share:.0%}" if self.steal_share >= 0.01 else ""
        return (f"other processes used {self.other_share:.0%} of the {self.cpus} CPU"
                f"{'s' if self.cpus != 1 else ''} it ran on{steal}")


def _ticks(cpus: tuple[int, ...]) -> tuple[float, float] | None:
    try:
        lines = _STAT.read_text().splitlines()
    except OSError:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    busy = steal = 0
    wanted = {f"cpu{c}" for c in cpus}
    for line in lines:
        name, _, rest = line.partition(" ")
        if name in wanted:
            f = [int(x) for x in rest.split()]
            busy += sum(f[i] for i in _BUSY if i < len(f))
            steal += f[_STEAL] if len(f) > _STEAL else 0
    return busy / hz, steal / hz


def read(cpus: tuple[int, ...] | None = None) -> Reading | None:
    """The counters now, for ``cpus`` (default: the CPUs this process may run on)."""
    cpus = tuple(sorted(cpus if cpus is not None else os.sched_getaffinity(0)))
    got = _ticks(cpus)
    if got is None:
        return None
    t = os.times()
    return Reading(got[0], got[1], t.user + t.system, time.monotonic(), cpus)


def between(a: Reading | None, b: Reading | None) -> Disturbance | None:
    """What other processes took of the CPUs from reading ``a`` to ``b``."""
    if a is None or b is None:
        return None
    wall = b.at - a.at
    if wall < MIN_WINDOW_S:
        return None
    capacity = wall * len(a.cpus)
    other = max(0.0, (b.busy_s - a.busy_s) - (b.own_s - a.own_s)) / capacity
    steal = max(0.0, b.steal_s - a.steal_s) / capacity
    return Disturbance(min(other, 1.0), min(steal, 1.0), len(a.cpus), wall)
