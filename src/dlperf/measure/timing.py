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
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dlperf.spec import Measurement


@dataclass
class Timing:
    warmup_s: list[float] = field(default_factory=list)
    steps_s: list[float] = field(default_factory=list)
    settled: bool = False
    cpu_s: float = 0.0  # process CPU time during the timed steps
    wall_s: float = 0.0  # wall time of the timed steps

    @property
    def cpu_util(self) -> float:
        """CPU time / wall time over the timed steps: the cores really kept busy."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


def _timed(step: Callable[[], object], sync: Callable[[], None]) -> float:
    t0 = time.perf_counter_ns()
    step()
    sync()
    return (time.perf_counter_ns() - t0) * 1e-9


def measure(
    step: Callable[[], object],
    sync: Callable[[], None],
    m: Measurement,
    on_step: Callable[[str, float], None] | None = None,
) -> Timing:
    """Warm up, then time. ``on_step(phase, seconds)`` is called after every step so a
    parent can keep partial results if this process is killed."""
    notify = on_step or (lambda phase, s: None)
    times: list[float] = []
    cpu: list[float] = []

    def one(phase: str) -> None:
        c0 = time.process_time()
        times.append(_timed(step, sync))
        cpu.append(time.process_time() - c0)
        notify(phase, times[-1])

    start, settled = None, False
    w_start = time.perf_counter()
    while start is None:
        one("warmup")
        n = len(times)
        if n > m.warmup_min_steps:
            a, b = times[-2], times[-1]
            if n - 2 >= m.warmup_min_steps and abs(a - b) <= m.settle_tolerance * min(a, b):
                start, settled = n, True  # the settling pair stays in the warm-up
            elif n >= m.warmup_max_steps or time.perf_counter() - w_start >= m.warmup_max_time_s:
                start = n  # budget spent: time from here on, flagged as not settled

    # Calibrate the number of timed steps from the steady step time.
    est = min(times[-2:])
    n_steps = max(m.min_steps, math.ceil(m.min_time_s / est) if est > 0 else m.min_steps)
    n_steps = min(n_steps, m.max_steps)
    while len(times) - start < n_steps:
        one("step")
    t = Timing(warmup_s=times[:start], steps_s=times[start:], settled=settled)
    t.cpu_s = sum(cpu[start:])
    t.wall_s = sum(t.steps_s)
    return t
