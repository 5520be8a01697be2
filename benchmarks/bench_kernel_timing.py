"""The calibration's two timing rules side by side: every shape of a framework's kernel
grid timed by a training step's rule (``measure``: a settling pair, then the sample) and
by the window rule the calibration uses on a CPU (``measure_window``: the first window of
agreeing calls is the sample), each on a fresh kernel, in one worker, the order
alternating from shape to shape so that neither rule always runs first.

    python benchmarks/bench_kernel_timing.py                        # torch, tensorflow, jax x 1, 2
    python benchmarks/bench_kernel_timing.py --frameworks torch --threads 2

Prints, per framework and thread count, each rule's wall time and, over the shapes long
enough for a window (three calls of at least 50 ms in all), the ratio of the window's
median to the pair rule's (geometric mean per op, the extremes) and the calls each rule
made. Nothing is asserted: the figures are the result (docs/prediction.md).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

#: ops timed apart from the grid's shapes (their own protocol or many tiny calls)
SKIP = ("allreduce", "dispatch", "dispatch_train")


def one(framework: str, threads: int) -> None:
    """Both rules over one framework's grid at ``threads``, in this process."""
    os.sched_setaffinity(0, list(range(threads)))
    os.environ.setdefault("NPROC", str(threads))
    from dlperf import backends
    from dlperf.core.timing import measure, measure_window
    from dlperf.kinds.calibrate import plan
    from dlperf.kinds.calibrate import run as cw

    backend = backends.load(framework)
    backend.set_threads(threads)
    backend.set_precision("fp32", "cpu")
    spec = next(s for s in plan.specs([framework], [threads])
                if s.kind == "kernel" and s.network == "kernels")
    m = cw._timing(spec.options)
    logs: dict[str, list[float]] = defaultdict(list)
    calls: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    wall = {"pair": 0.0, "window": 0.0}
    turn = 0
    for part in spec.options.parts:
        if part.op in SKIP:
            continue
        for shape in part.shapes:
            got = {}
            for rule in (("pair", "window") if turn % 2 == 0 else ("window", "pair")):
                kernel = cw.Queued(backend.kernel(part.op, tuple(shape), "cpu"), 1)
                t0 = time.perf_counter()
                t = (measure if rule == "pair" else measure_window)(kernel.step, kernel.sync, m)
                wall[rule] += time.perf_counter() - t0
                got[rule] = (statistics.median(t.steps_s), len(t.warmup_s) + len(t.steps_s))
                del kernel
            turn += 1
            if got["pair"][0] * m.min_steps >= m.min_time_s:
                logs[part.op].append(math.log(got["window"][0] / got["pair"][0]))
                calls[part.op][0] += got["pair"][1]
                calls[part.op][1] += got["window"][1]
    every = [x for v in logs.values() for x in v]
    print(f"{framework} x{threads}: wall pair rule {wall['pair']:.1f} s, window "
          f"{wall['window']:.1f} s; {len(every)} long shapes, window / pair: geometric mean "
          f"{math.exp(statistics.mean(every)):.3f}, median {math.exp(statistics.median(every)):.3f}")
    for op, v in logs.items():
        print(f"  {op:12} {len(v):3} shapes  {math.exp(statistics.mean(v)):.3f} "
              f"({math.exp(min(v)):.2f} .. {math.exp(max(v)):.2f})  calls "
              f"{calls[op][0]} -> {calls[op][1]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frameworks", default="torch,tensorflow,jax")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # FRAMEWORK THREADS, in-process
    a = ap.parse_args()
    if a.one:
        one(a.one[0], int(a.one[1]))
        return 0
    for fw in a.frameworks.split(","):
        for n in a.threads.split(","):
            # a fresh process per thread count: affinity and the framework's threads are
            # set before its first op, as the calibration's workers set them
            subprocess.run([sys.executable, __file__, "--one", fw, n], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
