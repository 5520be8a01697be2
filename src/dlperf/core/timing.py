"""Warm-up until step times settle, then time steps one by one with a monotonic clock.

The first ``warmup_min_steps`` steps (allocation, kernel selection, compilation) are always
discarded. After them, the steady state is reached at the first pair of consecutive steps
that agree within ``settle_tolerance`` (the steady-state method of Georges, Buytaert and
Eeckhout, "Statistically rigorous Java performance evaluation", OOPSLA 2007). The timed
sample starts after that pair, never with it: the pair was chosen because its two times
agree, so in a short sample (``reproduce --quick`` times 2 steps) it would be most of the
sample, its spread biased low and the instability warning unable to fire. If no pair
agrees within the warm-up budget, the timed sample starts after the budget and the result
says it did not settle. The sample runs to at least ``min_steps`` steps and ``min_time_s``
seconds. Every step is followed by a device sync, so a step's time is the time until its
work is done.
"""

from __future__ import annotations

import math
import os
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dlperf.core import disturbance
from dlperf.core.spec import Measurement


@dataclass
class Timing:
    warmup_s: list[float] = field(default_factory=list)
    steps_s: list[float] = field(default_factory=list)
    settled: bool = False
    cpu_s: float = 0.0  # process CPU time during the timed steps
    wall_s: float = 0.0  # wall time of the timed steps
    #: minor page faults and the kernel's CPU time (``getrusage``, the whole process)
    #: during the timed steps: the new pages its steps touch (``Metrics``)
    minor_faults: int = 0
    system_s: float = 0.0
    #: what other processes took of this process's CPUs while it was timed (None: the
    #: window was too short to tell, or no /proc/stat)
    disturbance: disturbance.Disturbance | None = None

    @property
    def cpu_util(self) -> float:
        """CPU time / wall time over the timed steps: the cores really kept busy."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def minor_faults_per_step(self) -> float:
        return self.minor_faults / len(self.steps_s) if self.steps_s else 0.0

    @property
    def system_s_per_step(self) -> float:
        return self.system_s / len(self.steps_s) if self.steps_s else 0.0


#: A test hook, off by default: with DLPERF_INJECT_SLOWDOWN=0.1 every timed step is made
#: 10% slower (a busy wait after its work, inside its time), so that a benchmark can check
#: that ``dlperf compare`` finds a known slowdown (benchmarks/bench_compare.py). A result
#: measured with it carries a warning saying so (``injection_warning``).
INJECT_VAR = "DLPERF_INJECT_SLOWDOWN"


def injected_slowdown() -> float:
    try:
        return max(0.0, float(os.environ.get(INJECT_VAR) or 0))
    except ValueError:
        return 0.0


def injection_warning() -> str | None:
    f = injected_slowdown()
    return (f"injected slowdown: every step made {f:.0%} slower on purpose ({INJECT_VAR}, a "
            "test hook)") if f else None


def _timed(step: Callable[[], object], sync: Callable[[], None]) -> float:
    t0 = time.perf_counter_ns()
    step()
    sync()
    return (time.perf_counter_ns() - t0) * 1e-9


def _spin(seconds: float) -> float:
    """Busy-wait ``seconds`` (the injected slowdown); returns the time it took."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pass
    return time.perf_counter() - t0


@dataclass
class _Steps:
    """Steps run one at a time, each step's wall time and process CPU time kept; a step's
    time is the wall clock's or, given, ``clock``'s (read after the sync)."""

    step: Callable[[], object]
    sync: Callable[[], None]
    clock: Callable[[], float] | None
    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    faults: list[int] = field(default_factory=list)
    system: list[float] = field(default_factory=list)
    slow: float = field(default_factory=injected_slowdown)

    def run(self) -> float:
        c0, r0 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
        t = _timed(self.step, self.sync)
        if self.slow:
            t += _spin(t * self.slow)
        self.wall.append(t)
        if self.clock is not None:
            t = self.clock()
        self.cpu.append(time.process_time() - c0)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        self.faults.append(r1.ru_minflt - r0.ru_minflt)
        self.system.append(r1.ru_stime - r0.ru_stime)
        return t

    def timing(self, start: int, **kw) -> Timing:
        """The steps from ``start`` on as the timed sample: their CPU, wall and kernel
        time and their faults."""
        return Timing(cpu_s=sum(self.cpu[start:]), wall_s=sum(self.wall[start:]),
                      minor_faults=sum(self.faults[start:]), system_s=sum(self.system[start:]),
                      **kw)


class WarmUp:
    """The warm-up rule one step at a time: ``add`` each warm-up step's time until it says
    the warm-up is over, then ``timed_steps`` is the calibrated length of the sample. The
    isolated worker's ``measure`` and every rank of a parallel run (rank 0 decides and
    tells the others) follow this one rule."""

    def __init__(self, m: Measurement):
        self.m = m
        self.times: list[float] = []
        self.settled = False
        self._start = time.perf_counter()

    def add(self, seconds: float) -> bool:
        """Record a warm-up step; True when the warm-up is over (settled, or its budget
        spent: then ``settled`` stays False)."""
        m, times = self.m, self.times
        times.append(seconds)
        n = len(times)
        if n <= m.warmup_min_steps:
            return False
        a, b = times[-2], times[-1]
        if n - 2 >= m.warmup_min_steps and abs(a - b) <= m.settle_tolerance * min(a, b):
            self.settled = True  # the settling pair stays in the warm-up
            return True
        return n >= m.warmup_max_steps or time.perf_counter() - self._start >= m.warmup_max_time_s

    @property
    def estimate_s(self) -> float:
        """The steady step time: the faster of the last two warm-up steps."""
        return min(self.times[-2:]) if self.times else 0.0

    def timed_steps(self, estimate_s: float | None = None) -> int:
        """Steps to time: enough for ``min_time_s`` at the steady step time (or at
        ``estimate_s``), within ``min_steps`` .. ``max_steps``."""
        m = self.m
        est = self.estimate_s if estimate_s is None else estimate_s
        n = max(m.min_steps, math.ceil(m.min_time_s / est) if est > 0 else m.min_steps)
        return min(n, m.max_steps)


def measure(
    step: Callable[[], object],
    sync: Callable[[], None],
    m: Measurement,
    on_step: Callable[[str, float], None] | None = None,
    clock: Callable[[], float] | None = None,
    warmed: Sequence[float] = (),
) -> Timing:
    """Warm up, then time. ``on_step(phase, seconds)`` is called after every step so a
    parent can keep partial results if this process is killed. ``clock``, when given, is
    read after each step's sync and is that step's time instead of the wall clock's (a
    GPU's own timer of the device's work: ``calibrate.worker.Queued``); the sample's
    length in ``min_time_s`` stays wall time. ``warmed``: the times of warm-up steps
    already run (``measure_window``'s, for steps too short for a window)."""
    notify = on_step or (lambda phase, s: None)
    warm = WarmUp(m)
    over = any(warm.add(s) for s in warmed)  # stops at the step that ends the warm-up
    steps = _Steps(step, sync, clock)

    def one(phase: str) -> float:
        t = steps.run()
        notify(phase, t)
        return t

    while not over:
        over = warm.add(one("warmup"))
    start = len(steps.cpu)
    before = disturbance.read()
    timed = [one("step") for _ in range(warm.timed_steps(min(steps.wall[-2:], default=None)))]
    return steps.timing(start, warmup_s=list(warm.times), settled=warm.settled, steps_s=timed,
                        disturbance=disturbance.between(before, disturbance.read()))


def measure_window(
    step: Callable[[], object],
    sync: Callable[[], None],
    m: Measurement,
    clock: Callable[[], float] | None = None,
    discard: int | None = None,
) -> Timing:
    """Georges, Buytaert and Eeckhout's steady-state rule as they give it (OOPSLA 2007,
    sec. 4.2: the first window of k iterations whose variation falls below a threshold),
    for steps long enough that ``min_steps`` of them fill ``min_time_s``: after the
    ``discard`` steps (default ``warmup_min_steps``), the sample is the first
    ``min_steps`` consecutive steps whose times agree within ``settle_tolerance`` (the
    slowest at most that much above the fastest); the steps before it are its warm-up.
    ``measure`` finds a settling pair and times the sample after it, two steps more for
    the same evidence: a calibration grid of hundreds of shapes, each a few calls long,
    spends a third of its time on them. A window agrees only where all its steps do, so
    it waits out a slow step that a pair could have missed. If none agrees within
    ``warmup_max_steps + min_steps`` steps or ``warmup_max_time_s`` of warm-up, the last
    ``min_steps`` are the sample, not settled. Shorter steps go on by ``measure``'s rule
    (their sample is many steps, not a window). ``discard=0``: the step was warmed up by
    an earlier measurement in this process."""
    skip = m.warmup_min_steps if discard is None else discard
    k = m.min_steps
    steps = _Steps(step, sync, clock)
    times: list[float] = []
    start = time.perf_counter()
    before = disturbance.read()  # over the whole search: the window is its end
    while True:
        times.append(steps.run())
        n = len(times)
        if n <= skip:
            continue
        if n == skip + 1 and steps.wall[-1] * k < m.min_time_s:
            return measure(step, sync, m, clock=clock, warmed=times)
        last = times[-k:]
        window_wall = sum(steps.wall[-k:])
        agree = n - k >= skip and max(last) <= (1 + m.settle_tolerance) * min(last)
        spent = n >= m.warmup_max_steps + k or (
            n - k >= skip and time.perf_counter() - start - window_wall >= m.warmup_max_time_s)
        if agree or spent:
            return steps.timing(n - k, warmup_s=times[:-k], steps_s=last, settled=agree,
                                disturbance=disturbance.between(before, disturbance.read()))
