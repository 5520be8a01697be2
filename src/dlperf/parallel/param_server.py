"""Asynchronous data parallelism through a parameter server (torch.distributed.rpc).

The server lives on rank 0, beside rank 0's own worker, and holds the weights. Each
worker, on its own clock: pulls the weights and their version, computes the gradient of its
share of the batch, pushes it; the server applies every push as it arrives (plain SGD)
and counts a version. Nobody waits for anybody except for the server's lock, so a slow
worker slows only itself, but a gradient may have been computed from weights that other
pushes have since changed: its staleness, the number of versions applied between the pull
and the push, is recorded for every push.

Exactly once: each push carries (worker, sequence number); the server applies a given
pair once and counts any repeat as a duplicate (the RPC layer does not retry, so none are
expected; the tests check that every push is applied exactly once).

Rank 0 calls its co-located server directly (no serialisation); the others go through RPC.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc

from dlperf.parallel.common import (
    Batches,
    Context,
    Strategy,
    budget,
    build_net,
    compute_step,
    evaluate,
    flat_grads,
    goals,
    load_flat,
    timed_exchange,
    trainable,
)
from dlperf.training.rules import reached

SERVER_RANK = 0


class ParameterServer:
    def __init__(self, weights: torch.Tensor, lr: float, keep_initial: bool = False):
        self.w = weights.detach().to("cpu", copy=True)
        self.w0 = self.w.clone() if keep_initial else None
        self.lr = lr
        self.version = 0
        self.samples = 0
        self.stop = False
        self.lock = threading.Lock()
        # one row per applied push: [time, worker, seq, staleness, phase, samples]
        self.log: list[list[Any]] = []
        self._seen: set[tuple[int, int]] = set()
        self.duplicates = 0

    def push(self, worker: int, seq: int, version: int, grad: torch.Tensor, samples: int,
             phase: str) -> dict[str, Any]:
        t0 = time.time()
        with self.lock:
            t1 = time.time()
            staleness = None
            if (worker, seq) in self._seen:
                self.duplicates += 1
            else:
                self._seen.add((worker, seq))
                staleness = self.version - version
                self.w.add_(grad, alpha=-self.lr)
                self.version += 1
                self.samples += samples
                self.log.append([time.time(), worker, seq, staleness, phase, samples])
            t2 = time.time()
            return {"wait": t1 - t0, "server": t2 - t1, "version": self.version,
                    "staleness": staleness, "stop": self.stop}

    def pull(self) -> tuple[torch.Tensor, int, dict[str, Any]]:
        t0 = time.time()
        with self.lock:
            t1 = time.time()
            w, v, stop = self.w.clone(), self.version, self.stop
            t2 = time.time()
        return w, v, {"wait": t1 - t0, "server": t2 - t1, "stop": stop}

    def snapshot(self) -> tuple[torch.Tensor, int, int, float]:
        with self.lock:
            return self.w.clone(), self.version, self.samples, time.time()

    def report(self) -> dict[str, Any]:
        return {"log": self.log, "applied": len(self.log), "duplicates": self.duplicates,
                "versions": self.version, "samples": self.samples}


_SERVER: ParameterServer | None = None


def _rpc_push(worker: int, seq: int, version: int, grad: torch.Tensor, samples: int,
              phase: str) -> dict[str, Any]:
    assert _SERVER is not None
    return _SERVER.push(worker, seq, version, grad, samples, phase)


def _rpc_pull() -> tuple[torch.Tensor, int, dict[str, Any]]:
    assert _SERVER is not None
    return _SERVER.pull()


def start_server(weights: torch.Tensor, lr: float, keep_initial: bool) -> ParameterServer:
    global _SERVER
    _SERVER = ParameterServer(weights, lr, keep_initial)
    return _SERVER


def start_rpc(ctx: Context) -> None:
    """Join the RPC group through torchrun's rendezvous store (env://), with a timeout."""
    opts = rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=max(4, ctx.world + 2),  # one per concurrent push, a few spare
        rpc_timeout=ctx.comm_timeout_s,
        init_method="env://",
    )
    ctx.status.set("starting", "joining the RPC group")
    rpc.init_rpc(f"w{ctx.rank}", rank=ctx.rank, world_size=ctx.world, rpc_backend_options=opts)


class Client:
    """Push and pull, by direct call on the server's own rank, by RPC elsewhere."""

    def __init__(self, ctx: Context):
        self.local = ctx.rank == SERVER_RANK
        self.timeout = ctx.comm_timeout_s
        self.device = ctx.device

    def push(self, worker: int, seq: int, version: int, grad: torch.Tensor, samples: int,
             phase: str) -> dict[str, Any]:
        args = (worker, seq, version, grad.cpu(), samples, phase)
        if self.local:
            return _rpc_push(*args)
        return rpc.rpc_sync(f"w{SERVER_RANK}", _rpc_push, args=args, timeout=self.timeout)

    def pull(self) -> tuple[torch.Tensor, int, dict[str, Any]]:
        if self.local:
            w, v, info = _rpc_pull()
        else:
            w, v, info = rpc.rpc_sync(f"w{SERVER_RANK}", _rpc_pull, timeout=self.timeout)
        return w.to(self.device), v, info


class ServerTraining:
    """What async and mixed share: the server on rank 0, evaluation of its weights during a
    time-to-target run, and the report of every push."""

    ctx: Context

    def _init_server(self, params: list[torch.nn.Parameter]) -> None:
        ctx = self.ctx
        self.server = None
        if ctx.rank == SERVER_RANK:
            w = torch.cat([p.detach().reshape(-1) for p in params])
            self.server = start_server(w, ctx.opts.lr, keep_initial=ctx.dump_dir is not None)
        start_rpc(ctx)
        self.client = Client(ctx)
        self._eval_model: torch.nn.Module | None = None
        self._next_eval = ctx.opts.eval_every * ctx.spec.batch_size
        self._eval_s = 0.0

    def after_step(self, train_start: float) -> None:
        """Rank 0 in a time-to-target run: evaluate the server's weights when another
        ``eval_every`` mini-batches have been applied; at the target or the budget, raise
        the server's stop flag. The other workers keep training meanwhile (they do not wait
        for the evaluation).

        Rank 0 does not stop here: like every worker (every group's leader in mixed), it
        reads the flag from its next push or pull, the one point in a step where a worker
        learns to stop (a mixed leader then broadcasts it to its group with the weights).
        Leaving here would strand rank 0's group-mates in their next all-reduce: the
        broadcast that ended this step told them to go on.
        """
        srv, o, b = self.server, self.ctx.opts, self.ctx.spec.batch_size
        assert srv is not None
        elapsed = time.time() - train_start
        over = budget(o).spent(steps=srv.samples // b, train_s=elapsed) is not None
        if srv.samples < self._next_eval and not over:
            return
        e0 = time.time()
        w, version, samples, t_snap = srv.snapshot()
        if self._eval_model is None:
            self._eval_model = copy.deepcopy(self.net.model)
        load_flat(trainable(self._eval_model), w.to(self.ctx.device))
        loss, acc = evaluate(self._eval_model, self.net, self.ctx.device)
        self._eval_s += time.time() - e0
        stop = (reached(goals(o), {"accuracy": acc, "loss": loss})
                or budget(o).spent(steps=samples // b, train_s=t_snap - train_start) is not None)
        self.ctx.log.eval({"t": t_snap - train_start, "samples": samples, "version": version,
                           "loss": loss, "accuracy": acc, "eval_s": self._eval_s,
                           "train_s": t_snap - train_start})
        self._next_eval = (samples // (o.eval_every * b) + 1) * o.eval_every * b
        if stop:
            srv.stop = True

    def _finish_server(self, pushes: int, pushed_sum: torch.Tensor | None) -> dict[str, Any]:
        self.ctx.status.set("communication", "RPC shutdown (waiting for every worker to finish)")
        rpc.shutdown()  # graceful: returns once every worker is done with the server
        rep: dict[str, Any] = {"pushes": pushes}
        if self.server is not None:
            rep["server"] = self.server.report()
            self.ctx.dump("server", {"w0": self.server.w0, "w": self.server.w,
                                     "lr": self.server.lr, "log": self.server.log,
                                     "duplicates": self.server.duplicates})
        if pushed_sum is not None:
            self.ctx.dump("pushed", {"sum": pushed_sum, "pushes": pushes})
        return rep


class AsyncParameterServer(ServerTraining, Strategy):
    name = "async"
    lockstep = False
    evaluator = SERVER_RANK

    def setup(self) -> None:
        ctx = self.ctx
        self.net = build_net(ctx)
        self.model = self.net.model
        self.params = trainable(self.model)
        self._init_server(self.params)
        self.batches = Batches(ctx, self.net, ctx.rank, ctx.world, stream=ctx.rank)
        self.seq = 0
        self.pushed_sum = None  # tests: the sum of every gradient this worker pushed
        if ctx.dump_dir is not None:
            self.pushed_sum = torch.zeros(sum(p.numel() for p in self.params),
                                          dtype=torch.float64)

    def step(self, i: int, phase: str, deadline: float | None = None) -> dict[str, Any]:
        ctx = self.ctx
        x, y = self.batches.next()
        t0 = time.time()
        label = f"{phase} step {i}"
        (w, version, info), rec = timed_exchange(ctx, "pull", label, self.client.pull)
        ev = [rec]
        load_flat(self.params, w)
        delay, loss, _, _ = compute_step(ctx, self.model, self.params, (x, y), label)
        g = flat_grads(self.params)
        if self.pushed_sum is not None:
            self.pushed_sum += g.double().cpu()
        info, rec = timed_exchange(ctx, "push", label, lambda: self.client.push(
            ctx.rank, self.seq, version, g, len(x), phase))
        ev.append(rec)
        self.seq += 1
        self.updates += 1
        stop = bool(info["stop"]) or (deadline is not None and rec[3] >= deadline)
        t1 = time.time()
        return {"phase": phase, "i": i, "t0": t0, "t1": t1, "delay": delay, "n": len(x),
                "loss": float(loss.detach()), "ev": ev, "stop": stop, "version": version,
                "staleness": info["staleness"]}

    def finish(self) -> dict[str, Any]:
        rep = self._finish_server(self.seq, self.pushed_sum)
        rep["role"] = "server+worker" if self.server is not None else "worker"
        return rep


def barrier(ctx: Context, what: str) -> None:
    ctx.status.set("communication", what)
    dist.barrier()
