"""Mixed-asynchronous training: synchronous inside groups, asynchronous between them.

The workers form ``groups`` equal groups. Inside a group, DDP averages the gradients
every step (an all-reduce over the group's own process group); the group's leader (its
first rank) pushes the group's gradient to the parameter server on rank 0, pulls the
current weights and broadcasts them to its group. Groups never wait for each other, only
for the server, so a slow worker holds up its own group and no other; staleness is counted
per group push, as for the asynchronous strategy.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from dlperf.kinds.parallel.common import (
    AllreduceTimer,
    Batches,
    Strategy,
    build_net,
    compute_step,
    flat_grads,
    load_flat,
    timed_exchange,
    trainable,
    wrap_ddp,
)
from dlperf.kinds.parallel.ps_client import SERVER_RANK, ServerTraining


class MixedAsync(ServerTraining, Strategy):
    name = "mixed"
    lockstep = False
    evaluator = SERVER_RANK

    def setup(self) -> None:
        ctx, o = self.ctx, self.ctx.opts
        self.group = o.group_of(ctx.rank)
        members = o.group_ranks(self.group)
        self.leader = members[0]
        ctx.status.set("starting", "creating the group process groups")
        # every rank takes part in creating every group, in the same order
        pgs = [dist.new_group(o.group_ranks(g)) for g in range(o.groups)]
        self.pg = pgs[self.group]
        self.net = build_net(ctx)
        self.model = self.net.model
        self.params = trainable(self.model)
        self.ddp = wrap_ddp(self.model, ctx, group=self.pg)
        self.timer = AllreduceTimer(self.ddp, self.pg, len(members), ctx)
        self._init_server(self.params)
        self.n = sum(p.numel() for p in self.params)
        # weights, then a stop flag and the weights' version: one broadcast per step
        self.buf = torch.empty(self.n + 2, device=ctx.device)
        self.batches = Batches(ctx, self.net, ctx.rank, ctx.world, stream=ctx.rank)
        self.seq = 0
        self.pushed_sum = None
        if ctx.dump_dir is not None and ctx.rank == self.leader:
            self.pushed_sum = torch.zeros(self.n, dtype=torch.float64)

    def step(self, i: int, phase: str, deadline: float | None = None) -> dict[str, Any]:
        ctx = self.ctx
        x, y = self.batches.next()
        t0 = time.time()
        label = f"{phase} step {i}"
        # the group's all-reduce happens in the backward pass
        delay, loss, bw0, bw1 = compute_step(ctx, self.ddp, self.params, (x, y), label,
                                             self.timer)
        ev: list[list[Any]] = []
        staleness = None
        if ctx.rank == self.leader:
            g = flat_grads(self.params)
            if self.pushed_sum is not None:
                self.pushed_sum += g.double().cpu()
            samples = len(x) * len(ctx.opts.group_ranks(self.group))
            info, rec = timed_exchange(ctx, "push", label, lambda: self.client.push(
                ctx.rank, self.seq, g, samples, phase))
            ev.append(rec)
            staleness = info["staleness"]
            self._server_samples = info["samples"]
            self.seq += 1
            (w, version, pinfo), rec = timed_exchange(ctx, "pull", label,
                                                      lambda: self.client.pull(ctx.rank))
            ev.append(rec)
            stop = info["stop"] or pinfo["stop"] or (deadline is not None and rec[3] >= deadline)
            self.buf[: self.n] = w
            self.buf[self.n] = 1.0 if stop else 0.0
            self.buf[self.n + 1] = float(version)
        ctx.status.set("communication", f"broadcast from the group leader, {phase} step {i}")
        a = time.time()
        dist.broadcast(self.buf, src=self.leader, group=self.pg)
        b = time.time()
        ev.append(["bcast", f"{phase}:{i}:bc:{self.group}", a, b, None, None])
        load_flat(self.params, self.buf[: self.n])
        self.updates += 1
        t1 = time.time()
        return {"phase": phase, "i": i, "t0": t0, "t1": t1, "delay": delay, "n": len(x),
                "loss": float(loss.detach()), "ev": ev, "stop": bool(self.buf[self.n] > 0),
                "ddp": self.timer.record(f"g{self.group}:{phase}:{i}", bw0, bw1),
                "staleness": staleness}

    def finish(self) -> dict[str, Any]:
        rep = self._finish_server(self.seq, self.pushed_sum)
        rep["group"] = self.group
        rep["role"] = ("server+" if self.server is not None else "") + (
            "leader" if self.ctx.rank == self.leader else "worker")
        return rep
