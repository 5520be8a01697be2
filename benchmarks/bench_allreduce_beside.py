"""gloo's all-reduce beside a busy compute thread, as DDP runs it beside the backward pass
where no core is spare: the same all-reduce timed alone and while a thread of every rank
runs one-thread matrix products, and those products' rate alone and beside it.

    python benchmarks/bench_allreduce_beside.py                       # 2 and 4 ranks, 25 MiB
    python benchmarks/bench_allreduce_beside.py --worlds 4 --mib 1,25 --rounds 3

Rank r is pinned where ``dlperf parallel`` pins a one-thread worker
(``kinds.parallel.run.rank_cpus``), so on two CPUs 4 ranks put two on each. The parallel
model prices DDP's all-reduce on such cores as not overlapping the backward at all
(``perfmodel.predict._ddp_allreduce``, where ``comm_overlaps`` is false): its time is
added to the compute's. Processor sharing would instead split each core between the
compute and gloo's thread (the all-reduce twice as long, the products at half their
rate). Nothing is asserted: the ratios are the result.
Takes the machine's CPU lock.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

#: all-reduces timed per phase, and the seconds the products' rate is read alone
REPS, RATE_S = 8, 2.0


def _products(stop: threading.Event, done: list[int]) -> None:
    import torch

    a, b = torch.randn(512, 512), torch.randn(512, 512)
    while not stop.is_set():
        a @ b
        done[0] += 1


def _beside(run) -> float:
    """Products per second in a thread of this rank while ``run()`` runs in the main
    thread."""
    stop, done = threading.Event(), [0]
    worker = threading.Thread(target=_products, args=(stop, done))
    worker.start()
    time.sleep(0.3)  # the thread at full pace before the window opens
    start, t0 = done[0], time.perf_counter()
    run()
    rate = (done[0] - start) / (time.perf_counter() - t0)
    stop.set()
    worker.join()
    return rate


def _rank(rank: int, world: int, path: str, nbytes: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from dlperf.kinds.parallel.run import rank_cpus

    os.sched_setaffinity(0, rank_cpus(rank, 1))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank,
                            world_size=world)
    t = torch.ones(nbytes // 4)

    def reduces() -> list[float]:
        times = []
        for _ in range(REPS):
            s = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - s)
        return times

    dist.barrier()
    rate_alone = _beside(lambda: time.sleep(RATE_S))
    dist.barrier()
    alone = reduces()
    dist.barrier()
    beside: list[float] = []
    rate_beside = _beside(lambda: beside.extend(reduces()))
    row = torch.tensor([statistics.median(alone), statistics.median(beside), rate_alone,
                        rate_beside], dtype=torch.float64)
    rows = [torch.zeros(4, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(rows, row)
    if rank == 0:
        torch.save(torch.stack(rows), out)
    dist.destroy_process_group()


def main() -> int:
    import torch
    import torch.multiprocessing as mp

    from dlperf.core.environment import usable_cpus
    from dlperf.engine.cpulock import cpus_held

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--mib", default="25", help="all-reduce sizes in MiB (DDP's bucket: 25)")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    try:
        worlds = [int(w) for w in a.worlds.split(",")]
        sizes = [float(m) for m in a.mib.split(",")]
    except ValueError:
        print("bench_allreduce_beside: --worlds and --mib take comma-separated numbers",
              file=sys.stderr)
        return 2
    cpus = usable_cpus()
    for world in worlds:
        for mib in sizes:
            slower, kept = [], []
            for _ in range(a.rounds):
                with tempfile.TemporaryDirectory() as d, cpus_held("bench_allreduce_beside"):
                    out = str(Path(d) / "rows.pt")
                    mp.spawn(_rank, args=(world, str(Path(d) / "store"), int(mib * 2**20),
                                          out), nprocs=world)
                    rows = torch.load(out)
                alone, beside = rows[:, 0].median().item(), rows[:, 1].median().item()
                rate, rate_beside = rows[:, 2].median().item(), rows[:, 3].median().item()
                slower.append(beside / alone)
                kept.append(rate_beside / rate)
                print(f"  {world} ranks on {len(cpus)} CPUs, {mib:g} MiB: all-reduce alone "
                      f"{alone * 1e3:.1f} ms, beside the products {beside * 1e3:.1f} ms; "
                      f"products {rate:.1f}/s alone, {rate_beside:.1f}/s beside it",
                      flush=True)
            print(f"{world} ranks, {mib:g} MiB: the all-reduce x{statistics.median(slower):.2f} "
                  f"longer beside a busy thread, the products at "
                  f"{statistics.median(kept):.0%} of their rate (median of {a.rounds}; "
                  "processor sharing: x2 and 50%)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
