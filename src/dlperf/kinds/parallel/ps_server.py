"""The parameter server's side: one shard of the flat weight vector, its RPC endpoints,
and the process of a dedicated server.

A shard applies every push as it arrives (plain SGD) and counts a version. Exactly once:
each push carries (worker, sequence number); a repeated pair is counted as a duplicate and
not applied. Each request's time holding the lock (the server's own work) and the bytes it
moved are logged, so the report can show the server's load beside the workers' waiting.

Drift: the shard keeps the weights it last sent each worker (the very copy it sent, no
second one). A push carries the worker's summed gradient over its local steps, so the
worker's weights after those steps are ``pulled - lr * push``; the norm of their
difference from the shard's weights when the push arrives is the drift at that exchange
(computed per shard, added up in squares by the client), relative to the norm of the
weights the worker was sent. The difference vector costs the shard one pass over its
weights under the lock; the norms are taken after the lock is released.

Every process of the RPC group hosts at most one shard: rank 0 beside its own worker when
``servers`` is 0, else each dedicated server rank one (``partition.shard_layout``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch
import torch.distributed.rpc as rpc

from dlperf.backends.base import UnsupportedError
from dlperf.kinds.parallel.common import Context, Strategy, build_net, trainable
from dlperf.perfmodel.partition import shard_layout


class ParameterServer:
    def __init__(self, weights: torch.Tensor, lr: float, keep_initial: bool = False,
                 shard: tuple[int, int] = (0, 0)):
        self.w = weights.detach().to("cpu", copy=True)
        self.w0 = self.w.clone() if keep_initial else None
        self.lr = lr
        self.shard = shard  # (offset, length) in the flat weight vector
        self.version = 0
        self.samples = 0
        self.stop = False
        self.lock = threading.Lock()
        # one row per applied push: [time, worker, seq, staleness, phase, samples]
        self.log: list[list[Any]] = []
        # one row per request: [start, end of its work under the lock, kind, bytes]
        self.busy: list[list[Any]] = []
        self.pulled: dict[int, torch.Tensor] = {}
        self._seen: set[tuple[int, int]] = set()
        self.duplicates = 0

    def push(self, worker: int, seq: int, version: int, grad: torch.Tensor, samples: int,
             phase: str) -> dict[str, Any]:
        t0 = time.time()
        d = base = None
        with self.lock:
            t1 = time.time()
            staleness = None
            if (worker, seq) in self._seen:
                self.duplicates += 1
            else:
                self._seen.add((worker, seq))
                staleness = self.version - version
                base = self.pulled.get(worker)
                if base is not None:  # the one pass the drift costs under the lock
                    d = base.sub(grad, alpha=self.lr).sub_(self.w)
                self.w.add_(grad, alpha=-self.lr)
                self.version += 1
                self.samples += samples
                self.log.append([time.time(), worker, seq, staleness, phase, samples])
            t2 = time.time()
            self.busy.append([t1, t2, "push", grad.numel() * grad.element_size()])
            info = {"wait": t1 - t0, "server": t2 - t1, "version": self.version,
                    "staleness": staleness, "stop": self.stop, "samples": self.samples}
        # the norms outside the lock: ``base`` is the copy this worker was sent (never
        # changed), ``d`` this push's own vector
        info["drift2"] = float(d.dot(d)) if d is not None else None
        info["norm2"] = float(base.dot(base)) if base is not None else None
        return info

    def pull(self, worker: int) -> tuple[torch.Tensor, int, dict[str, Any]]:
        t0 = time.time()
        with self.lock:
            t1 = time.time()
            w, v, stop = self.w.clone(), self.version, self.stop
            self.pulled[worker] = w  # the copy sent: the base of this worker's drift
            t2 = time.time()
            self.busy.append([t1, t2, "pull", w.numel() * w.element_size()])
        return w, v, {"wait": t1 - t0, "server": t2 - t1, "stop": stop}

    def snapshot(self) -> tuple[torch.Tensor, int, int, float]:
        with self.lock:
            return self.w.clone(), self.version, self.samples, time.time()

    def halt(self) -> None:
        self.stop = True

    def report(self) -> dict[str, Any]:
        return {"log": self.log, "busy": self.busy, "applied": len(self.log),
                "duplicates": self.duplicates, "versions": self.version,
                "samples": self.samples, "shard": list(self.shard)}


_SERVER: ParameterServer | None = None


def local_server() -> ParameterServer:
    assert _SERVER is not None, "no parameter-server shard in this process"
    return _SERVER


# RPC endpoints: module-level functions, so that every process can name them
def rpc_push(worker: int, seq: int, version: int, grad: torch.Tensor, samples: int,
             phase: str) -> dict[str, Any]:
    return local_server().push(worker, seq, version, grad, samples, phase)


def rpc_pull(worker: int) -> tuple[torch.Tensor, int, dict[str, Any]]:
    return local_server().pull(worker)


def rpc_snapshot() -> tuple[torch.Tensor, int, int, float]:
    return local_server().snapshot()


def rpc_halt() -> None:
    local_server().halt()


def start_server(weights: torch.Tensor, lr: float, keep_initial: bool,
                 shard: tuple[int, int]) -> ParameterServer:
    global _SERVER
    _SERVER = ParameterServer(weights, lr, keep_initial, shard)
    return _SERVER


def start_rpc(ctx: Context) -> None:
    """Join the RPC group (every worker and server) through torchrun's rendezvous store
    (env://), with a timeout."""
    opts = rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=max(4, ctx.world + 2),  # one per concurrent request, a few spare
        rpc_timeout=ctx.comm_timeout_s,
        init_method="env://",
    )
    ctx.status.set("starting", "joining the RPC group")
    rpc.init_rpc(f"w{ctx.rank}", rank=ctx.rank, world_size=ctx.world, rpc_backend_options=opts)


class ServerRank(Strategy):
    """A dedicated parameter-server process: it builds the network only for its initial
    weights (the same seed as every worker), keeps its shard, and serves until every
    worker has finished with the servers."""

    name = "server"
    lockstep = False

    def setup(self) -> None:
        ctx = self.ctx
        self.net = build_net(ctx)
        params = trainable(self.net.model)
        try:
            layout = shard_layout([p.numel() for p in params], ctx.opts.servers)
        except ValueError as e:
            raise UnsupportedError(f"{ctx.spec.network}: {e}") from None
        k = ctx.opts.server_ranks.index(ctx.rank)
        off, n = layout[k]
        flat = torch.cat([p.detach().reshape(-1) for p in params])[off:off + n]
        self.server = start_server(flat, ctx.opts.lr, ctx.dump_dir is not None, (off, n))
        self.net.model = torch.nn.Module()  # only the shard is kept
        start_rpc(ctx)

    def serve(self) -> dict[str, Any]:
        self.ctx.status.set("communication", "serving the workers (parameter server)")
        start = time.time()
        rpc.shutdown()  # graceful: returns once every worker is done with the servers
        return {"start": start, "end": time.time()}

    def finish(self) -> dict[str, Any]:
        srv = self.server
        self.ctx.dump("server", {"w0": srv.w0, "w": srv.w, "lr": srv.lr, "log": srv.log,
                                 "duplicates": srv.duplicates, "shard": srv.shard})
        return {"role": "server", "server": srv.report()}
