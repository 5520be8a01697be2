"""Link probe under torchrun: point-to-point bandwidth and an isolated all-reduce.

    python -m torch.distributed.run --nproc-per-node 2 ... -m dlperf.kinds.parallel.probe CONFIG.json OUTDIR

CONFIG: {"nbytes": bytes of the all-reduce, "p2p_bytes": message size for the bandwidth,
"repeats": timed repetitions, "threads": per worker}. Rank 0 writes OUTDIR/probe.json:

- ``bandwidth_Bps``: one-way bandwidth between ranks 0 and 1 from a ping-pong of
  ``p2p_bytes`` (half the round trip per message, median over repeats);
- ``allreduce_s``: median time of an all-reduce of ``nbytes`` of fp32 over every rank,
  alone (no backward pass to overlap or compete with);
- every repetition's time.

Ring all-reduce (Patarasuk and Yuan, 2009) sends 2(n-1)/n of the buffer over each link,
so ``2(n-1)/n x nbytes / bandwidth`` is its time on links of that bandwidth.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path


def ring_allreduce_estimate(nbytes: float, workers: int, bandwidth_Bps: float) -> float:
    """Seconds for a ring all-reduce: each link carries 2(n-1)/n x the buffer."""
    return 2 * (workers - 1) / workers * nbytes / bandwidth_Bps


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cfg = json.loads(Path(argv[0]).read_text())
    outdir = Path(argv[1])
    from dlperf.kinds.parallel.run import rank_cpus

    os.sched_setaffinity(0, rank_cpus(int(os.environ.get("LOCAL_RANK", "0")),
                                      int(cfg.get("threads", 1))))
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(int(cfg.get("threads", 1)))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    repeats = int(cfg.get("repeats", 10))
    out: dict = {"world": world, "nbytes": cfg["nbytes"], "p2p_bytes": cfg["p2p_bytes"]}

    # ping-pong between ranks 0 and 1: one clock measures both directions
    msg = torch.ones(int(cfg["p2p_bytes"]) // 4)
    one_way = []
    for k in range(repeats + 1):
        dist.barrier()
        if rank == 0:
            t = time.perf_counter()
            dist.send(msg, dst=1)
            dist.recv(msg, src=1)
            if k:  # the first exchange sets up the connection
                one_way.append((time.perf_counter() - t) / 2)
        elif rank == 1:
            dist.recv(msg, src=0)
            dist.send(msg, dst=0)
    buf = torch.ones(int(cfg["nbytes"]) // 4)
    ar = []
    for k in range(repeats + 1):
        dist.barrier()
        t = time.perf_counter()
        dist.all_reduce(buf)
        if k:
            ar.append(time.perf_counter() - t)
    # the slowest rank decides when an all-reduce is over
    times = torch.tensor(ar, dtype=torch.float64)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    if rank == 0:
        med = statistics.median(one_way)
        out.update(p2p_one_way_s=one_way, bandwidth_Bps=cfg["p2p_bytes"] / med,
                   allreduce_times_s=times.tolist(),
                   allreduce_s=statistics.median(times.tolist()))
        (outdir / "probe.json").write_text(json.dumps(out))
    dist.barrier()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
