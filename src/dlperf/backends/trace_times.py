"""Self times from a profiler's trace: the events of one thread, each nested event's time
taken off the event that holds it (a loop body's ops inside the loop, an op inside its
executor), so that every op has its own time and nothing is counted twice. Shared by the
JAX and TensorFlow profilers of ``dlperf explain``; imports no framework."""

from __future__ import annotations

from collections import defaultdict


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
