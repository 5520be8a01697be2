"""Each framework's time per mini-batch as dlperf reports it, against a minimal
hand-written training loop in the same framework (benchmarks/handwritten/*_loop.py),
timed alternately in the same run. Target ratio 0.95 .. 1.05: the comparison then
measures the frameworks, not dlperf. Prints the framework ranking for each network, and
for Keras (each of its installed backends) the cost of the Keras layer: dlperf's keras/X
time over its X time at the same configuration, where X ran too.

    python benchmarks/bench_frameworks.py [--frameworks torch,tensorflow,jax,keras,mxnet]
        [--networks fcn5,alexnet] [--threads 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics

from bench_harness import dlperf_run, handwritten

from dlperf import workloads
from dlperf.core import framework_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frameworks", default="torch,tensorflow,jax,mxnet")
    ap.add_argument("--networks", default="fcn5,alexnet")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=6.0)
    a = ap.parse_args()
    frameworks = [f for f in a.frameworks.split(",") if framework_table.installed(f)]
    for f in sorted(set(a.frameworks.split(",")) - set(frameworks)):
        print(f"{f}: not installed, skipped")
    summary: dict[str, dict[str, float]] = {}
    for net in a.networks.split(","):
        batch = workloads.get(net).default_batch
        for fw, variant in [(f, v) for f in frameworks for v in variants(f)]:
            # the Keras loop takes its backend as --variant; the others run their default
            loop_variant = variant if fw == "keras" else None
            ours, theirs = [], []
            for i in range(a.rounds):
                # ABBA order, so that neither side always runs first on a drifting machine
                if i % 2 == 0:
                    d = dlperf_run(fw, net, a.threads, batch, a.min_time, variant)
                h = handwritten(fw, net, a.threads, batch, steps=6, warmup=3,
                                variant=loop_variant)
                if i % 2 == 1:
                    d = dlperf_run(fw, net, a.threads, batch, a.min_time, variant)
                ours.append(d["median_s"])
                theirs.append(h["median_s"])
            # the median of the paired per-round ratios: each pair ran back to back, so
            # the drift of a shared machine cancels within a pair
            ratio = statistics.median(o / t for o, t in zip(ours, theirs, strict=True))
            ok = "PASS" if 0.95 <= ratio <= 1.05 else "FAIL"
            print(f"{net:8} {fw}/{variant:6} dlperf {statistics.median(ours):.4f} s  "
                  f"hand-written {statistics.median(theirs):.4f} s  ratio {ratio:.3f}  {ok}"
                  f"   (rounds: {', '.join(f'{o / t:.3f}' for o, t in zip(ours, theirs, strict=True))})",
                  flush=True)
            summary.setdefault(net, {})[f"{fw}/{variant}"] = statistics.median(ours)
    print()
    for net, times in summary.items():
        ranking = sorted(times.items(), key=lambda kv: kv[1])
        fastest = ranking[0][1]
        print(f"{net}: " + "  <  ".join(f"{k} {v:.3f} s ({v / fastest:.2f}x)" for k, v in ranking))
        for v in variants("keras") if "keras" in frameworks else ():
            own = f"{v}/{framework_table.info(v).default_variant}"
            if f"keras/{v}" in times and own in times:
                print(f"  Keras over {v}: keras/{v} {times[f'keras/{v}']:.4f} s / {own} "
                      f"{times[own]:.4f} s = {times[f'keras/{v}'] / times[own]:.3f}")


def variants(fw: str) -> list[str]:
    """Keras runs on each of its backends whose framework is installed; the others run
    their default variant."""
    if fw == "keras":
        return [v for v in framework_table.info("keras").variants if framework_table.installed(v)]
    return [framework_table.info(fw).default_variant]


if __name__ == "__main__":
    main()
