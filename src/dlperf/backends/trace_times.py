"""Self times from a profiler's trace: the events of one thread, each nested event's time
taken off the event that holds it (a loop body's ops inside the loop, an op inside its
executor), so that every op has its own time and nothing is counted twice; and the
profiled steps' own timing. Shared by the profilers of ``dlperf explain``; imports no
framework."""

from __future__ import annotations

import glob
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

from dlperf.backends.base import Trainer

#: (op name, operand shapes, FLOPs per call or None) of a traced op, as ProfiledOp has them
Described = tuple[str, tuple[tuple[int, ...], ...], float | None]


def self_times(events: list[tuple[str, int, int]]) -> dict[str, tuple[int, float]]:
    """Per instruction name: (calls, self time in s) from one thread's (name, start, end)
    events, each nested event's time taken off the event that holds it."""
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    stack: list[list] = []  # [name, end, own ns]
    for name, start, end in sorted(events, key=lambda e: (e[1], -e[2])):
        while stack and start >= stack[-1][1]:
            done = stack.pop()
            out[done[0]][1] += done[2] * 1e-9
        if stack:
            stack[-1][2] -= end - start
        stack.append([name, end, end - start])
        out[name][0] += 1
    for done in stack:
        out[done[0]][1] += done[2] * 1e-9
    return {k: (int(c), t) for k, (c, t) in out.items()}


def op_groups(lines: Iterable[list[tuple[str, int, int]]], describe: Callable[[str], Described],
              steps: int) -> list[dict]:
    """``kinds.profile.ProfiledOp`` fields per op group (op and operand shapes), per step,
    from the trace's lines of (name, start ns, end ns) events; ``describe`` names an
    event's op and gives its shapes and FLOPs."""
    groups: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for events in lines:
        for name, (calls, s) in self_times(events).items():
            op, shapes, flops = describe(name)
            g = groups[(op, shapes)]
            g[0] += calls / steps
            g[1] += s / steps
            g[2] += (flops or 0.0) * calls / steps
    return [{"name": op, "shapes": shapes, "calls": c, "time_s": s, "flops": f or None}
            for (op, shapes), (c, s, f) in groups.items() if s > 0]


def mean_step_s(trainer: Trainer, steps: int) -> float:
    """Run ``steps`` steps of ``trainer`` and wait for the last: the mean wall time of one
    (the profiled steps, timed while the profiler records them)."""
    t0 = time.perf_counter()
    for _ in range(steps):
        trainer.step()
    trainer.sync()
    return (time.perf_counter() - t0) / steps


def xplane_file(folder: str) -> str:
    """The one XSpace file a profiler trace wrote under ``folder`` (JAX's and
    TensorFlow's profilers both write one)."""
    (path,) = glob.glob(f"{folder}/**/*.xplane.pb", recursive=True)
    return path
