"""predict(): time per mini-batch of a workload on catalogue hardware, for a strategy.

The batch is the global mini-batch, as in ``dlperf parallel``: data-parallel strategies
split it evenly over the devices, the pipeline cuts it into micro-batches. Nothing here
is fitted to a measured time: rates come from the catalogue, efficiencies from
``Efficiencies``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from dlperf import workloads
from dlperf.core import environment
from dlperf.core.errors import UsageError
from dlperf.perfmodel import catalogue, local, scaled, schedule, sharing
from dlperf.perfmodel import formulas as f
from dlperf.perfmodel.catalogue import PRECISIONS, Device, Link
from dlperf.perfmodel.compute import LayerTiming, roofline_timing
from dlperf.perfmodel.costs import WEIGHT_BYTES, layer_costs
from dlperf.perfmodel.efficiency import Efficiencies
from dlperf.perfmodel.fit import nearest_world
from dlperf.perfmodel.memory import (
    BATCH_SEARCH_LIMIT,
    MemoryBreakdown,
    accumulated,
    largest_batch,
    step_memory,
    worker_step_memory,
)
from dlperf.perfmodel.result import Breakdown, LayerTime, MemoryMargin, Prediction
from dlperf.workloads.base import Layer

STRATEGIES = ("single", "sync", "async", "mixed", "pipeline", "fsdp")
COLLECTIVES = ("ring", "tree")
#: names that mean "this machine": its rates must come from calibration, not a datasheet
LOCAL_NAMES = ("local", "this-machine")
#: families whose step is not one forward and one backward pass through a chain of layers
NOT_A_CHAIN = {
    "gan": "a GAN trains two networks in turn",
    "recursive": "a recursive net composes over a tree, not a chain of layers",
    "rbm": "an RBM trains by contrastive divergence, not backpropagation through layers",
}


def resolve_device(device: str | Device) -> Device:
    """A catalogue name or a ready Device (e.g. one filled from calibration)."""
    if isinstance(device, Device):
        return device
    if device in LOCAL_NAMES:
        raise UsageError(
            "predictions for this machine need its calibration (its measured matmul and "
            "bandwidth rates), which dlperf does not have yet; choose a catalogue device "
            "(dlperf devices)"
        )
    return catalogue.device(device)


def predict(
    network: str,
    *,
    device: str | Device,
    size: str | None = None,
    batch_size: int | None = None,
    precision: str = "fp32",
    devices: int = 1,
    nodes: int = 1,
    strategy: str = "single",
    link: str | Link | None = None,
    inter_link: str | Link | None = None,
    collective: str = "ring",
    groups: int | None = None,
    micro_batches: int | None = None,
    straggler_s: float = 0.0,
    params: dict[str, Any] | None = None,
    efficiencies: Efficiencies | None = None,
    baseline_bytes: float = 0.0,
    threads: int | None = None,
    framework: str = "torch",
    cores: int | None = None,
    server_drift: bool = False,
    memory_margin: MemoryMargin | None = None,
) -> Prediction:
    """Time per mini-batch of ``network`` on ``devices`` x ``device`` (spread evenly over
    ``nodes``) with ``strategy``. ``link`` joins devices in a node (default: the device's
    peer link, else its host link), ``inter_link`` joins nodes. ``straggler_s`` slows one
    worker by that much per step. ``baseline_bytes``: the framework's runtime memory per
    process (this machine's calibration measures it; 0 for a catalogue GPU's device
    memory). ``threads``: on a catalogue CPU, the threads of the run (default: all its
    cores; ``catalogue.on_threads``). ``framework``: on a catalogue GPU, whose reference
    curves are scaled to it (PyTorch's where the reference has none of that framework;
    the prediction's ``curves`` says whose). ``cores``: the CPU cores of one node that
    the workers of a calibrated device share (this machine's, where ``dlperf parallel``
    pins them); with none given, no core is taken to be spare for communication.
    ``server_drift``: the parameter server also measures each push's drift, as ``dlperf
    parallel``'s does (the runs it predicts); a plain server does not. ``memory_margin``:
    the memory model's validated error (this machine's steps, or the GPU peaks dlperf
    measured), which the largest batch that fits is also given with
    (``max_batch_with_margin``). Bad input raises UsageError (one line)."""
    cal = efficiencies or Efficiencies()
    wl, size, cfg = workloads.resolve(network, size, params)
    batch = wl.default_batch if batch_size is None else batch_size
    dev = catalogue.on_threads(resolve_device(device), threads)
    _check(batch, precision, devices, nodes, strategy, collective, straggler_s)
    dev.peak_flops(precision)  # refuses a precision the device has no rate for
    cal, note, curves = _with_scaled(cal, dev, precision, framework)
    ctx = _Context(wl, size, cfg, batch, dev, precision, cal, devices, nodes, collective,
                   straggler_s, link, inter_link, baseline=baseline_bytes,
                   catalogued=isinstance(device, str), curves=curves, cores=cores,
                   threads=threads)
    ctx.server_drift = server_drift
    ctx.margin = memory_margin
    if note:
        ctx.notes.append(note)
    if strategy == "pipeline":
        return _pipeline(ctx, micro_batches, groups)
    if micro_batches not in (None, 1):
        raise UsageError("micro_batches applies to the pipeline strategy only")
    if strategy != "mixed" and groups not in (None, 1):
        raise UsageError(f"groups applies to the mixed strategy only (got strategy {strategy})")
    if batch % devices:
        raise UsageError(f"the global batch {batch} does not split evenly over {devices} "
                         "devices; choose a multiple of the device count")
    return _data_parallel(ctx, strategy, groups)


def _with_scaled(cal: Efficiencies, dev: Device, precision: str,
                 framework: str) -> tuple[Efficiencies, str, str | None]:
    """``cal`` with the reference GPU's curves of ``framework`` scaled to ``dev``
    (``perfmodel.scaled``) where ``dev`` is a GPU without curves of its own, the note that
    says so, and whose curves they are (None: none scaled)."""
    if not cal.scaled or dev.kind != "gpu" or cal.fitted(dev) is not None:
        return cal, "", None
    got = scaled.scaled_fit(dev, precision, framework=framework)
    if got is None:
        return cal, "", None
    fit, note = got
    return (cal.model_copy(update={"kernels": {**cal.kernels, dev.name: fit}}), note,
            fit.framework)


def _check(batch: Any, precision: str, devices: int, nodes: int, strategy: str,
           collective: str, straggler_s: float) -> None:
    if not isinstance(batch, int) or batch < 1:
        raise UsageError(f"batch size must be a positive integer, got {batch!r}")
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision '{precision}' (known: {', '.join(PRECISIONS)})")
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy '{strategy}' (known: {', '.join(STRATEGIES)})")
    if collective not in COLLECTIVES:
        raise UsageError(f"unknown collective '{collective}' (known: {', '.join(COLLECTIVES)})")
    if devices < 1 or nodes < 1 or devices % nodes:
        raise UsageError(f"{devices} devices cannot be spread evenly over {nodes} nodes")
    if strategy == "single" and devices > 1:
        raise UsageError(f"strategy single runs on one device, got {devices} "
                         "(choose sync, async, mixed or pipeline)")
    if collective == "tree" and nodes > 1:
        raise UsageError("the tree all-reduce is modelled within one node; across nodes the "
                         "model uses the hierarchical ring")
    if not straggler_s >= 0 or math.isinf(straggler_s):
        raise UsageError(f"straggler delay must be a non-negative number of seconds, "
                         f"got {straggler_s}")


class _Context:
    """The validated inputs every strategy shares, and the per-device step. ``baseline``:
    the framework's runtime memory per process (``predict``'s ``baseline_bytes``);
    ``catalogued``: a catalogue device (its datasheet peak divides MFU), not one built
    from this machine's calibration."""

    def __init__(self, wl: workloads.Workload, size: str, cfg: Any, batch: int, dev: Device,
                 precision: str, cal: Efficiencies, devices: int, nodes: int, collective: str,
                 straggler_s: float, link: str | Link | None, inter_link: str | Link | None,
                 *, baseline: float = 0.0, catalogued: bool = True,
                 curves: str | None = None, cores: int | None = None,
                 threads: int | None = None):
        self.wl, self.size, self.cfg, self.batch = wl, size, cfg, batch
        self.baseline, self.catalogued = baseline, catalogued
        self.dev, self.precision, self.cal = dev, precision, cal
        self.devices, self.nodes, self.per_node = devices, nodes, devices // nodes
        self.collective, self.straggler = collective, straggler_s
        self.layers: list[Layer] = cfg.layers()
        self.elem = PRECISIONS[precision]
        # gradients are fp32 under mixed precision too (``costs.WEIGHT_BYTES``)
        self.grad_bytes = sum(layer.params for layer in self.layers) * WEIGHT_BYTES
        self.links: dict[str, str] = {}
        self._link_names = (link, inter_link)
        self.notes: list[str] = []
        self.curves = curves  # whose reference curves a catalogue GPU runs on
        self.cores, self.threads = cores, threads
        self.server_drift = False  # dlperf parallel's server measures each push's drift
        self.margin: MemoryMargin | None = None  # the memory model's validated error
        if precision == "tf32" and dev.tf32_tflops is None:
            self.notes.append(f"{dev.name} has no TF32 units: tf32 runs as fp32")

    def intra(self) -> Link:
        name = self._link_names[0] or self.dev.peer_link or self.dev.host_link
        if name is None:
            raise UsageError(f"device '{self.dev.name}' has no default link between devices; "
                             "give one (--link, e.g. eth100)")
        return self._link("intra", name)

    def inter(self) -> Link:
        name = self._link_names[1]
        if name is None:
            raise UsageError(f"{self.nodes} nodes need a link between them "
                             "(--inter-link, e.g. ib-hdr or eth100)")
        return self._link("inter", name)

    def _link(self, role: str, name: str | Link) -> Link:
        link = name if isinstance(name, Link) else catalogue.link(name)
        self.links[role] = link.name
        return link

    def server_link(self) -> Link:
        """Workers reach the parameter server over the network when there are nodes."""
        return self.inter() if self.nodes > 1 else self.intra()

    def bw(self, link: Link) -> float:
        return link.rate(self.cal.link)

    def timings(self, batch: float) -> list[LayerTiming]:
        costs = layer_costs(self.layers, self.cfg.input_shape(), batch, self.elem)
        fit = self.cal.fitted(self.dev)
        if fit is not None:  # this machine: its measured kernel curves
            return [local.fitted_timing(layer, c, batch, fit)
                    for layer, c in zip(self.layers, costs, strict=True)]
        eff = self.cal.for_device(self.dev)
        return [roofline_timing(c, self.dev, self.precision, eff) for c in costs]

    def fresh_block_s(self, batch: float) -> float:
        """The new pages of a step's temporaries where the framework allocates them as one
        block per call (``local.fresh_block_s``; calibrated devices only)."""
        fit = self.cal.fitted(self.dev)
        if fit is None or (took := local.fresh_block_s(self.layers, batch, fit)) <= 0:
            return 0.0
        self.notes.append(f"{fit.framework} allocates the step's temporaries afresh at every "
                          f"call: {took * 1e3:.3g} ms of new pages for its activations, live "
                          "gradient and backward working set")
        return took

    def call_s(self) -> float:
        """The fixed cost of calling a framework's step once (calibrated devices only)."""
        fit = self.cal.fitted(self.dev)
        return local.call_timing(fit).overhead_s if fit is not None else 0.0

    def exposed(self, timings: list[LayerTiming], step: bool = True) -> float:
        """The launches' time that shows in ``timings``' layers: a whole ``step`` (one
        step call first, the updates last), else their forward and backward passes alone.
        All of it on a CPU, where the same cores launch and compute; on a GPU the delay
        that the host's launches add to the device's work in one stream
        (``formulas.stream_time``). A layer's launches and work are taken half in its
        forward pass, half in its backward, which runs the layers in reverse."""
        call_s = self.call_s() if step else 0.0
        if self.dev.kind != "gpu":
            return sum(t.overhead_s for t in timings) + call_s
        passes = [(t.overhead_s / 2, (t.compute_s + t.memory_s) / 2) for t in timings]
        updates = [(0.0, t.update_s) for t in timings] if step else []
        done = f.stream_time([(call_s, 0.0), *passes, *passes[::-1], *updates])
        return done - sum(t.compute_s + t.memory_s for t in timings) - sum(
            w for _, w in updates)

    def pass_s(self, moved: float, fresh: bool = False) -> float:
        """A memory-bound pass that moves ``moved`` bytes (read and written): into a fresh
        buffer at the memory curve's rate, into a kept one at the in-place update's; on a
        catalogue device at its attainable bandwidth."""
        fit = self.cal.fitted(self.dev)
        if fit is not None:
            curve = fit.memory if fresh else fit.in_place
            return curve.time(moved) * fit.slowdown
        return moved / (self.dev.memory_gbps * 1e9 * self.cal.for_device(self.dev).memory)

    def copy_s(self, nbytes: float, fresh: bool = False) -> float:
        """A copy of ``nbytes`` (or an in-place scale): read them, write as many."""
        return self.pass_s(2 * nbytes, fresh)

    def server_apply_s(self, nbytes: float) -> float:
        """The parameter server's own work for one worker's push and pull
        (``formulas.parameter_server_time``): the pushed gradient received into a fresh
        tensor, the update w -= lr g in place (read w and g, write w), the weights copied
        out for the pull."""
        return 2 * self.copy_s(nbytes, fresh=True) + self.pass_s(3 * nbytes)

    def server_work_s(self, nbytes: float) -> float:
        """The server's own work for one push and pull in its process, the transfers
        apart (on loopback the received gradient is written where the transfer's copy
        puts it): the update w -= lr g in place, the weights cloned for the pull; with
        ``server_drift`` (``kinds.parallel.ps_server``), the drift from the copy it last
        sent, base - lr g - w (a fresh pass and one in place), and its two dot products."""
        work = self.pass_s(3 * nbytes) + self.copy_s(nbytes, fresh=True)
        if self.server_drift:
            work += self.pass_s(3 * nbytes, fresh=True) + self.pass_s(3 * nbytes) \
                + self.pass_s(2 * nbytes)
        return work

    def bucket_copies_s(self, nbytes: float) -> float:
        """DDP's gradient buckets (``formulas.DDP_BUCKET_PASSES``): each bucket's
        gradients copied in, averaged in place and copied back."""
        n = max(1, math.ceil(nbytes / f.DDP_BUCKET_BYTES))
        return f.DDP_BUCKET_PASSES * n * self.copy_s(nbytes / n)

    def allreduce(self, nbytes: float, p: int) -> float:
        """Gradients averaged over ``p`` devices of one node (ring or tree)."""
        if p <= 1:
            return 0.0
        link = self.intra()
        fn = f.ring_allreduce_time if self.collective == "ring" else f.tree_allreduce_time
        return fn(nbytes, p, self.bw(link), link.latency_s)

    def allreduce_all(self, nbytes: float) -> float:
        """``nbytes`` averaged over every device: in one node, ``allreduce``; across
        nodes, hierarchically (one device per node: no intra-node phase)."""
        if self.devices <= 1:
            return 0.0
        if self.nodes == 1:
            return self.allreduce(nbytes, self.devices)
        inter = self.inter()
        intra = self.intra() if self.per_node > 1 else inter
        return f.hierarchical_allreduce_time(
            nbytes, self.per_node, self.nodes, self.bw(intra), intra.latency_s,
            self.bw(inter), inter.latency_s)

    def share(self) -> float:
        """How many times slower the calibrated timings run than one worker alone: the
        workers' share of this machine's cores (1 on a device of one's own)."""
        fit = self.cal.fitted(self.dev)
        return fit.slowdown if fit is not None else 1.0

    def blocks(self, ranks: int) -> int:
        """The blocks of cores ``ranks`` workers of one node run on: as many as the
        cores hold of their threads (``dlperf parallel`` pins rank r to block r mod
        that), each its own where they do not share."""
        return max(1, int(ranks / self.share() + 1e-9))

    def sharing_cost(self, step_s: float | None = None) -> float:
        """What two busy processes on one of this machine's cores lose beyond processor
        sharing: its calibration's, for a worker that computes ``step_s`` at a stretch at
        full speed where the calibration timed a short and a long step
        (``sharing.cost_at``), else its one step's (``LocalFit.sharing_cost``), else
        ``sharing.CORE_SHARING_COST`` with a note; 1 on any other device."""
        fit = self.cal.fitted(self.dev)
        if self.dev.kind != "cpu" or fit is None:
            return 1.0
        if fit.sharing and step_s:
            return sharing.cost_at(fit.sharing, step_s)
        if fit.sharing_cost is not None:
            return fit.sharing_cost
        note = (f"two processes on one core: x{sharing.CORE_SHARING_COST:g} beyond "
                "processor sharing, measured on another machine ('dlperf calibrate "
                "--frameworks torch' measures this one's with the all-reduce)")
        if note not in self.notes:
            self.notes.append(note)
        return sharing.CORE_SHARING_COST

    def comm_overlaps(self) -> bool:
        """Whether communication can run beside the compute: on a GPU, NCCL's kernels run
        on a stream of their own beside the backward's; on a CPU, gloo's thread sums and
        copies the buckets on the CPU (loopback's transfers are copies too), so only
        where each worker has a core its compute threads leave free (this machine: the
        workers' threads fewer than ``cores``; a catalogue CPU: ``threads`` fewer than
        its cores)."""
        if self.dev.kind == "gpu":
            return True
        fit = self.cal.fitted(self.dev)
        if fit is not None:
            return self.cores is not None and self.per_node * fit.threads < self.cores
        return (self.dev.cores is not None and self.threads is not None
                and self.threads < self.dev.cores)

    def memory_at(self, parts: list[list[Layer]], batch: float, strategy: str = "single",
                  group: int | None = None, micro_batches: int = 1) -> MemoryBreakdown:
        """The peak of one step on the device that holds the most: ``parts`` the layers
        of each device's share (one part: the whole network), ``batch`` its samples;
        a data-parallel ``strategy`` over the devices (``group``: those that all-reduce
        together) adds its own (``memory.worker_step_memory``), as the framework of this
        machine's calibration keeps it (a catalogue device's: as PyTorch does); a share
        that adds ``micro_batches`` micro-batches' gradients into one, the accumulation's
        (``memory.accumulated``)."""
        fit = self.cal.fitted(self.dev)
        return max((accumulated(worker_step_memory(layers, batch, self.precision, strategy,
                                                   self.devices, group, baseline=self.baseline,
                                                   on_device=self.dev.kind == "gpu",
                                                   framework=fit.framework if fit else None),
                                layers, micro_batches)
                    for layers in parts), key=lambda m: m.total)

    def memory_fields(self, parts: list[list[Layer]], batch: int, scale: int,
                      strategy: str = "single", group: int | None = None,
                      micro_batches: int = 1) -> dict[str, Any]:
        """The breakdown at ``batch`` samples per device, whether it fits the device, and
        the largest global batch that does (``scale`` x the per-device batch), also with
        the memory model's validated error as margin where it is known (``margin``)."""
        mem = self.memory_at(parts, batch, strategy, group, micro_batches)
        capacity = self.dev.memory_gb * 1e9

        def total(b: int) -> float:
            return self.memory_at(parts, b, strategy, group, micro_batches).total

        top = largest_batch(total, capacity)
        grow = 1 + self.margin.error if self.margin is not None else None
        spare = largest_batch(lambda b: total(b) * grow, capacity) if grow else None
        if mem.total > capacity:
            self.notes.append(
                f"needs about {mem.total / 1e9:.3g} GB per device, more than the "
                f"{self.dev.memory_gb:g} GB of {self.dev.name}: it would not fit"
                + (f" (at most {top * scale} fit)" if top else ""))
        if self.catalogued and self.dev.kind == "gpu":
            self.notes.append("memory: the device's own (weights, gradients, the activations "
                              "the backward saves, the largest transient); the CUDA context "
                              "and cuDNN's workspace are not counted (dlperf validate "
                              "--published: its error on a lent GPU)")
        return dict(memory=mem, memory_bytes=mem.total, fits=mem.total <= capacity,
                    max_batch=top * scale if top else None,
                    max_batch_or_more=top == BATCH_SEARCH_LIMIT, memory_margin=self.margin,
                    max_batch_with_margin=spare * scale if spare else None)

    def utilisation(self, flops_per_step: float, time_s: float) -> dict[str, Any]:
        """Predicted MFU on a catalogue device: the model FLOPs per second over the
        datasheet's peak of every device at the precision (this machine's CPU: its
        theoretical peak, set by the caller that knows it)."""
        if not self.catalogued:
            return {}
        peak = self.dev.peak_flops(self.precision) * self.devices
        return dict(mfu=flops_per_step / time_s / peak,
                    mfu_peak=f"{self.devices} x the {self.dev.description} datasheet's "
                             f"{self.precision} peak, {peak / 1e12:.4g} TFLOP/s")

    def result(self, strategy: str, time_s: float, breakdown: Breakdown,
               layers: list[LayerTime], memory: dict[str, Any], **extra: Any) -> Prediction:
        flops = float(self.batch * sum(layer.train_flops() for layer in self.layers))
        return Prediction(
            network=self.wl.name, size=self.size, batch_size=self.batch, device=self.dev.name,
            precision=self.precision, strategy=strategy, devices=self.devices,
            nodes=self.nodes, links=self.links, time_s=time_s, breakdown=breakdown,
            layers=layers, flops_per_step=flops, notes=self.notes,
            calibration=self._calibration(), curves=self.curves, **memory,
            **self.utilisation(flops, time_s), **extra,
        )

    def _calibration(self) -> str:
        fit = self.cal.fitted(self.dev)
        if fit is not None:  # a catalogue GPU's (another GPU's curves) has catalogue links
            links = f"; links: {self.cal.link_source}" if fit.origin else ""
            return f"{self.dev.name}: {fit.describe()}{links}"
        eff = self.cal.for_device(self.dev)
        return f"{self.dev.name}: {eff.source}; links: {self.cal.link_source}"


def _totals(timings: list[LayerTiming], repeat: float = 1.0) -> tuple[float, float]:
    """(compute, memory) seconds, the passes repeated ``repeat`` times (micro-batches) and
    the update once; the launches that show are ``_Context.exposed``'s."""
    compute = sum(t.compute_s for t in timings) * repeat
    memory = sum(t.memory_s for t in timings) * repeat + sum(t.update_s for t in timings)
    return compute, memory


def _layer_times(timings: list[LayerTiming], repeat: float = 1.0,
                 speed: float = 1.0) -> list[LayerTime]:
    """Each layer's seconds per step: its passes ``repeat`` times (micro-batches), its update
    once, at ``speed`` times the timings' (a pipeline's stages compute at full speed, the
    timings at the workers' shared one)."""
    return [
        LayerTime(name=t.name, op=t.op, bound=t.bound,
                  time_s=(t.passes_s * repeat + t.update_s) * speed,
                  flops=t.flops * repeat, bytes=t.bytes * repeat)
        for t in timings
    ]


def training_memory(network: str, *, size: str | None = None, batch_size: int | None = None,
                    precision: str = "fp32", params: dict[str, Any] | None = None,
                    on_device: bool = False) -> float:
    """Bytes one process (``on_device``: a GPU) holds to train ``network`` at
    ``batch_size`` (``perfmodel.memory.step_memory`` without the framework's baseline), for
    a memory limit that is no catalogue device's."""
    wl, _, cfg = workloads.resolve(network, size, params)
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision '{precision}' (known: {', '.join(PRECISIONS)})")
    batch = wl.default_batch if batch_size is None else batch_size
    return step_memory(cfg.layers(), batch, precision, on_device=on_device).total


def _data_parallel(ctx: _Context, strategy: str, groups: int | None) -> Prediction:
    p = ctx.devices
    local = ctx.batch // p
    timings = ctx.timings(local)
    compute, memory = _totals(timings)
    memory += ctx.fresh_block_s(local)
    overhead = ctx.exposed(timings)
    step = compute + memory + overhead
    g_bytes = ctx.grad_bytes
    extra: dict[str, Any] = {}
    if strategy in ("single", "sync", "fsdp"):
        comm = 0.0
        if p > 1 and strategy == "fsdp":
            comm, copies = _fsdp_collectives(ctx, compute + memory)
            memory += copies
            step += copies
        elif p > 1:
            comm = _ddp_allreduce(ctx, timings, ctx.allreduce_all)
            copies = ctx.bucket_copies_s(g_bytes)
            ctx.notes.append(f"DDP copies the gradients into its all-reduce buckets and "
                             f"back: {copies * 1e3:.3g} ms of memory passes")
            memory += copies
            step += copies
        # lockstep: all busy at once, each for its step at full speed
        if ctx.share() > 1 and (cost := ctx.sharing_cost(step / ctx.share())) > 1:
            compute, memory, overhead, step = (x * cost for x in (compute, memory, overhead,
                                                                   step))
            ctx.notes.append(f"{ctx.share():g} workers to a core: each computes x{cost:.3g} "
                             "slower than processor sharing gives (the cost of sharing a core)")
        waits = f.sync_step_time([step] * (p - 1) + [step + ctx.straggler]) - step
        time = step + comm + waits
        return ctx.result(strategy, time, Breakdown(
            compute_s=compute, memory_s=memory, overhead_s=overhead, communication_s=comm,
            bubble_s=0.0, straggler_s=waits), _layer_times(timings),
            ctx.memory_fields([ctx.layers], local, p, strategy))
    # async: every device is its own group; mixed: groups synchronous inside
    g = p if strategy == "async" else (groups if groups is not None else _default_groups(p))
    if g < 1 or p % g:
        raise UsageError(f"groups {g} does not divide the {p} devices")
    k = p // g
    if ctx.nodes > 1 and ctx.per_node % k:
        raise UsageError(f"a group of {k} devices must sit inside one node of {ctx.per_node}")
    if p > 1:  # flatten the gradient into a fresh vector, load the pulled weights back
        copies = ctx.copy_s(g_bytes, fresh=True) + ctx.copy_s(g_bytes)
        if k > 1:  # the group's DDP buckets; the broadcast's buffer filled on the leader
            copies += ctx.bucket_copies_s(g_bytes) + ctx.copy_s(g_bytes)
        ctx.notes.append(f"the gradient flattened, the weights loaded back"
                         f"{' and DDP bucket copies' if k > 1 else ''}: "
                         f"{copies * 1e3:.3g} ms of memory passes")
        memory += copies
        step += copies
    if p > 1 and ctx.nodes == 1 and ctx.dev.kind == "cpu" and ctx.cal.fitted(ctx.dev):
        # this machine: the workers and the server share its cores
        time, even = _on_shared_cores(ctx, step, g, k, g_bytes)
        lost = time - even
    else:
        time, lost = _through_a_server(ctx, timings, step, g, k, g_bytes)
    if strategy == "mixed":
        extra["groups"] = g
    if ctx.dev.kind != "gpu":  # the server's vectors are host memory, as the worker's
        ctx.notes.append(f"memory: the fullest process is rank 0, which hosts the parameter "
                         f"server beside its worker: the server's weights, the copy last "
                         f"sent to each of the {g} {'leaders' if strategy == 'mixed' else 'workers'}, "
                         f"the worker's flattened gradient and the pushes it receives "
                         f"(memory.with_parameter_server)")
    # the workers' own terms as one of them runs them, at most what the time leaves
    scale = min(1.0, (time - lost) / step) if step > 0 else 1.0
    return ctx.result(strategy, time, Breakdown(
        compute_s=compute * scale, memory_s=memory * scale, overhead_s=overhead * scale,
        communication_s=time - step * scale - lost, bubble_s=0.0, straggler_s=lost),
        _layer_times(timings), ctx.memory_fields([ctx.layers], local, p, strategy, k),
        **extra)


def _through_a_server(ctx: _Context, timings: list[LayerTiming], step: float, g: int,
                      k: int, g_bytes: float) -> tuple[float, float]:
    """(time per global mini-batch, what the straggler costs) of ``g`` free-running groups
    of ``k`` devices, each with a device of its own, through a parameter server whose
    link all share (``formulas.parameter_server_time``, ``formulas.async_step_time``):
    each group's step, its all-reduce (DDP's buckets) and the leader's broadcast of the
    pulled weights, its push and pull and the server's apply."""
    p = ctx.devices
    group_comm = 0.0
    if k > 1:
        group_comm = _ddp_allreduce(ctx, timings, lambda nbytes: ctx.allreduce(nbytes, k))
        intra = ctx.intra()  # the leader broadcasts the pulled weights to its group
        group_comm += f.p2p_time(g_bytes, ctx.bw(intra), intra.latency_s)
    own = shared = 0.0
    if p > 1 and g == 1:  # one group: its leader is rank 0, beside which the server
        # lives (dlperf parallel's servers 0), so its push and pull stay in its process
        own = shared = ctx.server_apply_s(g_bytes)
        ctx.notes.append("one group: the parameter server lives in its leader's process, "
                         "so the push and pull cross no link")
    elif p > 1:  # one worker applies its own updates: no server traffic
        server = ctx.server_link()
        apply = ctx.server_apply_s(g_bytes)
        own = 2 * f.p2p_time(g_bytes, ctx.bw(server), server.latency_s) + apply
        shared = f.parameter_server_time(g_bytes, g, ctx.bw(server), server.latency_s,
                                         ctx.bw(server), apply)
    base = step + group_comm + own
    t_async = f.async_step_time([base] * (g - 1) + [base + ctx.straggler])
    time = max(t_async, shared)  # the server's shared link may set the pace
    return time, time - max(base, shared)  # what the slow worker costs beyond that


def _on_shared_cores(ctx: _Context, step: float, g: int, k: int,
                     g_bytes: float) -> tuple[float, float]:
    """(time per global mini-batch, the same without the straggler) of ``g`` free-running
    groups of ``k`` workers (async: ``k`` 1) on this machine's cores, as ``dlperf
    parallel`` runs them: rank r on block r mod ``blocks``, group u the ranks u k ..
    u k + k - 1, the server in rank 0's process. The server's work for every push and
    pull (``server_work_s``) runs on rank 0's block, beside rank 0 and whoever shares
    it; rank 0's group calls it directly (no transfer), the others push and pull over
    loopback (priced at the link calibrated between two processes, each on a core of
    its own); a group's all-reduce and the leader's broadcast of the pulled weights are
    work of every member's cores. Where the kernel shares a core among sessions
    (``environment.sessions_share_cores``), every process of the RPC group keeps its
    share of its core all the time and each message is copied once, by its receiver
    (``sharing.polling_unit_rates``); elsewhere a process waiting for the server leaves
    its core to the others, and a transfer is copies by both ends' cores
    (``sharing.unit_rates``). A global mini-batch is one push of every group's share."""
    share = ctx.share()  # the calibrated timings run this much slower than one alone
    place = sharing.blocks_of(ctx.devices, ctx.blocks(ctx.devices))
    link = _pair_link(ctx)
    push = 2 * f.p2p_time(g_bytes, ctx.bw(link), link.latency_s)
    serve = ctx.server_work_s(g_bytes) / share
    cost = ctx.sharing_cost(step / share)
    group = 0.0 if k == 1 else (  # the group's all-reduce, then the broadcast
        f.ring_allreduce_time(g_bytes, k, ctx.bw(link), link.latency_s)
        + _broadcast_s(ctx, g_bytes, k, link))
    polls = environment.sessions_share_cores()  # each process keeps its share of a core

    def per_batch(delay: float) -> float:
        units = [sharing.Unit(blocks=tuple(place[u * k:(u + 1) * k]),
                              work=(step / share + group,) * k, serve=serve,
                              transfer=push if u else 0.0,
                              wait=delay if u == g - 1 else 0.0)
                 for u in range(g)]
        rates = (sharing.polling_unit_rates(units, place[0], cost) if polls
                 else sharing.unit_rates(units, server_block=place[0], cost=cost))
        return g / sum(rates)

    if k > 1:
        ctx.notes.append(f"each group's all-reduce and broadcast, {group * 1e3:.3g} ms, are "
                         "copies and sums by its members' cores (none overlaps the "
                         "backward pass: no core is spare)")
    if g == 1:
        ctx.notes.append("one group: the parameter server lives in its leader's process, "
                         "so the push and pull cross no link")
    drift = " (the drift measured too)" if ctx.server_drift else ""
    copies = (f"its copies of the other groups' pushes ({push * 1e3 / 2:.3g} ms each: a "
              "message is copied once, by its receiver)" if polls else
              f"its side of the other groups' {push * 1e3:.3g} ms of transfers (loopback: "
              "copies by both ends' cores)")
    ctx.notes.append(
        f"the parameter server works in rank 0's process: its {serve * 1e3:.3g} ms per "
        f"push and pull{drift}, and {copies}, share rank 0's cores with "
        + ("the ranks pinned beside it" if share > 1 else "rank 0")
        + "; each group's rate by processor sharing of its cores (perfmodel/sharing.py)")
    if polls and share > 1:
        ctx.notes.append(
            "every process of the RPC group stays runnable (TensorPipe's reactor polls) "
            "and this kernel shares a core among sessions (autogroup): each process "
            "pinned to a core gets an equal share of it all the time, rank 0's compute "
            "and the server's work splitting rank 0's")
    return per_batch(ctx.straggler), per_batch(0.0)


def _broadcast_s(ctx: _Context, nbytes: float, k: int, link: Link) -> float:
    """A group leader's broadcast of ``nbytes`` to its ``k - 1`` members: gloo's, as the
    calibration timed it among the nearest process count (one transfer and no sum: on a
    2-vCPU Xeon, between two processes, 472 MB took 0.15-0.17 s where an all-reduce of the
    same bytes took 0.36-0.44 s, in the same minute); calibrated before it was, a transfer
    on ``link``, which, priced from the all-reduce, holds its sums too (an upper bound,
    said in a note)."""
    fit = ctx.cal.fitted(ctx.dev)
    if fit is not None and fit.broadcast:
        return fit.broadcast[nearest_world(fit.broadcast, k)].time(nbytes)
    ctx.notes.append("the group's broadcast is priced as a transfer at the all-reduce's "
                     "rate, which includes its sums: an upper bound ('dlperf calibrate "
                     "--frameworks torch' times gloo's broadcast)")
    return f.p2p_time(nbytes, ctx.bw(link), link.latency_s)


def _pair_link(ctx: _Context) -> Link:
    """The loopback link as the all-reduce between two processes calibrated it (each on a
    core of its own): one transfer at full speed; else the run's link."""
    fit = ctx.cal.fitted(ctx.dev)
    if fit is None or not fit.allreduce:
        return ctx.server_link()
    return local.loopback_link(fit.allreduce[nearest_world(fit.allreduce, 2)])


def _ddp_allreduce(ctx: _Context, timings: list[LayerTiming],
                   allreduce: Callable[[float], float]) -> float:
    """The all-reduce time a DDP step waits for: the gradients in DDP's buckets
    (``formulas.ddp_buckets``: the layers' in reverse, each bucket launched when its
    last layer's backward pass is done), each bucket averaged by ``allreduce``. Where
    the communication runs beside the compute (``_Context.comm_overlaps``) only what
    runs past the backward's end counts (``formulas.overlapped_comm_time``); where it
    shares the compute's cores, all of it. A layer's parameters count as one tensor."""
    back = [(t.compute_s + t.memory_s - t.forward_s + t.overhead_s / 2, layer.params)
            for t, layer in zip(timings[::-1], ctx.layers[::-1], strict=True)]
    ready, done = [], 0.0
    for took, _ in back:
        done += took
        ready.append(done)
    buckets = f.ddp_buckets([n * WEIGHT_BYTES for _, n in back])
    comm = [allreduce(nbytes) for nbytes, _ in buckets]
    if not ctx.comm_overlaps():
        # gloo's thread and the backward's compute side by side on one core from the first
        # bucket's launch: what they do together pays the cost of sharing it
        together = 2 * min(done - ready[buckets[0][1]], sum(comm))
        extra = (ctx.sharing_cost(done / ctx.share()) - 1) * together
        ctx.notes.append(
            f"DDP all-reduces the gradients in {len(buckets)} buckets as the backward pass "
            f"makes them, but gloo sums and copies them on the cores the backward uses (no "
            f"core is spare for its thread): none of the {sum(comm) * 1e3:.3g} ms overlaps"
            + (f", and the two threads sharing a core cost {extra * 1e3:.3g} ms more "
               "(the cost of sharing a core)" if extra > 0 else ""))
        return sum(comm) + extra
    exposed = f.overlapped_comm_time([ready[i] for _, i in buckets], comm, done)
    ctx.notes.append(
        f"DDP all-reduces the gradients in {len(buckets)} buckets (the first up to 1 MiB, "
        f"then 25 MiB), each once the backward pass has made it: {exposed * 1e3:.3g} ms of "
        f"the {sum(comm) * 1e3:.3g} ms run after the backward pass")
    return exposed


def _fsdp_collectives(ctx: _Context, compute_s: float) -> tuple[float, float]:
    """(the communication a fully sharded step waits for, its buffer copies). Each unit
    (a layer with weights) all-gathers its weights for the forward and again for the
    backward, and reduce-scatters its gradients: three collectives of half an
    all-reduce's traffic each, 1.5 x DDP's volume (Rajbhandari et al., "ZeRO", 2020,
    section 7.2.2). Where communication runs beside the compute (``comm_overlaps``), the
    next unit's gather is prefetched during this one's compute (Zhao et al., "PyTorch
    FSDP", 2023, section 3.3): only what the compute cannot hide, and the first gather,
    count; else all of it. Each collective copies its unit's bytes into a flat buffer and
    out again (FSDP2's copy-in and copy-out), buffers it allocates per call (the gathered
    weights' storage is freed at each reshard): copies into fresh memory."""
    units = [layer.params * WEIGHT_BYTES for layer in ctx.layers if layer.params]
    gather, scatter = _gather_and_scatter(ctx)
    total = sum(2 * gather(n) + scatter(n) for n in units)
    copies = 3 * sum(ctx.copy_s(n, fresh=True) for n in units) * 2
    if ctx.comm_overlaps():
        first = gather(units[0])
        exposed = first + max(0.0, total - first - compute_s)
        how = f"{exposed * 1e3:.3g} ms of them past the compute that hides the rest"
    else:
        exposed = total
        how = "none overlaps: gloo works on the cores the compute uses"
    ctx.notes.append(
        f"fsdp: {len(units)} units each all-gather their weights twice and reduce-scatter "
        f"their gradients, {total * 1e3:.3g} ms of collectives ({how}); their buffer "
        f"copies {copies * 1e3:.3g} ms of memory passes")
    return exposed, copies


def _gather_and_scatter(ctx: _Context) -> tuple[Callable[[float], float],
                                                Callable[[float], float]]:
    """The seconds of an all-gather and of a reduce-scatter of a whole tensor of so many
    bytes over every device: on this machine, gloo's as the calibration timed them at
    the nearest process count (gloo's are not bandwidth-optimal rings: here each took
    longer than a whole all-reduce of the same bytes); elsewhere half an all-reduce
    each, the rings NCCL runs (a reduce-scatter and an all-gather make an all-reduce:
    Patarasuk and Yuan, 2009)."""
    fit = ctx.cal.fitted(ctx.dev)
    if fit is not None and fit.allgather and fit.reducescatter and ctx.nodes == 1:
        world = nearest_world(fit.allgather, ctx.devices)
        ag, rs = fit.allgather[world], fit.reducescatter.get(world)
        if rs is not None:
            if world != ctx.devices:
                ctx.notes.append(f"fsdp: gloo's all-gather and reduce-scatter as calibrated "
                                 f"among {world} processes (the nearest to {ctx.devices})")
            return ag.time, rs.time
    if ctx.dev.kind == "cpu":
        ctx.notes.append("fsdp: each collective is priced as half an all-reduce (a ring, as "
                         "NCCL runs them); gloo's all-gather and reduce-scatter are slower "
                         "and this calibration has not timed them ('dlperf calibrate "
                         "--frameworks torch' does): this time is a lower bound")

    def half(nbytes: float) -> float:
        return ctx.allreduce_all(nbytes) / 2
    return half, half


def _default_groups(devices: int) -> int:
    """Groups of two devices, as ``dlperf parallel`` defaults (one group of one or two)."""
    if devices <= 2:
        return 1
    if devices % 2:
        raise UsageError(f"{devices} devices is odd: give the number of groups for mixed")
    return devices // 2


def process_batch(batch: int, strategy: str, devices: int,
                  micro_batches: int | None = None) -> int | None:
    """The samples one process runs its layers on at a stretch, which its kernels' shapes
    follow: the whole batch on one device, a worker's share of the global batch under
    data parallelism, a micro-batch in a pipeline; None where ``predict`` refuses the
    configuration (and says why)."""
    if not isinstance(batch, int) or batch < 1 or devices < 1 or strategy not in STRATEGIES:
        return None
    if strategy == "pipeline":
        m = micro_batches if micro_batches is not None else f.default_micro_batches(batch, devices)
        return batch // m if m >= 1 and batch % m == 0 else None
    return batch // devices if batch % devices == 0 else None


def _pipeline(ctx: _Context, micro_batches: int | None, groups: int | None) -> Prediction:
    # framework-free, shared with dlperf parallel: the model cuts the stages where the
    # pipeline it predicts cuts them
    from dlperf.perfmodel.partition import pipeline_stages, units

    p, batch = ctx.devices, ctx.batch
    if groups not in (None, 1):
        raise UsageError("groups applies to the mixed strategy only (got strategy pipeline)")
    why = NOT_A_CHAIN.get(ctx.wl.family) or (
        NOT_A_CHAIN["rbm"] if any(layer.op == "rbm" for layer in ctx.layers) else None)
    if why:
        raise UsageError(f"network '{ctx.wl.name}' cannot be pipelined: {why}")
    body = [i for i, layer in enumerate(ctx.layers) if layer.op != "loss"]
    if len(cuttable := units([ctx.layers[i] for i in body])) < p:
        raise UsageError(f"more pipeline stages ({p}) than layers and blocks "
                         f"({len(cuttable)}) in '{ctx.wl.name}'")
    m = micro_batches if micro_batches is not None else f.default_micro_batches(batch, p)
    if m < 1 or batch % m:
        raise UsageError(f"micro_batches {m} does not divide the batch size {batch}")
    mb = batch / m
    timings = ctx.timings(mb)
    # cut between blocks, where dlperf parallel cuts its nn.Sequential
    stages = pipeline_stages(ctx.layers, p)
    # the timings are slowed as if every stage computed at once (``machine.model``'s
    # share of the cores); the schedule takes them at full speed and shares the cores
    # only among the stages computing at each moment
    fit = ctx.cal.fitted(ctx.dev)
    share = fit.slowdown if fit is not None else 1.0
    fwd, bwd, sends, updates, shown = [], [], [], [], []
    out_elems = 0
    for s, idx in enumerate(stages):
        for i in idx:
            out_elems = ctx.layers[i].out_elems or out_elems
        send = 0.0
        if s < p - 1:  # activations forward and their gradients back, per micro-batch
            crosses = ctx.nodes > 1 and (s + 1) % ctx.per_node == 0
            link = ctx.inter() if crosses else ctx.intra()
            send = f.p2p_time(out_elems * mb * ctx.elem, ctx.bw(link), link.latency_s)
        stage = [timings[i] for i in idx]
        shown.append(ctx.exposed(stage, step=False))  # per micro-batch's passes
        update = sum(t.update_s for t in stage)
        # every micro-batch after the first adds its weight gradients into the stage's:
        # read both, write one, the update's 3 x P bytes (gradient accumulation, GPipe)
        accumulate = f.accumulation_time(update, m) / m
        if fit is not None:  # and the later micro-batches' gradients, new pages each
            accumulate += local.accumulated_pages_s([ctx.layers[i] for i in idx], fit) \
                * (m - 1) / m
        fwd.append((sum(t.forward_s for t in stage) + shown[-1] / 2) / share)
        bwd.append((sum(t.compute_s + t.memory_s - t.forward_s for t in stage) + shown[-1] / 2
                    + accumulate) / share)
        sends.append(send)
        updates.append(update / share)
    # a stage sends its activations across the boundary after it, its input's gradient
    # across the one before it
    own_sends = [(sends[s] if s < p - 1 else 0.0) + (sends[s - 1] if s else 0.0)
                 for s in range(p)]
    work = [m * (fwd[s] + bwd[s] + own_sends[s]) + updates[s] for s in range(p)]
    # dlperf parallel pins rank r to the r-th block of a stage's threads, wrapping round
    # the cores (``parallel.worker.rank_cpus``): the stages of one block share it
    blocks = max(1, int(p / share + 1e-9))
    # a stage computes one micro-batch's pass at a stretch, then waits for the next
    cost = ctx.sharing_cost(statistics.median([*fwd, *bwd]))
    run = schedule.gpipe_step_time(fwd, bwd, sends, updates, m, [s % blocks for s in range(p)],
                                   cost=cost)
    time = run + ctx.straggler + ctx.call_s()
    slow = max(range(p), key=work.__getitem__)
    stage = [timings[i] for i in stages[slow]]
    compute, memory = (x / share for x in _totals(stage, repeat=m))
    memory += f.accumulation_time(updates[slow], m)
    overhead = m * shown[slow] / share + ctx.call_s()
    comm = m * own_sends[slow]
    bubble = run - work[slow]  # fill, drain, the other stages' longer slots, a core's wait
    if p > 1:
        ctx.notes.append(f"GPipe schedule, {m} micro-batches of {mb:g}: ideal idle share "
                         f"{f.pipeline_bubble_fraction(p, m):.1%} with equal stages")
    if blocks < p:
        ctx.notes.append(f"the {p} stages share cores enough for {blocks} at full speed, "
                         f"stage s on block s mod {blocks} as dlperf parallel pins them: "
                         "those computing at one moment split their block, and a stage "
                         "that waits (bubble) leaves its share to the busy ones"
                         + (f"; together they run x{cost:.3g} slower than "
                            "that sharing gives (the cost of sharing a core)"
                            if cost > 1 else ""))
    # GPipe keeps every micro-batch's activations of a stage until its backward: the
    # stage's share at the whole batch; its micro-batches' gradients accumulate
    mem = ctx.memory_fields([[ctx.layers[i] for i in idx] for idx in stages], batch, 1,
                            micro_batches=m)
    return ctx.result("pipeline", time, Breakdown(
        compute_s=compute, memory_s=memory, overhead_s=overhead,
        communication_s=comm, bubble_s=bubble, straggler_s=ctx.straggler),
        _layer_times(timings, repeat=m, speed=1 / share), mem, micro_batches=m,
        stages=[[ctx.layers[i].name for i in idx] for idx in stages])
