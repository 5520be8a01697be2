"""Hybrid parallelism: the network split into a pipeline inside each group of workers
(model parallelism), the groups training on different shares of the batch (data
parallelism across groups).

``groups`` G replicas of an S-stage pipeline (S = workers / G). Each replica runs the
GPipe schedule of ``pipeline.py`` on its 1/G share of the global batch; after the backward
passes, the G workers that hold the same stage average their gradients with one
all-reduce (over that stage's own process group), then every stage applies the same SGD
update, so the replicas stay identical and the result is one process training on the
global batch (the tests check it).

Which ranks share a machine decides which traffic crosses the slower link: with
``hybrid_within='model'`` (the default) a group's consecutive ranks hold its pipeline (the
guide's "model within, data across": activations stay inside a machine, gradients
cross), with ``'data'`` consecutive ranks are the replicas of one stage ("data within,
model across": the all-reduce stays inside, activations cross).
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from dlperf.kinds.parallel.pipeline import Pipeline


class Hybrid(Pipeline):
    name = "hybrid"
    lockstep = True

    def rank_of(self, group: int, stage: int) -> int:
        return self.ctx.opts.hybrid_rank(group, stage)

    def setup(self) -> None:
        o = self.ctx.opts
        self.ctx.status.set("starting", "creating the stage process groups")
        # every rank takes part in creating every group, in the same order
        pgs = [dist.new_group([o.hybrid_rank(g, s) for g in range(o.groups)])
               for s in range(o.stages)]
        super().setup()
        self.pg = pgs[self.stage_index]

    def reduce_grads(self, i: int, phase: str, ev: list) -> None:
        """Average this stage's gradients over the groups: one all-reduce of a flat
        vector (the key names the collective, so that waiting for the slowest replica is
        told apart from the transfer)."""
        groups = self.ctx.opts.groups
        if groups == 1:
            return
        params = [p for p in self.stage.parameters() if p.grad is not None]
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        self.ctx.status.set("communication", f"all-reduce of stage {self.stage_index}, "
                                             f"{phase} step {i}")
        a = time.time()
        dist.all_reduce(flat, group=self.pg)
        ev.append(["allreduce", f"{phase}:{i}:ar{self.stage_index}", a, time.time(), None,
                   None])
        flat /= groups
        k = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[k:k + n].view_as(p.grad))
            k += n

    def finish(self) -> dict[str, Any]:
        rep = super().finish()
        rep["group"] = self.group
        return rep
