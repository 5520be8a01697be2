"""Synchronous data parallelism, 2 workers, FCN-5-sized layers: the all-reduce time dlperf
measures per step, against the ring all-reduce estimate from the measured loopback
bandwidth.

    python benchmarks/bench_allreduce.py                 # fcn5 full: 118M parameters
    python benchmarks/bench_allreduce.py --size tiny     # a quick check of the plumbing

Three numbers, measured side by side in one run:

1. ``dlperf parallel --strategy sync --workers 2``: DDP's all-reduce per step, recorded by
   its communication hook (the union of the buckets' transfer intervals, from the last
   rank's launch to completion; it overlaps the backward pass, which competes for the
   same cores), and the part of it the step was blocked on;
2. a loopback probe under torchrun: the one-way bandwidth of gloo between the two ranks
   (ping-pong of a large message) and an all-reduce of the same number of bytes alone;
3. the ring estimate 2(n-1)/n x bytes / bandwidth, printed beside both, with the ratios.

Nothing is asserted: the ratios are the result. A ratio above 1 is time the ring model
does not see (per-bucket latency, the gloo thread competing with backward for the cores,
reduction arithmetic); below 1 would mean the probe underestimated the link.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dlperf.core import units  # noqa: E402
from dlperf.core.spec import Measurement  # noqa: E402
from dlperf.engine.launch.torchrun import run_parallel, run_probe  # noqa: E402
from dlperf.kinds.parallel.make import make_spec  # noqa: E402
from dlperf.kinds.parallel.probe import ring_allreduce_estimate  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="full", help="fcn5 size: full (default) or tiny")
    ap.add_argument("--batch-size", type=int, default=64, help="global batch (default 64)")
    ap.add_argument("--min-time", type=float, default=5.0, help="timed seconds (default 5)")
    ap.add_argument("--threads", type=int, default=1, help="threads per worker (default 1)")
    ap.add_argument("--repeats", type=int, default=10, help="probe repetitions (default 10)")
    ap.add_argument("--db", help="also store the sync run in this results store")
    a = ap.parse_args()

    workers = 2
    spec = make_spec("fcn5", size=a.size, strategy="sync", workers=workers,
                     batch_size=a.batch_size, threads=a.threads,
                     measurement=Measurement(min_time_s=a.min_time, min_steps=5,
                                             warmup_max_steps=10))
    print(f"sync data parallelism: fcn5 [{a.size}], {workers} workers x {a.threads} thread, "
          f"global batch {a.batch_size} ...", flush=True)
    r = run_parallel(spec, timeout_s=3600)
    if r is None or not r.ok:
        print(f"the sync run failed: {r.failure if r else 'no result'}")
        return 1
    if a.db:
        from dlperf.core.store import Store

        with Store(a.db) as st:
            st.add(r)
    bd = r.extra["breakdown"]
    nbytes = bd["allreduce_bytes"]
    inflight = bd["allreduce_inflight_s"]
    blocked = bd["per_step_s"]["comm"] + bd["per_step_s"]["wait"]

    print("loopback probe: bandwidth and an all-reduce of the same bytes, alone ...", flush=True)
    probe = run_probe(int(nbytes), workers=workers, p2p_bytes=max(int(nbytes), 16 * 2**20),
                      repeats=a.repeats, threads=a.threads)
    bw = probe["bandwidth_Bps"]
    est = ring_allreduce_estimate(nbytes, workers, bw)

    rows = [
        ("gradient bytes all-reduced per step", units.nbytes(nbytes)),
        ("loopback bandwidth (gloo ping-pong, one way)", f"{bw / 1e9:.3g} GB/s"),
        ("ring estimate 2(n-1)/n x bytes / bandwidth", units.seconds(est)),
        ("measured: all-reduce in flight per step (DDP hook)", units.seconds(inflight)),
        ("  ratio measured / estimate", f"{inflight / est:.2f}"),
        ("measured: step blocked on all-reduce (after backward)", units.seconds(blocked)),
        ("measured: same all-reduce alone (probe)", units.seconds(probe["allreduce_s"])),
        ("  ratio alone / estimate", f"{probe['allreduce_s'] / est:.2f}"),
        ("time per mini-batch", units.seconds(r.metrics.median_s)),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
