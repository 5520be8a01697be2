"""Warm-up until step times settle, then time steps one by one with a monotonic clock.

As pyperf does: the first steps (allocation, autotuning, compilation) are not trusted;
warm-up ends when two consecutive steps agree within ``settle_tolerance``, or when the
warm-up budget runs out (then the result says it did not settle). The timed phase runs
at least ``min_steps`` and at least ``min_time_s`` of steps. Every step is followed by a
device sync, so a step's time is the time until its work is done.
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
    t = Timing()
    notify = on_step or (lambda phase, s: None)
    w_start = time.perf_counter()
    while True:
        s = _timed(step, sync)
        t.warmup_s.append(s)
        notify("warmup", s)
        n = len(t.warmup_s)
        if n >= max(2, m.warmup_min_steps):
            a, b = t.warmup_s[-2], t.warmup_s[-1]
            if abs(a - b) <= m.settle_tolerance * min(a, b):
                t.settled = True
                break
        if n >= m.warmup_max_steps or time.perf_counter() - w_start >= m.warmup_max_time_s:
            break

    # Calibrate the number of timed steps from the settled step time.
    est = min(t.warmup_s[-2:])
    n_steps = max(m.min_steps, math.ceil(m.min_time_s / est) if est > 0 else m.min_steps)
    n_steps = min(n_steps, m.max_steps)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(n_steps):
        s = _timed(step, sync)
        t.steps_s.append(s)
        notify("step", s)
    t.cpu_s = time.process_time() - cpu0
    t.wall_s = time.perf_counter() - wall0
    return t
