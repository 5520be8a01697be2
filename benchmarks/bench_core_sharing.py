"""What two processes on one core cost beyond processor sharing: the same PyTorch kernel
in one process pinned to one CPU, then in two processes pinned to that CPU at once, then
alone again; the throughput the two lose together against the one alone.

    python benchmarks/bench_core_sharing.py                  # every kernel, 3 rounds
    python benchmarks/bench_core_sharing.py --kernels step --rounds 5
    python benchmarks/bench_core_sharing.py --kernels step,step@128,step@512,fcn5@16,alexnet@4,resnet50@4

Processor sharing (``perfmodel.schedule``, ``perfmodel.sharing``) takes two busy processes
on one core to run at half speed each; the operating system's time slicing costs more:
each switch refills the caches and TLB the other process evicted (Li, Ding & Shen 2007,
"Quantifying the cost of context switch", ExpCS: the indirect cost grows with the working
set). ``perfmodel.sharing.CORE_SHARING_COST`` is this benchmark's ``step`` kernel (one
thread's forward and backward pass of a small MLP) on the machine the model was validated
on. Nothing is asserted: the ratios are the result. Takes the machine's CPU lock.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

KERNELS = ("step", "gemm_large", "gemm_small", "memory")


def _kernel(kind: str):
    """A call of ``kind``: the calibration's core-sharing step (a small MLP's, batch 16,
    1024-2048-2048-10; ``step@B`` at batch B), a product streaming a 64 MB weight
    (64 x 4096 x 4096), one that fits in cache (256^3), a memory pass over 32 MB into a
    fresh result, or ``NETWORK@B``: a DLBench network's training step at batch B, as
    ``dlperf run`` builds it (PyTorch)."""
    import torch

    name, _, batch = kind.partition("@")
    if name == "step":
        from dlperf.backends.torch_kernels import SHARE_BATCH, _share_step

        return _share_step(int(batch) if batch else SHARE_BATCH)
    if kind in ("gemm_large", "gemm_small"):
        m, n = (64, 4096) if kind == "gemm_large" else (256, 256)
        a, b = torch.randn(m, n), torch.randn(n, n)
        return lambda: a @ b
    if kind == "memory":
        x = torch.randn(8 * 2**20)
        return lambda: x.mul(2.0)
    from dlperf import workloads
    from dlperf.backends.torch_backend import TorchBackend

    wl = workloads.get(name)
    return TorchBackend().build(wl, wl.sizes[wl.default_size], int(batch or wl.default_batch),
                                "eager", "cpu", 0).step


def main() -> int:
    from dlperf.backends.torch_kernels import SharePool
    from dlperf.core.environment import usable_cpus
    from dlperf.engine.cpulock import cpus_held

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0, help="timed seconds per phase")
    a = ap.parse_args()
    cpu = usable_cpus()[0]  # where SharePool pins its processes
    for kind in a.kernels.split(","):
        costs = []
        for _ in range(a.rounds):
            with cpus_held("bench_core_sharing"):
                with SharePool(2, functools.partial(_kernel, kind)) as pool:
                    before = 1 / pool.round(1, a.seconds)[0]
                    two = sum(1 / t for t in pool.round(2, a.seconds))
                    after = 1 / pool.round(1, a.seconds)[0]
            costs.append((before + after) / 2 / two)
            print(f"  {kind}: alone {before:.4g} and {after:.4g} calls/s; two on CPU {cpu} "
                  f"{two:.4g} together: x{costs[-1]:.3f}", flush=True)
        print(f"{kind}: two processes on one core cost x{statistics.median(costs):.3f} of "
              f"processor sharing (median of {len(costs)}; "
              f"{min(costs):.3f}..{max(costs):.3f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
