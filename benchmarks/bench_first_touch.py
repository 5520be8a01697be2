"""What the first touch of fresh memory costs, by how long ago the memory was freed.

    python benchmarks/bench_first_touch.py [--mib 256] [--waits 0,0.5,1,2,3,6] [--rounds 2]
    python benchmarks/bench_first_touch.py --numpy   # a numpy array filled instead: numpy
        # asks for transparent huge pages for its arrays of 4 MiB and more

In one process pinned to one CPU: map MiB of anonymous memory, touch every page, unmap it;
wait; map as much again and time the first touch of every page. A training step does the
same with every tensor beyond glibc's mmap threshold (32 MiB at most): it is mapped afresh
at each allocation and its pages are faulted in at their first touch
(``perfmodel.local.new_pages_s``), and a step that frees such a tensor reallocates it a
step later. On a machine whose fresh pages cost the same whenever they were freed, every
ratio printed is near 1; on one where they do not, a step's time depends on how long
its steps are, beyond what a calibration's back-to-back kernels see (docs/measurement.md,
"A machine that changes speed"). Prints the cost per page at each wait and its ratio to
the first wait's (the same process, one run: a ratio, not a timing to compare across
machines).
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import time

PAGE = mmap.PAGESIZE


def first_touch_s(nbytes: int, numpy: bool = False) -> float:
    """Seconds to touch every page of a new anonymous mapping of ``nbytes`` once; with
    ``numpy``, to fill a new numpy array of ``nbytes`` (its pages huge where the kernel
    grants numpy's ``madvise``)."""
    if numpy:
        import numpy as np

        a = np.empty(nbytes, np.uint8)
        started = time.perf_counter()
        a.fill(1)
        return time.perf_counter() - started
    m = mmap.mmap(-1, nbytes)
    try:
        started = time.perf_counter()
        for off in range(0, nbytes, PAGE):
            m[off] = 1
        return time.perf_counter() - started
    finally:
        m.close()


def after_wait_s(nbytes: int, wait_s: float, numpy: bool = False) -> float:
    """The first touch of ``nbytes`` of memory freed ``wait_s`` seconds before."""
    first_touch_s(nbytes, numpy)  # touched and unmapped: the memory is free from here
    time.sleep(wait_s)
    return first_touch_s(nbytes, numpy)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="memory per touch (default 256)")
    ap.add_argument("--waits", default="0,0.5,1,2,3,6",
                    help="seconds between the free and the next touch (default 0,0.5,1,2,3,6)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds over the waits (default 2)")
    ap.add_argument("--numpy", action="store_true", help="fill a new numpy array instead "
                    "(numpy asks for transparent huge pages for large arrays)")
    a = ap.parse_args()
    waits = [float(w) for w in a.waits.split(",")]
    nbytes = a.mib << 20
    os.sched_setaffinity(0, [sorted(os.sched_getaffinity(0))[0]])
    taken: dict[float, list[float]] = {w: [] for w in waits}
    for _ in range(a.rounds):  # the waits interleaved, so that a drift reaches all alike
        for w in waits:
            taken[w].append(after_wait_s(nbytes, w, a.numpy))
    pages = nbytes // PAGE
    base = statistics.median(taken[waits[0]]) / pages
    print(f"first touch of {a.mib} MiB ({pages} pages{', a numpy array' if a.numpy else ''}), "
          f"median of {a.rounds} rounds")
    for w in waits:
        per_page = statistics.median(taken[w]) / pages
        print(f"  freed {w:4g} s before: {per_page * 1e6:6.2f} us a page, "
              f"x{per_page / base:.2f} the first wait's")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
