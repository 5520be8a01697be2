"""How fast this machine is right now: a fixed, framework-free probe timed beside each
calibration, each measured step and each parallel run, so that a prediction compared with
a measurement can say whether the machine itself changed speed in between.

A virtual machine's speed moves with what the host's other tenants do (their memory
traffic, the host's clock changes) without any sign inside it: no steal time, no other
process. On a 2-vCPU VM the same PyTorch calibration gave 192, 169 and 127 GFLOP/s for
one GEMM within a day, each "undisturbed" by ``core.disturbance``. A prediction from the
first compared with a step measured during the last is off by a third, and neither the
model nor the measurement is wrong. The probe times two things that move with it, each
as a low quantile of many short timings (``_QUANTILE``; interference only slows a call
down, ``timeit``'s reasoning, and each call is shorter than a scheduler's time slice, so
another process on the same CPU leaves most of them alone):

- ``compute``: a 256x256 fp64 matrix product in numpy's BLAS on one thread (in cache:
  the core's arithmetic speed and clock);
- ``memory``: a 64 MiB copy, 4 MiB at a time, into a buffer already mapped (the bandwidth
  a memory-bound layer gets).

About 0.15 s in all. ``drift`` compares two probes: the larger relative change of the
two. Ten probes in fresh processes within a minute on that VM spread by +-3% to +-5%
(up to +-10% in a noisy hour), so ``DRIFT`` is three times the usual spread. Not
probed: the cost of fresh pages, though it moved most on that VM (docs/measurement.md).
Timed as a copy into a new mapping, it differed by 6-28% between kernel workers and step
workers at one moment (a process that has just freed memory gets pages the host holds
ready), so as such it does not compare across processes.
It imports numpy and threadpoolctl only (dependencies of dlperf itself).

The speed moves within a minute, so one probe reads only the moment around it. Measured on
a 2-vCPU Intel Xeon VM (``benchmarks/bench_speed_probe.py``, two runs of 6 minutes: one
process on one CPU, the probe and three PyTorch kernels in turn, about 400 rounds of 0.9
s): the kernels' times spread by 1.6x and 2.4x between their 10th and 90th percentiles,
in spells of seconds to a minute; in the first run the probe's compute part correlated
with the kernels of its own round at +0.72. Set against the kernels' mean speed
over 30 to 50 rounds (a calibration worker's half minute to minute), the probes at the
two ends read it at +0.45 and +0.31, probes every 4 rounds through it at +0.66 to +0.75
and +0.48. So a long measurement spreads its probes (``Spread``); a step's, seconds long,
is probed right after its timed steps. Larger numpy products (a 1024^2 one, one streaming
a 64 MiB weight) followed the kernels of their round little better (+0.77, +0.81).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence

#: the probe's parts, in the order they are printed
PARTS = ("compute", "memory")
#: a probe that moved by more than this since the calibration's says the machine ran at
#: another speed, and dlperf flags it: about three times the probe's own spread (the
#: steps moved about twice as much as the probe where it was checked)
DRIFT = 0.15
_SIDE = 256
_COPY_ELEMS = 8 * 2**20  # float64: 64 MiB (at 32 MiB the host's cache held it at times)
_CHUNKS = 16  # 4 MiB each: about 0.5 ms, well inside a scheduler's time slice
_REPEATS = {"compute": 60, "memory": 4}
#: the share of the timings taken: a low one, as the best of several calls is (another
#: process only ever slows a call down), but not the best, which follows the core's
#: briefest fast spells (a best of 40 products moved by 10% between processes here)
_QUANTILE = 0.25


def _low(times: list[float]) -> float:
    """The ``_QUANTILE`` of ``times``."""
    times = sorted(times)
    return times[int(_QUANTILE * (len(times) - 1))]


def _timed(call: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return _low(times)


def _chunked(src, dst, repeats: int) -> float:
    """Seconds to copy all of ``src`` into ``dst``, timed chunk by chunk and taken at
    ``_QUANTILE`` of the chunks: a whole pass (10 ms here) is longer than a time slice, so
    on a CPU shared with another process no pass would be undisturbed, while most chunks
    are."""
    import numpy as np

    times = []
    for _ in range(repeats):
        for a, b in zip(np.array_split(src, _CHUNKS), np.array_split(dst, _CHUNKS),
                        strict=True):
            t = time.perf_counter()
            np.copyto(b, a)
            times.append(time.perf_counter() - t)
    return _low(times) * _CHUNKS


#: bytes the probe maps while it runs: the copy's source and destination
BYTES = 2 * _COPY_ELEMS * 8


def fits_under_limit(memory_limit: int | None, resident: int, peak: int) -> bool:
    """Whether a process measured under ``memory_limit`` (``--memory-limit``; None: none)
    may run the probe, ``resident`` bytes now, ``peak`` its measured peak: its buffers
    (``BYTES``) count against the limit like the run's own memory, so under one it runs
    only where they keep the process within the peak it measured (a run that fit must
    not be called out of memory for dlperf's probe)."""
    return memory_limit is None or resident + BYTES <= peak


def after_steps(memory_limit: int | None, peak: int) -> dict[str, float] | None:
    """The probe in a process that has just timed its steps and read its peak memory
    (``peak``): under ``memory_limit`` only where its buffers keep the process within that
    peak (``fits_under_limit``), else None."""
    from dlperf.core import environment

    if not fits_under_limit(memory_limit, environment.resident_bytes(), peak):
        return None
    return measure()


def measure() -> dict[str, float]:
    """Seconds of each part of the probe (``PARTS``), on one thread, in this process.
    Empty where numpy or threadpoolctl is missing."""
    try:
        import numpy as np
        from threadpoolctl import threadpool_limits
    except ImportError:
        return {}
    a = np.random.default_rng(0).random((_SIDE, _SIDE))
    with threadpool_limits(1):
        compute = _timed(lambda: a @ a, _REPEATS["compute"])
    src = np.ones(_COPY_ELEMS)
    kept = np.empty_like(src)
    kept.fill(0.0)  # its pages mapped before timing
    return {"compute": compute, "memory": _chunked(src, kept, _REPEATS["memory"])}


#: seconds between a long measurement's probes (``Spread``): about the length of the
#: machine's speed spells (module docstring), at 0.15 s a probe 3% of the time
EVERY_S = 5.0


class Spread:
    """Probes spread through a long measurement: one at its start, one after any of its
    parts that ends ``every_s`` or more after the last probe, and one at its end (unless a
    probe followed its last part already). ``finish`` gives their median, part by part:
    the speed the whole measurement ran at (module docstring)."""

    def __init__(self, every_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.every_s = EVERY_S if every_s is None else every_s
        self._clock = clock
        self.probes: list[dict[str, float]] = []
        self._last = clock()
        self._since = False  # a part ended since the last probe

    def probe(self) -> None:
        self.probes.append(measure())
        self._last, self._since = self._clock(), False

    def after_part(self) -> None:
        """A part of the measurement ended: probe if the last probe is ``every_s`` old."""
        if self._clock() - self._last >= self.every_s:
            self.probe()
        else:
            self._since = True

    def finish(self) -> dict[str, float]:
        if self._since or not self.probes:
            self.probe()
        return typical(self.probes)


def typical(probes: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The median of several probes, part by part (a calibration made of several workers)."""
    got = {part: [p[part] for p in probes if part in p] for part in PARTS}
    return {part: statistics.median(v) for part, v in got.items() if v}


def ratios(now: Mapping[str, float] | None, then: Mapping[str, float] | None
           ) -> dict[str, float]:
    """Per part both probed, its time ``now`` over ``then`` (1.2: 20% slower now)."""
    return {part: now[part] / then[part] for part in PARTS
            if now and then and now.get(part) and then.get(part)}


def drift(now: Mapping[str, float] | None, then: Mapping[str, float] | None
          ) -> tuple[str, float] | None:
    """The part whose time moved most from ``then`` to ``now``, and by how much (+0.2:
    20% slower now); None where the two share no part."""
    return largest_move(ratios(now, then))


def largest_move(ratio: Mapping[str, float]) -> tuple[str, float] | None:
    """The part of ``ratios``' result that moved most, and by how much; None if empty."""
    moves = [(part, r - 1) for part, r in ratio.items()]
    return max(moves, key=lambda m: abs(m[1])) if moves else None


def at_speed(compute_s: float, memory_s: float, rest_s: float,
             ratio: Mapping[str, float]) -> float | None:
    """A predicted time at another machine speed: its compute-bound and per-op terms
    scaled by the ``compute`` part's ratio (both are the core's work), its memory-bound
    passes by the ``memory`` part's, the rest (communication, waiting) as it was. None
    without both ratios. A diagnostic, not the model: the probe follows about half of
    what steps moved on the machine it was checked on (docs/measurement.md)."""
    if not {"compute", "memory"} <= set(ratio):
        return None
    return compute_s * ratio["compute"] + memory_s * ratio["memory"] + rest_s


def describe(move: tuple[str, float], than: str = "at the calibration") -> str:
    """'the speed probe's memory copy took 18% longer than at the calibration'."""
    part, change = move
    what = {"compute": "matrix product", "memory": "memory copy"}.get(part, part)
    way = "longer" if change > 0 else "less"
    return f"the speed probe's {what} took {abs(change):.0%} {way} than {than}"


def cell(move: tuple[str, float] | None) -> str:
    """'+22% memory !' (a move beyond ``DRIFT`` marked '!'); '-' where not probed."""
    if move is None:
        return "-"
    return f"{move[1]:+.0%} {move[0]}" + (" !" if moved(move) else "")


def legend() -> str:
    """What a table's 'speed probe' column (``cell``) says, for its caption."""
    return ("'speed probe': how much longer (+) the machine's speed probe took after the "
            "measured steps than during the calibration, in its part that moved most ('!': "
            f"more than {DRIFT:.0%}, the machine itself running at another speed than "
            "calibrated)")


def moved(move: tuple[str, float] | None) -> bool:
    """Whether ``move`` (``drift``'s) is beyond the probe's own spread (``DRIFT``)."""
    return move is not None and abs(move[1]) > DRIFT
