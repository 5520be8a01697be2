"""Whether a calibration sample was timed on a steady machine, read from its own calls.

A virtual machine slows down in spells of seconds to a minute that nothing inside it
sees: no other process, no steal time (``core.speed_probe``). A kernel timed during
one keeps its threads busy and still takes longer, and unevenly: its calls spread. On a
2-vCPU AMD EPYC one TensorFlow calibration at one thread timed its memory passes while
such a spell lasted: their median calls took 1.3-1.6 times their fastest, the memory
curve came out up to 1.6 times slower than in three other calibrations of the machine,
and TensorFlow's convolution networks were predicted 10-15% slower than from those.
"Undisturbed", said the machine's counters.

The spread of a sample: its median call over its fastest tenth (the fastest call of a
sample of three). A kernel that kept its threads busy (``BUSY``) and spread by more
than ``UNSTEADY`` ran while the machine's speed moved under it. One that kept them
idle part of the time spreads of its own accord (XLA runs a small op on fewer threads
than it has, more or fewer from one call to the next) and says nothing about the
machine. Over 25 calibration workers of that machine (three whole-grid calibrations and
four of TensorFlow at two threads), no op had more than 16% of its samples unsteady by
this rule, except in the spell's worker: its memory passes 53%, its updates 27%.
"""

from __future__ import annotations

from collections.abc import Iterable

from dlperf.perfmodel.kernels import KernelSample

#: the share of its threads a kernel must keep busy to count as running flat out
BUSY = 0.85
#: a busy sample whose median call took this much longer than its fastest tenth
UNSTEADY = 1.25
#: an op with more than this share of its samples unsteady was calibrated unsteadily
UNSTEADY_OP = 0.25
#: the fewest samples of an op that its share is read from
UNSTEADY_OP_SAMPLES = 4


def spread(s: KernelSample) -> float:
    """The sample's median call over its fastest tenth (of two calls, their mean over the
    faster); 1.0 for one call. A long kernel's sample is a window of two calls
    (``core.timing.measure_window``): two that agree within its tolerance, or, where none
    did within the warm-up's budget, the last two, however far apart. In a main job on a
    2-vCPU AMD EPYC (2026-12-02) PyTorch's 256 MiB memory pass at one thread was two calls
    of 1237 and 179 ms, its threads busy; the fresh pages' cost read off it made FCN-5's
    step 92% too slow, and the calibration said "undisturbed". Over 2,997 two-call samples
    in seven stores of that machine, 9 spread by more than ``UNSTEADY`` with their threads
    busy, all by 1.5 to 6.9 times: timed again, they cost seconds."""
    times = sorted(s.times_s)
    if len(times) < 2:
        return 1.0
    return s.median_s / times[int(0.1 * (len(times) - 1))]


def unsteady(s: KernelSample, threads: int) -> bool:
    """Whether ``s`` was timed while the machine's speed moved (module docstring)."""
    return (s.cpu_util is not None and s.cpu_util >= BUSY * threads
            and spread(s) > UNSTEADY)


def unsteady_share(samples: Iterable[KernelSample], threads: int) -> dict[str, float]:
    """Per op with at least ``UNSTEADY_OP_SAMPLES`` samples, the share of them unsteady."""
    by: dict[str, list[bool]] = {}
    for s in samples:
        by.setdefault(s.op, []).append(unsteady(s, threads))
    return {op: sum(v) / len(v) for op, v in by.items() if len(v) >= UNSTEADY_OP_SAMPLES}
