"""Synchronous data parallelism: DistributedDataParallel, the global batch split evenly
across the workers, gradients averaged by an all-reduce every step.

Every worker holds the whole network and the same weights; after the all-reduce every
worker has the gradient of the global batch, so each applies the same SGD update and the
replicas stay identical: the result is one worker training on the global batch, which the
tests check. The price: every step waits for the slowest worker.
"""

from __future__ import annotations

import time
from typing import Any

from torch import nn

from dlperf.kinds.parallel.common import (
    SGD,
    AllreduceTimer,
    Batches,
    Strategy,
    build_net,
    compute_step,
    evaluate,
    trainable,
    wrap_ddp,
)


class SyncDataParallel(Strategy):
    name = "sync"
    lockstep = True
    evaluator = 0

    def setup(self) -> None:
        ctx = self.ctx
        self.net = build_net(ctx)
        self.model = self.net.model
        self.ddp, self.timer = self.wrap(self.model)
        self.opt = SGD(trainable(self.model), ctx.opts.lr)
        self.batches = Batches(ctx, self.net, ctx.rank, ctx.world, stream=ctx.rank)

    def wrap(self, model: nn.Module) -> tuple[nn.Module, AllreduceTimer | None]:
        """The network as a step runs it (DDP), and what times its communication."""
        ddp = wrap_ddp(model, self.ctx)
        return ddp, AllreduceTimer(ddp, None, self.ctx.world, self.ctx)

    def step(self, i: int, phase: str, deadline: float | None = None) -> dict[str, Any]:
        ctx = self.ctx
        x, y = self.batches.next()
        t0 = time.time()
        # backward returns once every bucket's all-reduce has completed
        delay, loss, bw0, bw1 = compute_step(ctx, self.ddp, self.opt.params, (x, y),
                                             f"{phase} step {i}", self.timer)
        ctx.status.set("compute", f"update, {phase} step {i}")
        self.dump_grads(self.model, float(loss.detach()))
        self.opt.step()
        self.updates += 1
        rec = {"phase": phase, "i": i, "t0": t0, "t1": time.time(), "delay": delay,
               "n": len(x), "loss": float(loss.detach())}
        if self.timer is not None:
            rec["ddp"] = self.timer.record(f"w:{phase}:{i}", bw0, bw1)
        return rec

    def evaluate(self) -> tuple[float, float] | None:
        if self.ctx.rank != self.evaluator:
            return None
        return evaluate(self.model, self.net, self.ctx.device)

    def finish(self) -> dict[str, Any]:
        self.dump_weights(self.model)
        return {"role": "worker"}
