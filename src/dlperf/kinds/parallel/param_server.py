"""Asynchronous data parallelism through a parameter server (torch.distributed.rpc).

The server holds the weights: beside rank 0's own worker (``servers`` 0), or sharded
over dedicated server processes (``servers`` N: ``ps_server``). Each worker, on its own
clock: pulls the weights and their version, computes the gradient of its share of the
batch, pushes it; the server applies every push as it arrives (plain SGD) and counts a
version. Nobody waits for anybody except for the server's lock, so a slow worker slows
only itself, but a gradient may have been computed from weights that other pushes have
since changed: its staleness, the number of versions applied between the pull and the
push, is recorded for every push.

With a period (``push_every`` k, the guide's "only updating them periodically"), a worker
exchanges only every k steps: it pulls, runs k local steps (applying its own SGD update
after each but the last), then pushes the sum of its k gradients; the server applies that
sum (so its weights end where the worker's would have, had nobody else pushed). The drift,
the distance between the worker's weights after its k steps and the server's when the
push arrives, is recorded at every exchange. k = 1 is plain asynchronous SGD.

Exactly once: each push carries (worker, sequence number); the server applies a given
pair once and counts any repeat as a duplicate (the RPC layer does not retry, so none are
expected; the tests check that every push is applied exactly once).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from dlperf.kinds.parallel.common import (
    Batches,
    Strategy,
    build_net,
    compute_step,
    flat_grads,
    load_flat,
    timed_exchange,
    trainable,
)
from dlperf.kinds.parallel.ps_client import SERVER_RANK, ServerTraining

__all__ = ["SERVER_RANK", "AsyncParameterServer"]


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
        self.batches = Batches(ctx, self.net, ctx.rank, ctx.opts.workers, stream=ctx.rank)
        self.seq = 0
        self.local = 0  # local steps since the last pull
        self.acc: torch.Tensor | None = None  # the period's summed gradient
        self.pushed_sum = None  # tests: the sum of every gradient this worker pushed
        if ctx.dump_dir is not None:
            self.pushed_sum = torch.zeros(sum(p.numel() for p in self.params),
                                          dtype=torch.float64)

    def step(self, i: int, phase: str, deadline: float | None = None) -> dict[str, Any]:
        ctx, period = self.ctx, self.ctx.opts.push_every
        x, y = self.batches.next()
        t0 = time.time()
        label = f"{phase} step {i}"
        ev: list[list[Any]] = []
        if self.local == 0:  # the start of a period: the server's current weights
            (w, _version, _info), rec = timed_exchange(
                ctx, "pull", label, lambda: self.client.pull(ctx.rank))
            ev.append(rec)
            load_flat(self.params, w)
            self.acc = None
        delay, loss, _, _ = compute_step(ctx, self.model, self.params, (x, y), label)
        g = flat_grads(self.params)  # a fresh vector every step
        self.acc = g if self.acc is None else self.acc.add_(g)
        self.local += 1
        out: dict[str, Any] = {"staleness": None, "drift": None, "stop": False}
        if self.local < period:  # a local step: the worker's own SGD update
            with torch.no_grad():
                for p in self.params:
                    p.add_(p.grad, alpha=-ctx.opts.lr)
        else:
            out = self._push(label, len(x) * period, phase, ev)
        stop = out["stop"] or (deadline is not None and time.time() >= deadline)
        return {"phase": phase, "i": i, "t0": t0, "t1": time.time(), "delay": delay,
                "n": len(x), "loss": float(loss.detach()), "ev": ev, "stop": stop,
                "staleness": out["staleness"], "drift": out["drift"],
                "weights_norm": out.get("weights_norm")}

    def _push(self, label: str, samples: int, phase: str, ev: list) -> dict[str, Any]:
        ctx, acc = self.ctx, self.acc
        assert acc is not None
        if self.pushed_sum is not None:
            self.pushed_sum += acc.double().cpu()
        info, rec = timed_exchange(ctx, "push", label, lambda: self.client.push(
            ctx.rank, self.seq, acc, samples, phase))
        ev.append(rec)
        self.seq += 1
        self.updates += 1
        self.local = 0
        self._server_samples = info["samples"]
        return info

    def finish(self) -> dict[str, Any]:
        rep = self._finish_server(self.seq, self.pushed_sum)
        rep["role"] = "server+worker" if self.server is not None else "worker"
        return rep

