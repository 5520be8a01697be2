"""Torch-side pieces every strategy shares: the rank's context, the network and its data,
the loss, evaluation, flat parameter vectors and the timing of DDP's all-reduce.

Times are wall-clock seconds from ``time.time()``: the launcher matches communication
events across ranks by their start times, and CLOCK_REALTIME is one clock for every
process of a machine (across machines it is as close as their NTP sync, usually well
under a millisecond; docs/parallel.md says so).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from dlperf.backends import torch_backend as tb
from dlperf.backends.base import UnsupportedError
from dlperf.core.spec import RunSpec
from dlperf.core.target_rules import Budget, Goal, accuracy_and_loss_goals
from dlperf.kinds.parallel.options import ParallelOptions
from dlperf.kinds.parallel.status import StatusBoard


class StepLog:
    """Every step's record, kept in memory for the final report and appended to this
    rank's progress file as it happens, so a crash or a kill loses nothing measured."""

    def __init__(self, path: Path):
        self._f = path.open("a", buffering=1)
        self.steps: list[dict[str, Any]] = []
        self.evals: list[dict[str, Any]] = []

    def emit(self, event: dict[str, Any]) -> None:
        self._f.write(json.dumps(event, separators=(",", ":")) + "\n")

    def step(self, rec: dict[str, Any]) -> None:
        self.steps.append(rec)
        self.emit({"log": "step", **rec})

    def eval(self, rec: dict[str, Any]) -> None:
        self.evals.append(rec)
        self.emit({"log": "eval", **rec})

    def close(self) -> None:
        self._f.close()


@dataclass
class Context:
    spec: RunSpec
    opts: ParallelOptions
    rank: int
    world: int
    local_rank: int
    local_world: int
    node: int
    device: torch.device
    backend: str
    outdir: Path
    status: StatusBoard
    log: StepLog
    comm_timeout_s: float
    dump_dir: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: the workers' own process group when dedicated servers share the world (None: all)
    group: Any = None

    @property
    def is_server(self) -> bool:
        """A dedicated parameter-server rank (ranks past the workers)."""
        return self.rank >= self.opts.workers

    @property
    def is_straggler(self) -> bool:
        return self.rank == self.opts.straggler_rank

    def straggle(self, share: float = 1.0) -> float:
        """The straggler's extra compute time (``share`` of its per-step delay)."""
        if not self.is_straggler:
            return 0.0
        d = self.opts.straggler_delay_s * share
        time.sleep(d)
        return d

    def bcast(self, values: list[float], src: int, group: Any = None) -> list[float]:
        """Broadcast a few numbers from ``src`` (decisions such as 'stop' or a step count)
        to the workers (``group``: another group)."""
        dev = self.device if self.backend == "nccl" else torch.device("cpu")
        t = torch.tensor(values, dtype=torch.float64, device=dev)
        dist.broadcast(t, src=src, group=group if group is not None else self.group)
        return t.cpu().tolist()

    def dump(self, name: str, obj: Any) -> None:
        """For the tests: tensors written to $DLPERF_PARALLEL_DUMP (never in a normal run)."""
        if self.dump_dir is not None:
            torch.save(obj, self.dump_dir / f"{name}_rank{self.rank}.pt")


# ----------------------------------------------------------------------------- network
@dataclass
class Net:
    """The rank's copy of the network (the same seed on every rank: the same weights)."""

    model: nn.Module
    x: torch.Tensor  # the synthetic global batch (DLBench's synthetic data)
    y: torch.Tensor
    config: Any
    dataset: Any = None  # dlperf.workloads.real_data.Dataset for time-to-target runs
    flatten: bool = False  # dense networks take real data flattened
    flops_per_sample: float = 0.0
    param_count: int = 0
    _test: tuple[torch.Tensor, torch.Tensor] | None = None

    def test_set(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._test is None:
            ds = self.dataset
            self._test = (to_input(ds.x_test, self.flatten, device),
                          torch.as_tensor(ds.y_test, dtype=torch.long, device=device))
        return self._test


def to_input(x: np.ndarray, flatten: bool, device: torch.device) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(x, dtype=np.float32), device=device)
    return t.reshape(t.shape[0], -1) if flatten else t


def adapt_config(cfg: Any, ds: Any) -> tuple[Any, bool]:
    """The network's configuration with its input and output sized for a real data set:
    a dense network takes the samples flattened, a convolutional one takes square images.
    """
    names = {f.name for f in dataclasses.fields(cfg)}
    shape = tuple(ds.input_shape)
    if "dataset" in names:  # the guide's families are sized by the data set they train on
        try:
            cfg = dataclasses.replace(cfg, dataset=ds.name)
            cfg.layers()  # the family checks that it takes this data set
        except (TypeError, ValueError, KeyError) as e:
            raise UnsupportedError(f"{type(cfg).__name__} cannot take the data set "
                                   f"'{ds.name}': {e}") from None
        if tuple(cfg.input_shape()) != shape:
            raise UnsupportedError(f"{type(cfg).__name__} takes {cfg.input_shape()}, the data "
                                   f"set '{ds.name}' has samples shaped {shape}")
        return cfg, False
    if {"inputs", "classes"} <= names:
        return dataclasses.replace(cfg, inputs=math.prod(shape), classes=ds.classes), True
    if {"image", "channels_in", "classes"} <= names and len(shape) == 3 and shape[1] == shape[2]:
        return dataclasses.replace(cfg, image=shape[1], channels_in=shape[0],
                                   classes=ds.classes), False
    raise UnsupportedError(f"network config {type(cfg).__name__} cannot take the data set "
                           f"'{ds.name}' (samples shaped {shape})")


def build_net(ctx: Context) -> Net:
    from dlperf import workloads
    from dlperf.workloads import real_data as data

    spec = ctx.spec
    _, _, cfg = workloads.resolve(spec.network, spec.size, spec.params)
    ds, flatten = None, False
    if ctx.opts.data:
        ds = data.load(ctx.opts.data, spec.seed)
        cfg, flatten = adapt_config(cfg, ds)
    # the torch backend builds it: the same weights and data as a single-process run of
    # this network (the tests compare against its trainer); every strategy then applies
    # plain SGD (--lr), not a family's own optimiser
    model, x, y = tb.build_classifier(cfg, spec.batch_size, ctx.device, spec.seed)
    flops = float(sum(layer.train_flops() for layer in cfg.layers()))
    return Net(model, x, y, cfg, ds, flatten, flops, tb.trainable_params(model))


def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy, as ``TorchTrainer`` computes it (per step for a language model)."""
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


class Batches:
    """A worker's mini-batches: its fixed shard of the synthetic global batch, or an
    endless shuffled stream of the real training split (its own order per ``stream``)."""

    def __init__(self, ctx: Context, net: Net, shard: int, shards: int, stream: int):
        self.size = ctx.spec.batch_size // shards
        self.device, self.flatten = ctx.device, net.flatten
        self._fixed = None
        self._it = None
        if net.dataset is None:
            n = ctx.spec.batch_size // shards
            self._fixed = (net.x[shard * n:(shard + 1) * n], net.y[shard * n:(shard + 1) * n])
        else:
            rng = np.random.default_rng([ctx.spec.seed, stream])
            self._it = net.dataset.batches(self.size, rng)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._fixed is not None:
            return self._fixed
        x, y = next(self._it)
        return (to_input(x, self.flatten, self.device),
                torch.as_tensor(y, dtype=torch.long, device=self.device))


@torch.no_grad()
def evaluate(model: nn.Module, net: Net, device: torch.device) -> tuple[float, float]:
    """Held-out loss and accuracy."""
    x, y = net.test_set(device)
    was = model.training
    model.eval()
    try:
        out = model(x)
    finally:
        model.train(was)
    return float(loss_fn(out, y)), float((out.argmax(-1) == y).float().mean())


def goals(opts: ParallelOptions) -> list[Goal]:
    """The held-out goals of a time-to-target run (``dlperf.core.target_rules``)."""
    return accuracy_and_loss_goals(opts.target_accuracy, opts.target_loss)


def budget(opts: ParallelOptions) -> Budget:
    """The training budget of a time-to-target run, in global mini-batches and seconds."""
    return Budget(max_steps=opts.max_steps, max_time_s=opts.max_time_s)


# ----------------------------------------------------------------------------- one step
def compute_step(ctx: Context, model: nn.Module, params: list[nn.Parameter],
                 batch: tuple[torch.Tensor, torch.Tensor], label: str,
                 timer: AllreduceTimer | None = None) -> tuple[float, torch.Tensor, float, float]:
    """A worker's compute of one step: the straggler's delay, fresh gradients, the loss and
    its backward pass (with DDP-wrapped ``model``, through the all-reduce, whose buckets
    ``timer`` records). Returns (delay, loss, backward start, backward end)."""
    x, y = batch
    ctx.status.set("compute", f"compute, {label}")
    delay = ctx.straggle()
    for p in params:
        p.grad = None
    loss = loss_fn(model(x), y)
    if timer is not None:
        timer.begin(label)
    bw0 = time.time()
    loss.backward()
    return delay, loss, bw0, time.time()


def timed_exchange(ctx: Context, kind: str, label: str,
                   call: Callable[[], Any]) -> tuple[Any, list[Any]]:
    """A push or pull to the parameter server, timed: (its answer, its event record
    [kind, key, start, end, lock wait, server work]); ``call`` returns the server's info
    dict (a push) or a tuple ending with it (a pull)."""
    ctx.status.set("communication", f"{kind}, {label}")
    a = time.time()
    out = call()
    b = time.time()
    info = out[-1] if isinstance(out, tuple) else out
    return out, [kind, None, a, b, info["wait"], info["server"]]


# ----------------------------------------------------------------------------- vectors
def trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


class SGD:
    """Plain SGD, the update torch.optim.SGD(lr) makes on CPU tensors (p -= lr * grad, no
    momentum), without torch.optim: its first use imports torch._dynamo, seconds of
    start-up per worker."""

    def __init__(self, params: list[nn.Parameter], lr: float):
        self.params, self.lr = params, lr

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p.add_(p.grad, alpha=-self.lr)


def flat_grads(params: list[nn.Parameter]) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for p in params])


@torch.no_grad()
def load_flat(params: list[nn.Parameter], vec: torch.Tensor) -> None:
    """Copy (not alias: the vector's buffer is reused) a flat vector into the parameters."""
    i = 0
    for p in params:
        n = p.numel()
        p.copy_(vec[i:i + n].view_as(p))
        i += n


# ----------------------------------------------------------------------------- all-reduce
class AllreduceTimer:
    """DDP communication hook: the same averaging all-reduce as DDP's default, with each
    bucket's launch and completion times recorded.

    DDP launches a bucket's all-reduce as soon as its gradients are ready, so most of the
    communication overlaps the rest of the backward pass. The launcher separates what the
    step waited for (from the last launch, when compute is done, to the end of backward)
    from what ran hidden behind compute, and splits the blocked part into waiting for the
    slowest rank and transferring (see ``dlperf.kinds.parallel.results``).
    """

    def __init__(self, ddp: nn.Module, group: Any, size: int, ctx: Context):
        self.group, self.size, self.ctx = group, size, ctx
        self.buckets: list[list[float]] = []
        self.label = ""
        # DDP inspects the hook's annotations; a plain (unannotated) wrapper passes
        ddp.register_comm_hook(None, lambda state, bucket: self._hook(bucket))

    def _hook(self, bucket: Any) -> torch.futures.Future:
        t = time.time()
        if bucket.is_last():
            self.ctx.status.set("communication", f"all-reduce, {self.label}")
        buf = bucket.buffer()
        buf.div_(self.size)
        fut = dist.all_reduce(buf, group=self.group, async_op=True).get_future()
        idx, nbytes = bucket.index(), buf.numel() * buf.element_size()

        def done(f: torch.futures.Future) -> torch.Tensor:
            self.buckets.append([idx, t, time.time(), nbytes])
            return f.value()[0]

        return fut.then(done)

    def begin(self, label: str) -> None:
        self.label = label
        self.buckets = []

    def record(self, key: str, bw_start: float, bw_end: float) -> dict[str, Any]:
        return {"key": key, "bw": [bw_start, bw_end], "b": self.buckets}


def wrap_ddp(model: nn.Module, ctx: Context, group: Any = None) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DDP(model, device_ids=ids, process_group=group)


# ----------------------------------------------------------------------------- strategy
class Strategy:
    """One way of training on several workers. ``step`` runs one local step and returns its
    record; the driver (``dlperf.kinds.parallel.run``) decides how many and when to stop."""

    name = ""
    #: every rank runs every step together (sync, pipeline); else workers run freely
    lockstep = True
    #: the rank that evaluates held-out quality in a time-to-target run
    evaluator = 0

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.updates = 0  # parameter updates this rank applied (or, for a PS, pushed)
        self._dumped_grads = False

    def setup(self) -> None:
        raise NotImplementedError

    def step(self, i: int, phase: str, deadline: float | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def evaluate(self) -> tuple[float, float] | None:
        """Lockstep strategies: a collective; (loss, accuracy) on the evaluator, else None."""
        raise NotImplementedError

    def finish(self) -> dict[str, Any]:
        """Tear down (RPC, ...) and return this rank's strategy-specific report."""
        return {}

    def dump_grads(self, model: nn.Module, loss: float) -> None:
        """Tests: the gradients of the first step, by parameter name, and its loss (a
        sharded gradient gathered whole: every worker calls this)."""
        if self.ctx.dump_dir is not None and not self._dumped_grads:
            self._dumped_grads = True
            self.ctx.dump("grads", {"loss": loss, "grads": {
                n: whole(p.grad.detach()).clone() for n, p in model.named_parameters()
                if p.grad is not None}})

    def dump_weights(self, model: nn.Module) -> None:
        """Tests: the weights after the last update (nothing copied in a normal run: a
        copy of every weight would count in the worker's peak memory)."""
        if self.ctx.dump_dir is None:
            return
        self.ctx.dump("weights", {"updates": self.updates, "weights": {
            n: whole(p.detach()).clone() for n, p in model.named_parameters()}})


def whole(t: torch.Tensor) -> torch.Tensor:
    """A sharded tensor (fsdp's DTensor) gathered whole, a collective every worker must
    call; a plain one as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t
