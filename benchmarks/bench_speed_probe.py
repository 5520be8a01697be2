"""How well the machine's speed probe (``dlperf.core.speed_probe``) reads the speed that
kernels ran at, and how its placement changes that: probes at the two ends of a
measurement against probes spread through it (``speed_probe.Spread``).

One process on one CPU and one thread runs, round after round, the probe (and two larger
numpy products, candidates for its compute part: a 1024^2 one and one streaming a 64 MiB
weight) and three PyTorch kernels (a 1024^2 product, a 5x5 convolution of AlexNet's second layer at batch
16, a 64 x 4096 x 4096 product that streams its 64 MiB weight), for ``--seconds``. Printed:
the spread of each kernel's time over the run, how long the machine's speed spells last
(each kernel's log time correlated with its own some rounds later), and the correlation
of the probe's reading with the kernels' mean speed over a window of rounds, for a probe
right after the window, probes at both its ends, and probes spread through it (one every
``--every`` rounds), with the error of each reading in log time.

    python benchmarks/bench_speed_probe.py [--seconds 360] [--every 4]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time


def _times(call, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return times


def _low(times: list[float]) -> float:
    """The probe's own estimate (``speed_probe._QUANTILE``): a low quantile."""
    return sorted(times)[int(0.25 * (len(times) - 1))]


def rounds(seconds: float) -> list[dict[str, float]]:
    """Round after round for ``seconds``: the probe's two parts, the candidates (each at
    its low quantile, as the probe is taken) and the kernels (each its median, as a
    calibration's sample is), in seconds."""
    import numpy as np
    import torch
    from threadpoolctl import threadpool_limits

    from dlperf.core import speed_probe

    os.sched_setaffinity(0, [min(os.sched_getaffinity(0))])
    torch.set_num_threads(1)
    a, b = torch.rand(1024, 1024), torch.rand(1024, 1024)
    x = torch.rand(16, 64, 27, 27).to(memory_format=torch.channels_last)
    conv = torch.nn.Conv2d(64, 192, 5, padding=2).to(memory_format=torch.channels_last)
    act, w = torch.rand(64, 4096), torch.rand(4096, 4096)
    kernels = {"mm": (lambda: a @ b, 6), "conv": (lambda: conv(x), 4),
               "stream": (lambda: act @ w, 6)}
    rng = np.random.default_rng(0)
    m = rng.random((1024, 1024), dtype=np.float32)
    na, nw = rng.random((64, 4096), dtype=np.float32), rng.random((4096, 4096), dtype=np.float32)
    candidates = {"np_mm": (lambda: m @ m, 3), "np_stream": (lambda: na @ nw, 3)}
    out, end = [], time.monotonic() + seconds
    with torch.no_grad():
        while time.monotonic() < end:
            got = speed_probe.measure()
            rec = {"probe": got["compute"], "probe_memory": got["memory"]}
            with threadpool_limits(1):
                rec |= {name: _low(_times(call, n)) for name, (call, n) in candidates.items()}
            rec |= {name: statistics.median(_times(call, n))
                    for name, (call, n) in kernels.items()}
            out.append(rec)
    return out


def corr(a: list[float], b: list[float]) -> float:
    return statistics.correlation(a, b)


PROBES = ("probe", "probe_memory", "np_mm", "np_stream")


def report(rs: list[dict[str, float]], every: int) -> None:
    kernels = [k for k in rs[0] if k not in PROBES]
    print(f"{len(rs)} rounds")
    for k in rs[0]:
        s = sorted(r[k] for r in rs)
        print(f"  {k:12} p10 {s[len(s) // 10] * 1e3:7.2f} ms, p90/p10 "
              f"{s[9 * len(s) // 10] / s[len(s) // 10]:.2f}")
    logs = {k: [math.log(r[k]) for r in rs] for k in rs[0]}
    print("  each kernel's log time against its own some rounds later (speed spells):")
    for k in kernels:
        print(f"    {k:7} " + "  ".join(f"{lag}: {corr(logs[k][:-lag], logs[k][lag:]):+.2f}"
                                        for lag in (1, 5, 10, 25, 50) if lag < len(rs) - 2))
    per_round = [statistics.mean(logs[k][i] for k in kernels) for i in range(len(rs))]
    print("  each probe against the kernels' mean log time of its round: " + ", ".join(
        f"{p} {corr(per_round, logs[p]):+.2f}" for p in PROBES))
    print("  the probe's reading of the kernels' mean speed over a window of rounds "
          "(correlation; error sd in log time):")
    for window in (4, 8, 30, 50):
        if len(range(1, len(rs) - window - 1, 2)) < 3:  # too short a run for this window
            continue
        speed, after, ends, spread = [], [], [], []
        for i in range(1, len(rs) - window - 1, 2):
            w = rs[i:i + window]
            speed.append(statistics.mean(math.log(statistics.mean(r[k] for r in w))
                                         for k in kernels))
            after.append(math.log(rs[i + window]["probe"]))
            ends.append(math.log(statistics.median([rs[i - 1]["probe"],
                                                    rs[i + window]["probe"]])))
            spread.append(math.log(statistics.median(
                [rs[i - 1]["probe"]] + [r["probe"] for r in w[every - 1::every]])))
        print(f"    {window:3} rounds: " + ", ".join((
            _reading("after", after, speed), _reading("both ends", ends, speed),
            _reading(f"every {every}", spread, speed)))
              + f"; the speed's own sd {statistics.pstdev(speed):.3f}")
        others = {p: [math.log(statistics.median(
            [rs[i - 1][p]] + [r[p] for r in rs[i:i + window][every - 1::every]]))
            for i in range(1, len(rs) - window - 1, 2)] for p in PROBES[1:]}
        print("          spread, other probes: " + ", ".join(
            _reading(p, got, speed) for p, got in others.items()))


def _reading(name: str, got: list[float], speed: list[float]) -> str:
    """'after +0.60 (0.120)': the correlation of a probe's log readings with the windows'
    log speed, and the spread of their difference (a constant offset removed)."""
    shift = statistics.mean(got) - statistics.mean(speed)
    err = statistics.pstdev([g - shift - s for g, s in zip(got, speed, strict=True)])
    return f"{name} {corr(speed, got):+.2f} ({err:.3f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=360.0)
    p.add_argument("--every", type=int, default=4, help="rounds between spread probes")
    a = p.parse_args()
    t0 = time.monotonic()
    rs = rounds(a.seconds)
    print(f"one round: {(time.monotonic() - t0) / max(1, len(rs)):.2f} s")
    report(rs, a.every)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
