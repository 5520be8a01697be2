"""Whether a calibration kernel took far longer at more threads than at fewer, at one
shape: the check of a calibration against itself across thread counts.

More threads do not make a kernel of a few milliseconds or more several times slower. A
pass over memory at two threads is held by the memory bandwidth both threads share; a
product or a convolution may take longer of its own accord, where the library picks
another algorithm for the thread count, but reproducibly. Over the 2,076 shapes of 2 ms or
more at one thread timed at one and at two threads in 8 calibration stores of a 2-vCPU
AMD EPYC (2026-11-30 and 12-01):
- the memory-bound ops (memory, update, cross-entropy, batch norm, pool, LSTM; 333
  shapes) took at most 1.25x as long at two threads, but for one memory pass at 3.08x:
  390 ms against 127 ms over 256 MiB, its two threads busy 63% of the time, while the
  machine's counters saw no other process. Timed again minutes later it took 75 ms. The
  fresh pages' cost read off it had made PyTorch's predictions at two threads up to 88%
  too slow (FCN-5), and nothing said so. In the next calibration of that machine the same
  pass took 447 ms (78 ms timed again), and FCN-5's weight gradient 402 ms (97 ms);
- products and convolutions took up to 2.1x as long: PyTorch's 1x1 convolution of 96 to
  384 channels over 9 samples of 48 x 48 1.64-1.90x in five calibrations, JAX's
  convolutions of 3 input channels 1.5-2.1x;
- below 2 ms, waking the second thread costs a share of the call: TensorFlow's passes of
  1 to 1.5 ms took up to 1.52x as long at two threads, and as long again when timed
  again.

So a shape over its op's limit (``limit``) is timed again (``dlperf.api.calibrate``): a
second timing within ``REPRODUCED`` of the first shows the kernel's own behaviour; one
that does not replaces it, and if it still exceeds the limit, the calibration says so.
Past the physical cores, threads share them, and a slower kernel is expected.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dlperf.perfmodel.kernels import KernelSample

#: ops held by memory traffic: more threads share one bandwidth and never take much longer
MEMORY_BOUND = ("memory", "update", "xent", "bn", "pool", "lstm")
#: how much longer a memory-bound op, and another op, may take at more threads than fewer
MEMORY_BOUND_SLOWER, COMPUTE_SLOWER = 1.5, 2.0
#: the shortest kernel at fewer threads that is checked: below it waking a thread pool
#: can cost a share of the call
MIN_S = 2e-3
#: two timings of one shape this close show the kernel's own behaviour
REPRODUCED = 1.25
#: ops not checked: the per-call costs (more threads may cost more per call)
UNCHECKED = ("dispatch", "dispatch_train")


@dataclass(frozen=True)
class Slower:
    """A shape timed at ``threads`` that took ``ratio`` times as long as at ``fewer``."""

    op: str
    shape: tuple[int, ...]
    threads: int
    fewer: int
    ratio: float


def limit(op: str) -> float:
    """How many times as long ``op`` may take at more threads than at fewer."""
    return MEMORY_BOUND_SLOWER if op in MEMORY_BOUND else COMPUTE_SLOWER


def slower_with_more_threads(samples: Mapping[int, Iterable[KernelSample]],
                             cores: int) -> list[Slower]:
    """The shapes, at each thread count up to ``cores``, that took longer than their op's
    ``limit`` against the same shape's fastest timing at fewer threads (one process's
    samples, ``world`` 1; at least ``MIN_S`` there)."""
    by = {t: {(s.op, s.shape): s for s in got if s.world == 1 and s.op not in UNCHECKED}
          for t, got in samples.items()}
    out = []
    for t, here in sorted(by.items()):
        if t > cores:
            continue
        for key, s in here.items():
            fewer = [(by[f][key].median_s, f) for f in by if f < t and key in by[f]]
            if not fewer:
                continue
            ref, f = min(fewer)
            if ref >= MIN_S and s.median_s > limit(s.op) * ref:
                out.append(Slower(s.op, s.shape, t, f, s.median_s / ref))
    return out


def reproduced(first_s: float, again_s: float) -> bool:
    """Whether a second timing of a shape agrees with its first (``REPRODUCED``)."""
    return max(first_s, again_s) <= REPRODUCED * min(first_s, again_s)


#: a calibration entry: (framework, threads, device, precision)
Key = tuple[str, int, str, str]


def slower_by_configuration(samples: Mapping[Key, Sequence[KernelSample]], cores: int
                            ) -> dict[tuple[str, str, str], list[Slower]]:
    """``slower_with_more_threads`` per (framework, device, precision) of the entries."""
    by: dict[tuple[str, str, str], dict[int, Sequence[KernelSample]]] = {}
    for (fw, t, dev, prec), got in samples.items():
        by.setdefault((fw, dev, prec), {})[t] = got
    return {key: slower_with_more_threads(at, cores) for key, at in by.items()}


def unexplained(samples: Mapping[Key, Sequence[KernelSample]],
                timed_again: Mapping[Key, Mapping[tuple[str, tuple[int, ...]], float]],
                cores: int) -> dict[Key, dict[str, float]]:
    """Per entry, per op, the most times as long as at fewer threads one of its shapes
    took, among the shapes not timed again, or timed again (``timed_again``: the time of
    the first timing, which the entry's sample replaced) without reproducing the first:
    a second timing that reproduces it is the kernel's own behaviour."""
    out: dict[Key, dict[str, float]] = {}
    for (fw, dev, prec), slower in slower_by_configuration(samples, cores).items():
        for x in slower:
            key = (fw, x.threads, dev, prec)
            first = timed_again.get(key, {}).get((x.op, x.shape))
            now = next(s.median_s for s in samples[key]
                       if (s.op, s.shape, s.world) == (x.op, x.shape, 1))
            if first is not None and reproduced(first, now):
                continue
            ops = out.setdefault(key, {})
            ops[x.op] = max(ops.get(x.op, 0.0), x.ratio)
    return out
