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

from typing import Any

from torch import nn

from dlperf.backends.base import UnsupportedError
from dlperf.kinds.parallel.common import evaluate
from dlperf.kinds.parallel.sync import SyncDataParallel


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


class ShardedDataParallel(SyncDataParallel):
    """Sync's step on a sharded network: its backward returns once every unit's
    gradients are reduce-scattered; the update applies to each worker's shards."""

    name = "fsdp"

    def setup(self) -> None:
        if self.ctx.device.type != "cpu":
            raise UnsupportedError("the fsdp strategy runs on CPU workers (gloo) here")
        super().setup()

    def wrap(self, model: nn.Module) -> tuple[nn.Module, None]:
        return shard(model, self.ctx.group), None  # its collectives: not timed one by one

    def evaluate(self) -> tuple[float, float] | None:
        # every worker runs the forward: each unit's weights are gathered from all shards
        out = evaluate(self.model, self.net, self.ctx.device)
        return out if self.ctx.rank == self.evaluator else None
