"""Model parallelism, pipelined: the network split into stages on different workers.

The network's top-level modules (an ``nn.Sequential``) are cut into one contiguous stage
per worker so that the most expensive stage is as cheap as possible, by the layer costs of
the neutral workload definition (``dlperf.perfmodel.partition``). A step runs the GPipe
schedule (Huang et al., 2019): the global batch is cut into micro-batches; every
micro-batch goes forward through the stages (activations sent with torch.distributed
send/recv), then every micro-batch goes backward (activation gradients sent back), then
each stage applies its SGD update. Micro-batches keep several stages busy at once; the
idle share that remains is the pipeline "bubble", (S-1)/(M+S-1) for equal stages.

The loss of each micro-batch is scaled by its share of the batch, so the accumulated
gradients and the summed loss equal those of the unsplit network on the whole batch (the
tests check it). A network with batch normalisation would see per-micro-batch statistics
instead, as in GPipe; the DLBench networks that split here (FCN, AlexNet) have none.

torch.distributed.pipelining exists and runs on CPU, but its schedules hide the transfers
inside the library; hand-written send/recv keep every transfer visible to the timing.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dlperf.backends.base import UnsupportedError
from dlperf.kinds.parallel.common import SGD, Batches, Strategy, build_net, loss_fn, trainable
from dlperf.perfmodel.partition import ELEMENTWISE_COST, child_costs, split_by_cost


def measured_costs(model: nn.Sequential, sample: torch.Tensor) -> list[float]:
    """Fallback when the neutral layers do not name the modules: torch's FLOP counter on one
    sample (forward FLOPs x 3 for forward and backward), elementwise work otherwise."""
    from torch.utils.flop_counter import FlopCounterMode

    costs, h = [], sample
    with torch.no_grad():
        for child in model.children():
            with FlopCounterMode(display=False) as c:
                h = child(h)
            f = float(c.get_total_flops())
            costs.append(3.0 * f if f else ELEMENTWISE_COST * h[0].numel())
    return costs


@torch.no_grad()
def boundary_shapes(model: nn.Sequential, sample: torch.Tensor) -> list[tuple]:
    """Per-sample output shape of every top-level module, from one sample's forward pass
    (the meta device would do it without computing, but its first use imports
    torch._dynamo: seconds per worker)."""
    was = model.training
    model.eval()
    h, shapes = sample, []
    try:
        for child in model.children():
            h = child(h)
            shapes.append(tuple(h.shape[1:]))
    finally:
        model.train(was)
    return shapes


class Pipeline(Strategy):
    name = "pipeline"
    lockstep = True

    @property
    def evaluator(self) -> int:  # the last stage (of the first group) holds the output
        return self.rank_of(0, self.ctx.opts.stages - 1)

    def rank_of(self, group: int, stage: int) -> int:
        """The rank running ``stage`` for replica ``group`` (the pipeline: one group)."""
        return stage

    def setup(self) -> None:
        ctx, o = self.ctx, self.ctx.opts
        S, M = o.stages, o.micro_batches
        groups = o.groups if o.strategy == "hybrid" else 1
        B = ctx.spec.batch_size // groups  # what one pipeline sees per step
        self.group, self.stage_index = (o.hybrid_place(ctx.rank) if o.strategy == "hybrid"
                                        else (0, ctx.rank))
        self.prev = self.rank_of(self.group, self.stage_index - 1)
        self.next = self.rank_of(self.group, self.stage_index + 1)
        self.net = build_net(ctx)
        model = self.net.model
        if not isinstance(model, nn.Sequential):
            raise UnsupportedError(f"{ctx.spec.network} is not a sequence of layers "
                                   f"({type(model).__name__}); the pipeline cannot split it")
        names = [n for n, _ in model.named_children()]
        sample = self.net.x[:1]
        costs = child_costs(names, self.net.config.layers())
        self.cost_source = "neutral layer FLOPs"
        if costs is None or not any(costs):
            costs, self.cost_source = measured_costs(model, sample), "torch FLOP counter"
        try:
            parts = split_by_cost(costs, S)
        except ValueError as e:
            raise UnsupportedError(f"pipeline over {S} workers: {e}") from None
        shapes = boundary_shapes(model, sample)
        mine = parts[self.stage_index]
        self.stage = nn.Sequential(OrderedDict((names[j], model[j]) for j in mine))
        self.in_shape = tuple(sample.shape[1:]) if mine[0] == 0 else shapes[mine[0] - 1]
        self.out_shape = shapes[mine[-1]]
        self.net.model = self.stage  # the other stages' modules are dropped with the model
        self.first, self.last = self.stage_index == 0, self.stage_index == S - 1
        self.opt = SGD(trainable(self.stage), ctx.opts.lr)
        # every stage of a pipeline draws the same batches (the first needs the inputs, the
        # last the labels): its group's share of the global batch, its own stream of data
        self.batches = Batches(ctx, self.net, self.group, groups, stream=self.group)
        self.M, self.B = M, B
        self.stages = [{"rank": self.rank_of(self.group, k), "stage": k,
                        "layers": [names[j] for j in p], "cost": sum(costs[j] for j in p)}
                       for k, p in enumerate(parts)]

    # --------------------------------------------------------------- transfers
    def _recv(self, shape: tuple, src: int, key: str, ev: list) -> torch.Tensor:
        t = torch.empty(shape, device=self.ctx.device)
        self.ctx.status.set("communication", f"receive from rank {src}, {key}")
        a = time.time()
        dist.recv(t, src=src)
        ev.append(["recv", key, a, time.time(), None, None])
        return t

    def _send(self, t: torch.Tensor, dst: int, key: str, ev: list) -> None:
        self.ctx.status.set("communication", f"send to rank {dst}, {key}")
        a = time.time()
        dist.send(t.contiguous(), dst=dst)
        ev.append(["send", key, a, time.time(), None, None])

    def reduce_grads(self, i: int, phase: str, ev: list) -> None:
        """After the backward passes, before the update (hybrid: average across groups)."""

    def step(self, i: int, phase: str, deadline: float | None = None) -> dict[str, Any]:
        ctx, r, prev, nxt = self.ctx, self.ctx.rank, self.prev, self.next
        x, y = self.batches.next()
        xs, ys = x.chunk(self.M), y.chunk(self.M)
        t0 = time.time()
        ev: list[list[Any]] = []
        delay, loss_sum = 0.0, 0.0
        self.opt.zero_grad()
        inputs, outputs = [], []
        for m in range(self.M):  # all forwards ...
            key = f"{phase}:{i}:f{m}"
            if self.first:
                inp = xs[m]
            else:
                inp = self._recv((len(xs[m]), *self.in_shape), prev, f"{key}:{prev}>{r}", ev)
                inp.requires_grad_()
            ctx.status.set("compute", f"forward, {phase} step {i} micro-batch {m}")
            delay += ctx.straggle(1.0 / self.M)
            # a received activation is a leaf that needs a gradient: feed a copy, so that a
            # stage starting with an in-place layer (AlexNet's ReLU) does not modify a leaf
            out = self.stage(inp if self.first else inp.clone())
            if self.last:
                out = loss_fn(out, ys[m]) * (len(ys[m]) / len(y))
                loss_sum += float(out.detach())
            else:
                self._send(out.detach(), nxt, f"{key}:{r}>{nxt}", ev)
            inputs.append(inp)
            outputs.append(out)
        for m in reversed(range(self.M)):  # ... then all backwards (GPipe)
            key = f"{phase}:{i}:b{m}"
            if self.last:
                ctx.status.set("compute", f"backward, {phase} step {i} micro-batch {m}")
                outputs[m].backward()
            else:
                g = self._recv(tuple(outputs[m].shape), nxt, f"{key}:{nxt}>{r}", ev)
                ctx.status.set("compute", f"backward, {phase} step {i} micro-batch {m}")
                outputs[m].backward(g)
            if not self.first:
                self._send(inputs[m].grad, prev, f"{key}:{r}>{prev}", ev)
        self.reduce_grads(i, phase, ev)
        ctx.status.set("compute", f"update, {phase} step {i}")
        self.dump_grads(self.stage, loss_sum)
        self.opt.step()
        self.updates += 1
        t1 = time.time()
        return {"phase": phase, "i": i, "t0": t0, "t1": t1, "delay": delay, "n": len(x),
                "loss": loss_sum if self.last else None, "ev": ev}

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float] | None:
        """Held-out loss and accuracy: the test set forward through every stage."""
        ctx = self.ctx
        if self.group != 0:  # the first group's pipeline evaluates (the weights agree)
            return None
        xt, yt = self.net.test_set(ctx.device)
        self.stage.eval()
        outs = []
        try:
            for k, c in enumerate(xt.split(max(1, self.B // self.M))):
                inp = c if self.first else self._recv((len(c), *self.in_shape), self.prev,
                                                      f"eval:{k}", [])
                out = self.stage(inp)
                if self.last:
                    outs.append(out)
                else:
                    self._send(out, self.next, f"eval:{k}", [])
        finally:
            self.stage.train()
        if not self.last:
            return None
        out = torch.cat(outs)
        return float(loss_fn(out, yt)), float((out.argmax(-1) == yt).float().mean())

    def finish(self) -> dict[str, Any]:
        self.dump_weights(self.stage)
        role = f"stage {self.stage_index}" + (f", group {self.group}"
                                               if self.ctx.opts.strategy == "hybrid" else "")
        return {"role": role, "stages": self.stages,
                "cost_source": self.cost_source, "in_shape": list(self.in_shape),
                "out_shape": list(self.out_shape)}
