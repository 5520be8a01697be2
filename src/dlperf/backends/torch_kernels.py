"""PyTorch's calibration kernels (``dlperf.perfmodel.kernels``): each op as a Timed
whose ``step()`` runs one call the way a DLBench network runs it (eager, NCHW, at the
run's precision), and the gloo all-reduce on loopback among spawned processes.

Under mixed precision (fp16, bf16) the kernels run as ``torch.autocast`` runs a training
step's: products, convolutions, elementwise layers and batch normalisation on half
operands, the loss in fp32 (autocast casts its logits up), the optimizer's update on the
fp32 weights, every call inside autocast (its casts and dispatch are part of an op's
cost)."""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.nn.functional as F

from dlperf.backends.base import Timed, UnsupportedError
from dlperf.backends.operands import BLOCK
from dlperf.backends.torch_amp import autocast_context
from dlperf.perfmodel.fit import sharing_cost
from dlperf.perfmodel.kernels import (
    CONVS,
    DISPATCH_SIDE,
    POOL_STRIDE,
    POOL_WINDOW,
    PRODUCTS,
    conv_out,
    flops,
)


def _device(device: str) -> torch.device:
    if device == "gpu":
        if not torch.cuda.is_available():
            raise UnsupportedError("no CUDA GPU visible to torch")
        return torch.device("cuda")
    return torch.device("cpu")


@functools.cache
def _spin_rate(device: torch.device) -> float:
    """The spin kernel's clock cycles per second on ``device``, timed once per process
    (every calibration shape makes a clock)."""
    begin, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    cycles = 10_000_000
    torch.cuda._sleep(cycles)  # loads the kernel
    begin.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / (begin.elapsed_time(end) * 1e-3)


class CudaClock:
    """The device's own time of the calls queued between ``start`` and ``stop``, without
    the host's. A spin kernel (``torch.cuda._sleep``) holds the stream while the host
    queues the calls, so that they run back to back, and CUDA events around them time
    them on the device: NVBench's blocking kernel (NVIDIA/nvbench,
    nvbench/blocking_kernel.cuh) does the same for the same reason. A kernel whose host
    side (a backward pass's start, about 190 us on an H200) outlasts its device work
    would otherwise be timed as the host. The spin lasts twice the host's last queueing
    time, so that the device reaches the calls only after the host has queued them all."""

    def __init__(self, device: torch.device):
        self.device = device
        self.begin, self.end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        self._hold_s = 0.02  # the first spin, before any queueing time is known
        self._cycles_per_s = _spin_rate(device)

    def start(self) -> None:
        torch.cuda._sleep(int(self._hold_s * self._cycles_per_s))
        self.begin.record()
        self._queued_at = time.perf_counter()

    def stop(self) -> None:
        self.end.record()
        self._hold_s = max(1e-3, 2 * (time.perf_counter() - self._queued_at))

    def elapsed(self) -> float:
        """Seconds between the two events (after the stream was synchronised)."""
        return self.begin.elapsed_time(self.end) * 1e-3


def repeated_uniform(dims: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """A CPU tensor of shape ``dims`` in [-1, 1): ``operands.BLOCK`` draws, repeated (values
    do not change a kernel's time, ``backends.operands``). PyTorch's allocator holds it, so
    it is aligned as a training step's tensors are."""
    out = torch.empty(dims)
    flat = out.view(-1)
    block = torch.empty(min(flat.numel(), BLOCK)).uniform_(-1, 1, generator=gen)
    whole = flat.numel() // block.numel() * block.numel()
    flat[:whole].view(-1, block.numel()).copy_(block.expand(whole // block.numel(), -1))
    flat[whole:].copy_(block[:flat.numel() - whole])
    return out


class Kernel(Timed):
    """One call of a calibration kernel per step."""

    batch_size = 1
    param_count = 0

    def __init__(self, op: str, shape: tuple[int, ...], device: torch.device,
                 half: torch.dtype | None = None):
        self.op, self.shape, self.device = op, shape, device
        gen = torch.Generator().manual_seed(0)
        dtype = half or torch.float32
        self._autocast = autocast_context(device, half)

        def operand(*dims: int) -> torch.Tensor:
            return repeated_uniform(dims, gen).to(device, dtype)

        if op == "gemm":
            m, n, k = shape
            self.a, self.b = operand(m, k), operand(k, n)
        elif op == "gemm_tn":  # A stored k x m, used transposed (a view, as autograd does)
            m, n, k = shape
            self.a, self.b = operand(k, m).t(), operand(k, n)
        elif op == "gemm_nt":  # nn.Linear's forward: its (out, in) weight transposed (a view)
            m, n, k = shape
            self.a, self.b = operand(m, k), operand(n, k).t()
        elif op == "gemm_tn_seq":  # nn.Linear's backward flattens time and batch: a view
            m, n, t, b = shape
            self.a = operand(t, b, m).reshape(t * b, m).t()
            self.b = operand(t, b, n).reshape(t * b, n)
        elif op in CONVS:
            batch, c_in, c_out, side, window, stride = shape
            self.x, self.w = operand(batch, c_in, side, side), operand(c_out, c_in, window, window)
            self.stride, self.pad = (stride, stride), (window // 2, window // 2)
            # the output's gradient, of the forward's output shape (computing that shape by
            # running the forward took 1.4 s of a one-thread PyTorch calibration)
            out = conv_out(side, window, stride)
            self.g = operand(batch, c_out, out, out)
        elif op == "memory":
            self.x = operand(shape[0])
        elif op == "update":  # the fp32 weights, whatever the precision
            self.x = repeated_uniform((shape[0],), gen).to(device)
        elif op == "bn":  # nn.BatchNorm2d in training mode, as torch_backend's ResNet
            batch, channels, side = shape
            self.x = operand(batch, channels, side, side).requires_grad_()
            self.bn = torch.nn.BatchNorm2d(channels).to(device).train()
            self.g = operand(batch, channels, side, side)
        elif op == "pool":  # nn.MaxPool2d(3, 2, 1), as torch_backend's AlexNet and ResNet
            batch, channels, side = shape
            out = conv_out(side, POOL_WINDOW, POOL_STRIDE)
            self.x = operand(batch, channels, side, side).requires_grad_()
            self.g = operand(batch, channels, out, out)
        elif op == "lstm":  # one layer of torch_backend's nn.LSTM, its hidden bias frozen
            batch, steps, inputs, hidden = shape
            self.lstm = torch.nn.LSTM(inputs, hidden, 1, batch_first=True).to(device)
            torch.nn.init.zeros_(self.lstm.bias_hh_l0)
            self.lstm.bias_hh_l0.requires_grad_(False)
            self.x = operand(batch, steps, inputs).requires_grad_()
            self.g = operand(batch, steps, hidden)
        elif op == "xent":  # the loss torch_backend trains with, and its gradient
            rows, classes = shape
            self.x = operand(rows, classes).requires_grad_()
            self.y = torch.randint(0, classes, (rows,), generator=gen).to(device)
        elif op in ("dispatch", "dispatch_train"):
            # fp32 weights, as a model's are: under autocast each product casts them (cast
            # kernels that a mixed-precision step launches too, counted in the per-op cost)
            def weight() -> torch.Tensor:
                return torch.empty(DISPATCH_SIDE, DISPATCH_SIDE).uniform_(
                    -1, 1, generator=gen).to(device) / DISPATCH_SIDE

            self.a = weight()
            if op == "dispatch_train":
                self.ws = [weight().requires_grad_() for _ in range(shape[0])]
                # the optimizer the backend trains with (torch_backend.TorchTrainer); a
                # small rate keeps the weights finite over any number of calls
                self.opt = torch.optim.SGD(self.ws, lr=1e-4)
        else:
            raise UnsupportedError(f"torch has no calibration kernel '{op}'")

    def step(self) -> None:
        with self._autocast():
            self._call()

    def _call(self) -> None:
        op = self.op
        # a fresh result per call, as autograd and eager layers make theirs: a large one
        # costs the allocator's new pages, which a reused output would hide
        if op in PRODUCTS:
            self.out = torch.mm(self.a, self.b)
        elif op == "conv":
            with torch.no_grad():
                F.conv2d(self.x, self.w, stride=self.stride, padding=self.pad)
        elif op == "conv_bwd":  # what autograd runs for a Conv2d: both gradients at once
            torch.ops.aten.convolution_backward(
                self.g, self.x, self.w, None, self.stride, self.pad, (1, 1), False, (0, 0), 1,
                (True, True, False))
        elif op == "conv_wgrad":  # a first layer's: its input, the data, has no gradient
            torch.ops.aten.convolution_backward(
                self.g, self.x, self.w, None, self.stride, self.pad, (1, 1), False, (0, 0), 1,
                (False, True, False))
        elif op == "memory":
            self.out = torch.mul(self.x, 2.0)
        elif op == "update":
            self.x.mul_(0.999)
        elif op == "bn":  # forward, then the input's, scale's and shift's gradients
            self.out = torch.autograd.grad(self.bn(self.x), (self.x, *self.bn.parameters()),
                                           self.g)
        elif op == "pool":  # forward, then the input's gradient
            y = F.max_pool2d(self.x, POOL_WINDOW, POOL_STRIDE, POOL_WINDOW // 2)
            (self.out,) = torch.autograd.grad(y, self.x, self.g)
        elif op == "lstm":  # forward, then the input's and the trained weights' gradients
            y, _ = self.lstm(self.x)
            self.out = torch.autograd.grad(
                y, (self.x, *(p for p in self.lstm.parameters() if p.requires_grad)), self.g)
        elif op == "xent":
            (self.out,) = torch.autograd.grad(F.cross_entropy(self.x, self.y), self.x)
        elif op == "dispatch_train":  # a training step as TorchTrainer.step runs one
            self.opt.zero_grad(set_to_none=True)
            z = self.a
            for w in self.ws:
                z = z @ w
            z.sum().backward()
            self.opt.step()
        else:  # dispatch: a chain of dependent tiny products, one op each
            z = self.a
            for _ in range(self.shape[0]):
                z = torch.mm(z, self.a)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def device_clock(self) -> CudaClock | None:
        """The device's own timer of this kernel's calls (``Timed.device_clock``); none
        on a CPU, none for the dispatch kernels, which time the host's cost of an op, and
        none where this build of PyTorch has no spin kernel (a private function): the
        wall clock then times the queued calls."""
        if (self.device.type != "cuda" or self.op.startswith("dispatch")
                or not hasattr(torch.cuda, "_sleep")):
            return None
        return CudaClock(self.device)

    def flops_per_step(self) -> float:
        return flops(self.op, self.shape)


def kernel(op: str, shape: tuple[int, ...], device: str,
           half: torch.dtype | None = None) -> Timed:
    """One calibration kernel; ``half``: the autocast dtype of a mixed-precision run."""
    return Kernel(op, shape, _device(device), half)


# ----------------------------------------------------------------------------- all-reduce
def _rank_cpus(rank: int) -> list[int]:
    """One CPU per rank, wrapping around when there are more ranks than CPUs (as the
    parallel runs place one-thread workers)."""
    from dlperf.core.environment import usable_cpus

    cpus = usable_cpus()
    return [cpus[rank % len(cpus)]]


def _loopback_interface() -> str | None:
    """The interface holding 127.0.0.1 ('lo' on Linux), as the parallel runs use."""
    import socket

    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addrs):
            return name
    return None


def _collective_call(op: str, nbytes: int, world: int) -> Callable[[], object]:
    """One ``op`` over a whole tensor of ``nbytes`` of fp32: its all-reduce, its
    all-gather from a 1/``world`` shard of each rank, its reduce-scatter into such
    shards (as fully sharded data parallelism gathers weights and scatters gradients), or
    its broadcast from rank 0 (as a mixed group's leader sends the pulled weights)."""
    import torch.distributed as dist

    n = max(world, nbytes // 4 // world * world)
    whole, shard = torch.ones(n), torch.ones(n // world)
    # the names PyTorch 2.13 keeps (its *_tensor spellings warn that they are deprecated)
    if op == "allgather":
        gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
        return lambda: gather(whole, shard)
    if op == "reducescatter":
        scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
        return lambda: scatter(shard, whole)
    if op == "broadcast":
        return lambda: dist.broadcast(whole, src=0)
    return lambda: dist.all_reduce(whole)


def _runtimes() -> list[float]:
    """This rank's resident bytes as a parallel worker's runtime: with gloo's process
    group up, then after a plain backward pass of a tiny layer (autograd's engine and
    what its first backward loads: a pipeline's stage holds it beside its group, as every
    worker that trains does), then after a DistributedDataParallel step of one (DDP's
    reducer besides, as a synchronous worker holds)."""
    from torch.nn.parallel import DistributedDataParallel

    from dlperf.core.environment import resident_bytes

    gloo = resident_bytes()
    torch.nn.Linear(8, 8)(torch.ones(2, 8)).sum().backward()
    backward = resident_bytes()
    ddp = DistributedDataParallel(torch.nn.Linear(8, 8))
    ddp(torch.ones(2, 8)).sum().backward()
    return [float(gloo), float(backward), float(resident_bytes())]


def _allreduce_rank(rank: int, world: int, path: str, parts: list[tuple[str, list[int]]],
                    repeats: int, warmup: int, parent: int
                    ) -> tuple[list[list[list[float]]], list[float]]:
    """Every rank: per (collective, sizes) of ``parts``, ``warmup`` then ``repeats`` of
    that collective at each size, each after a barrier, all in one process group; the
    time of a repetition is the slowest rank's (when the collective was over for
    everyone). Also the leanest rank's runtimes (``_runtimes``), measured before any
    collective's tensor exists (a worker's runtime, not its buffers)."""
    if rank:
        from dlperf.core.orphans import die_with_parent

        die_with_parent(parent)
    os.sched_setaffinity(0, _rank_cpus(rank))
    torch.set_num_threads(1)
    import torch.distributed as dist

    store = dist.FileStore(path, world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    out: list[list[list[float]]] = []
    try:
        dist.barrier()  # every rank connected: the group as a worker holds it
        runtimes = torch.tensor(_runtimes(), dtype=torch.float64)
        # the leanest rank's: a spawned one, as a parallel worker is (rank 0 is the
        # calibration's worker, which holds what its other kernels left)
        dist.all_reduce(runtimes, op=dist.ReduceOp.MIN)
        for op, sizes in parts:
            series = []
            for nbytes in sizes:
                call = _collective_call(op, nbytes, world)
                times = []
                for k in range(warmup + repeats):
                    dist.barrier()
                    t = time.perf_counter()
                    call()
                    if k >= warmup:
                        times.append(time.perf_counter() - t)
                slowest = torch.tensor(times, dtype=torch.float64)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                series.append(slowest.tolist())
            out.append(series)
    finally:
        dist.destroy_process_group()
    return out, runtimes.tolist()


def _helper(rank: int, world: int, path: str, parts: list[tuple[str, list[int]]],
            repeats: int, warmup: int, parent: int) -> None:
    _allreduce_rank(rank, world, path, parts, repeats, warmup, parent)
    os._exit(0)  # no interpreter teardown: nothing to flush, and it takes seconds


def collectives(parts: list[tuple[str, list[int]]], world: int, repeats: int, warmup: int
                ) -> tuple[list[list[list[float]]], list[float]]:
    """Per (collective, sizes) of ``parts`` ('allreduce', 'allgather', 'reducescatter'
    or 'broadcast'), per size, the time of each timed collective among ``world``
    processes on loopback (this one is rank 0; the others are spawned and die with it),
    every part in one process group: each group of spawned ranks costs seconds of
    importing; and a parallel worker's runtimes (``_runtimes``)."""
    if world < 2:
        raise UnsupportedError("an all-reduce needs at least 2 processes (world >= 2)")
    if "GLOO_SOCKET_IFNAME" not in os.environ:
        lo = _loopback_interface()
        if lo:
            os.environ["GLOO_SOCKET_IFNAME"] = lo  # inherited by the spawned ranks
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="dlperf-allreduce-") as tmp:
        path = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_helper, args=(r, world, path, parts, repeats, warmup,
                                                   os.getpid()), daemon=True)
                 for r in range(1, world)]
        for p in procs:
            p.start()
        try:
            return _allreduce_rank(0, world, path, parts, repeats, warmup, os.getpid())
        finally:
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()


# ----------------------------------------------------------------------------- core sharing
#: the step the core-sharing kernel times: a small MLP's forward and backward pass (batch
#: 16, 1024-2048-2048-10), one thread, its working set a few tens of MB as a worker's is
SHARE_LAYERS, SHARE_BATCH = (1024, 2048, 2048, 10), 16


def _share_step(batch: int = SHARE_BATCH):
    net = torch.nn.Sequential(*[m for a, b in zip(SHARE_LAYERS, SHARE_LAYERS[1:], strict=False)
                                for m in (torch.nn.Linear(a, b), torch.nn.ReLU())][:-1])
    x = torch.randn(batch, SHARE_LAYERS[0])

    def step() -> None:
        net.zero_grad(set_to_none=True)
        net(x).sum().backward()
    return step


def _share_worker(cpu: int, parent: int, conn,
                  make: Callable[[], Callable[[], object]]) -> None:
    """Seconds per call of ``make()``'s call in one process pinned to ``cpu``, a round at
    a time: warmed up, it says so on ``conn``, then times each round it is sent (its
    seconds) and sends back its time; None, or a parent gone quiet, ends it."""
    from dlperf.core.orphans import die_with_parent

    die_with_parent(parent)
    os.sched_setaffinity(0, {cpu})
    torch.set_num_threads(1)
    call = make()
    for _ in range(5):  # allocations and the library's first-call paths
        call()
    conn.send("ready")
    while conn.poll(READY_S) and (seconds := conn.recv()) is not None:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            call()
            n += 1
        conn.send((time.perf_counter() - t0) / n)  # a pipe's send is done when it returns
    os._exit(0)


#: seconds a core-sharing process may take to import torch and warm up, and to wait for
#: the others to
READY_S = 60.0


def _receive(conn, timeout_s: float, what: str):
    if not conn.poll(timeout_s):
        raise RuntimeError(f"a core-sharing process {what} within {timeout_s:.0f} s")
    return conn.recv()


class SharePool:
    """``size`` spawned processes pinned to the first CPU this one may use, each running
    ``make()``'s call (a picklable factory; the training step of ``_share_step`` by
    default), warmed up once and kept for every round: a round's processes import
    nothing, and a core-sharing measurement of seven rounds took 28 s of spawning
    where its timing took 7. Used as a context manager; leaving it ends them."""

    def __init__(self, size: int, make: Callable[[], Callable[[], object]] = _share_step):
        from dlperf.core.environment import usable_cpus

        cpu = usable_cpus()[0]
        ctx = mp.get_context("spawn")
        pipes = [ctx.Pipe() for _ in range(size)]
        self._conns = [mine for mine, _ in pipes]
        self._procs = [ctx.Process(target=_share_worker, args=(cpu, os.getpid(), theirs, make),
                                   daemon=True) for _, theirs in pipes]

    def __enter__(self) -> SharePool:
        for p in self._procs:
            p.start()
        try:
            for c in self._conns:  # every one imported and warmed up before any round
                _receive(c, READY_S, "said it was ready")
        except BaseException:
            self.__exit__()
            raise
        return self

    def round(self, procs: int, seconds: float) -> list[float]:
        """Seconds per call in each of the first ``procs`` processes, run at once for
        ``seconds`` (started together: each is sent its round back to back)."""
        conns = self._conns[:procs]
        for c in conns:
            c.send(seconds)
        return [_receive(c, READY_S + seconds, "sent no time") for c in conns]

    def __exit__(self, *exc: object) -> None:
        for c in self._conns:
            try:
                c.send(None)
            except OSError:  # that process has already gone
                pass
        for p in self._procs:
            if p.pid is None:  # never started (another failed to start before it)
                continue
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


#: rounds of two processes on one CPU in a core-sharing measurement, each between two
#: rounds of one alone: on a VM whose speed moves by a fifth within minutes, one round
#: read x1.22 at a 0.2 s step where three, interleaved, read x0.87-1.00
#: (``benchmarks/bench_core_sharing.py``, 2-vCPU AMD EPYC, 2026-11-28)
SHARE_ROUNDS = 3


def core_sharing(seconds: float, batch: int = SHARE_BATCH) -> tuple[list[float], list[float]]:
    """Seconds of a step (``_share_step`` at ``batch``) of one process alone on a CPU
    (the rounds before and after), and of each of two processes on that CPU at once
    (``perfmodel.sharing``; ``SharePool``): of ``SHARE_ROUNDS`` rounds of two, each
    between rounds alone, the one whose cost against its neighbours is the median (a
    round the machine slowed or sped up is not the one kept). One pool of two processes
    runs every round, the first of them the rounds alone."""
    with SharePool(2, functools.partial(_share_step, batch)) as pool:
        alone = [pool.round(1, seconds)]
        rounds = []
        for _ in range(SHARE_ROUNDS):
            two = pool.round(2, seconds)
            alone.append(pool.round(1, seconds))
            rounds.append((sharing_cost(alone[-2] + alone[-1], two), alone[-2] + alone[-1],
                           two))
    _, beside, two = sorted(rounds, key=lambda r: r[0])[len(rounds) // 2]
    return beside, two
