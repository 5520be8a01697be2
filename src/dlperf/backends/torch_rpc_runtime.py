"""The resident memory of a parameter-server worker's runtime: a process with gloo's
process group and torch.distributed.rpc's agent up (TensorPipe: its threads, a
connection to every peer and their buffers) and autograd's backward run once, as
``dlperf parallel``'s async and mixed workers hold before their network, and with a
DistributedDataParallel step of a tiny layer besides (a mixed group's worker).

Measured in processes of their own, spawned after the calibration has timed its
collectives: an RPC agent is never started in a process that times anything afterwards,
where its threads could go on beside the timings."""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta

import torch

#: seconds the spawned ranks may take to import, rendezvous and answer
TIMEOUT_S = 120.0


def _rank(rank: int, world: int, path: str, parent: int, send) -> None:
    """One spawned rank: gloo's group, the RPC agent and a plain backward, then a DDP
    step; the leanest rank's resident bytes after each go to the parent (rank 0
    sends)."""
    from dlperf.backends.torch_kernels import _rank_cpus, _runtimes
    from dlperf.core.orphans import die_with_parent

    die_with_parent(parent)
    os.sched_setaffinity(0, _rank_cpus(rank))
    torch.set_num_threads(1)
    import torch.distributed as dist
    import torch.distributed.rpc as rpc

    dist.init_process_group("gloo", store=dist.FileStore(path, world), rank=rank,
                            world_size=world, timeout=timedelta(seconds=TIMEOUT_S))
    dist.barrier()
    rpc.init_rpc(f"r{rank}", rank=rank, world_size=world,
                 rpc_backend_options=rpc.TensorPipeRpcBackendOptions(
                     init_method=f"file://{path}-rpc", rpc_timeout=TIMEOUT_S))
    # the agent connects to a peer at its first call: one to each, as the server's rank
    # holds a connection to every worker
    for peer in range(world):
        if peer != rank:
            rpc.rpc_sync(f"r{peer}", torch.add, args=(torch.ones(1), 1))
    dist.barrier()
    # the collectives' own sequence, the agent up besides: after autograd's backward (a
    # worker's), then after DDP's step
    _, with_rpc, ddp_rpc = _runtimes()
    got = torch.tensor([with_rpc, ddp_rpc], dtype=torch.float64)
    dist.all_reduce(got, op=dist.ReduceOp.MIN)
    if send is not None:
        send.send(got.tolist())
    rpc.shutdown()
    dist.destroy_process_group()
    os._exit(0)  # no interpreter teardown: nothing to flush, and it takes seconds


def rpc_runtimes(world: int = 2, target: Callable[..., None] = _rank
                 ) -> tuple[float, float] | None:
    """(resident bytes with gloo's group and the RPC agent up, and with a DDP step
    besides), the leanest of ``world`` spawned ranks' on loopback (each running
    ``target``); None, at once, where a rank failed, or where they did not answer within
    ``TIMEOUT_S``."""
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    with tempfile.TemporaryDirectory(prefix="dlperf-rpc-") as tmp:
        path = os.path.join(tmp, "store")
        procs = [ctx.Process(target=target, args=(r, world, path, os.getpid(),
                                                  send if r == 0 else None), daemon=True)
                 for r in range(world)]
        for p in procs:
            p.start()
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while not recv.poll(0.5):
                if time.monotonic() > deadline or any(p.exitcode for p in procs):
                    return None  # a rank that failed leaves the others to wait forever
            rpc_bytes, ddp_rpc_bytes = recv.recv()
            return float(rpc_bytes), float(ddp_rpc_bytes)
        except (EOFError, OSError):
            return None
        finally:
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
