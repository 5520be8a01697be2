"""Sharded data parallelism: PyTorch's ``fully_shard`` (FSDP2), the global batch split
evenly across the workers as in synchronous data parallelism, each worker holding only
its shard of the weights, gradients and optimizer state.

Each of the network's top-level modules with weights is a unit of its own (and the whole
network the last): before a unit's forward its weights are all-gathered from every
worker's shard and freed again after it (``reshard_after_forward``: ZeRO stage 3,
Rajbhandari et al., "ZeRO", 2020, section 5.3; Zhao et al., "PyTorch FSDP", 2023), its
backward gathers them once more, and its gradients are reduce-scattered, each worker
keeping the average of its shard. Plain SGD on the shards then gives every worker the
update one worker would make on the global batch (the tests check it against one
process). The price beside DDP: 1.5 x its communication volume, for a worker's memory of
the weights, gradients and optimizer state divided by the number of workers.

PyTorch runs it on gloo with CPU workers (torch 2.13: all-gather and reduce-scatter are
both gloo collectives); its collectives are not timed one by one here, so the run's
breakdown counts them inside the step.
"""

from __future__ import annotations

import time
from typing import Any

from torch import nn

from dlperf.backends.base import UnsupportedError
from dlperf.kinds.parallel.common import (
    SGD,
    Batches,
    Strategy,
    build_net,
    compute_step,
    evaluate,
    trainable,
)


def shard(model: nn.Module, group: Any = None) -> nn.Module:
    """``fully_shard`` on every top-level module that holds weights, then on the whole
    network (its remaining weights, and the root that starts each step's gathers)."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    mesh = DeviceMesh.from_group(group, "cpu") if group is not None else None
    for child in model.children():
        if any(p.requires_grad for p in child.parameters()):
            fully_shard(child, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def full(t: Any) -> Any:
    """A sharded tensor gathered whole (a collective: every worker calls it), a plain one
    as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


class ShardedDataParallel(Strategy):
    name = "fsdp"
    lockstep = True
    evaluator = 0

    def setup(self) -> None:
        ctx = self.ctx
        if ctx.device.type != "cpu":
            raise UnsupportedError("the fsdp strategy runs on CPU workers (gloo) here")
        self.net = build_net(ctx)
        self.model = shard(self.net.model, ctx.group)
        self.opt = SGD(trainable(self.model), ctx.opts.lr)
        self.batches = Batches(ctx, self.net, ctx.rank, ctx.world, stream=ctx.rank)

    def step(self, i: int, phase: str, deadline: float | None = None) -> dict[str, Any]:
        ctx = self.ctx
        x, y = self.batches.next()
        t0 = time.time()
        # the backward returns once every unit's gradients are reduce-scattered
        delay, loss, _, _ = compute_step(ctx, self.model, self.opt.params, (x, y),
                                         f"{phase} step {i}")
        ctx.status.set("compute", f"update, {phase} step {i}")
        self._dump_first_grads(float(loss.detach()))
        self.opt.step()
        self.updates += 1
        return {"phase": phase, "i": i, "t0": t0, "t1": time.time(), "delay": delay,
                "n": len(x), "loss": float(loss.detach())}

    def evaluate(self) -> tuple[float, float] | None:
        # every worker runs the forward: each unit's weights are gathered from all shards
        out = evaluate(self.model, self.net, self.ctx.device)
        return out if self.ctx.rank == self.evaluator else None

    def finish(self) -> dict[str, Any]:
        if self.ctx.dump_dir is not None:  # tests: the whole weights, gathered by all
            self.ctx.dump("weights", {"updates": self.updates, "weights": {
                n: full(p.detach()).clone() for n, p in self.model.named_parameters()}})
        return {"role": "worker"}

    def _dump_first_grads(self, loss: float) -> None:
        """Tests: the first step's whole gradients (gathered by every worker)."""
        if self.ctx.dump_dir is None or self._dumped_grads:
            return
        self._dumped_grads = True
        self.ctx.dump("grads", {"loss": loss, "grads": {
            n: full(p.grad.detach()).clone() for n, p in self.model.named_parameters()
            if p.grad is not None}})
