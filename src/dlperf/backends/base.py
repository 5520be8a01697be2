"""The backend interface. This module imports no framework.

A backend turns a framework-neutral workload config into something the worker times. What
it times is a ``Timed``: ``step()`` queues one unit of work on data already on the device
and ``sync()`` waits for the device; the worker times ``step(); sync()``. A ``Trainer`` is
a Timed whose step is one forward + backward + parameter update; ``ForwardOnly`` is one
forward pass (kind 'inference'); peak probes and calibration kernels are plain Timed.

Every backend has the core (``Backend``: threads, precision, software versions, building
a training step). What else it can do, it declares by inheriting a capability (its class
line is the list): ``Inference``, ``InputPipelines``, ``PeakMatmul``, ``PeakConv``,
``CalibrationKernels``, ``Profiling``, ``AllReduce``. Capabilities are abstract base
classes, not ``typing.Protocol``s: the declaration and the methods are one thing (a
declared capability whose method is missing fails when the backend is created, not in the
middle of a sweep), and ``isinstance`` checks the declaration, never a method that happens
to have the name (all a runtime-checkable Protocol would check).
A caller asks for one with ``capability(backend, Inference)``, which raises
UnsupportedError (an 'unsupported' failure) naming the backend and what it lacks.

Each framework has one module (``torch_backend``, ``tf_backend``, ``jax_backend``, ...)
that imports the framework at the top; the registry in ``dlperf.backends`` names them, so
nothing is imported until a worker needs it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar


class UnsupportedError(Exception):
    """This backend cannot run this configuration (recorded as an 'unsupported' failure)."""


# ----------------------------------------------------------------------------- timed things
class Timed(ABC):
    """What the step timer times (``kinds.step.run.time_steps``): one built unit of work
    for one workload, size and device."""

    #: trainable parameters, as the framework counts them (0: a kernel has none)
    param_count: int
    #: samples per step (the mini-batch size; a kernel's size)
    batch_size: int

    @abstractmethod
    def step(self) -> Any:
        """Queue one unit of work. May return its output (a device value)."""

    @abstractmethod
    def sync(self) -> None:
        """Block until all queued device work is done (no-op on an eager CPU)."""

    def flops_per_step(self) -> float | None:
        """FLOPs of one step from the framework's own counter, or None if it has none."""
        return None

    def device_peak_bytes(self) -> int | None:
        """Peak device memory (GPU), or None on the CPU."""
        return None

    def device_clock(self) -> Any | None:
        """The device's own timer of the work ``step()`` queues (``start()`` and ``stop()``
        around the calls, ``elapsed()`` seconds after the sync), or None: the wall clock
        times it (``kinds.calibrate.run.Queued``)."""
        return None


class Trainer(Timed):
    """One built training step: ``step()`` is one forward + backward + update."""

    def loss(self) -> float:
        """Loss of the last step, as a Python float (forces a sync)."""
        raise NotImplementedError

    # Weight and data exchange in the framework-neutral layout (see WEIGHT_LAYOUT), so that
    # parity tests can start every framework from the same weights and the same batch.
    def get_weights(self) -> dict[str, Any]:
        raise NotImplementedError

    def set_weights(self, weights: dict[str, Any]) -> None:
        raise NotImplementedError

    def set_batch(self, x: Any, y: Any) -> None:
        """Replace the synthetic batch with numpy arrays in the neutral layout."""
        raise NotImplementedError


class PipelineTrainer(Trainer):
    """A training step that also takes its batch from its backend's input pipeline
    (``InputPipelines``): what a backend with that capability builds for a DLBench
    network."""

    @abstractmethod
    def train_on(self, x: Any, y: Any) -> Any:
        """One step on a batch from ``InputPipelines.input_pipeline``, in the framework's
        own tensor type on the host: the trainer moves it to its device (no numpy round
        trip) and runs ``step()`` on it."""


def pipeline_trainer(trainer: Trainer) -> PipelineTrainer:
    """``trainer`` as one that trains on an input pipeline, or UnsupportedError."""
    if isinstance(trainer, PipelineTrainer):
        return trainer
    raise UnsupportedError(f"{type(trainer).__name__} cannot train on an input pipeline")


class ForwardOnly(Timed):
    """A built network in the framework's inference mode: ``step()`` is one forward pass
    (one query) over a batch already on the device, with no autograd and the network in
    evaluation mode (batch normalisation on its running statistics, dropout off). What
    ``Inference.build_inference`` returns; the worker times it as it times a step."""

    #: how the framework was put into inference mode (recorded with the result)
    mode: str = ""

    def grad_free(self) -> bool | None:
        """After the timed queries: True when the framework's own state shows that no
        gradient was recorded (None: this backend cannot tell)."""
        return None


#: The neutral layout of ``get_weights``/``set_weights`` (numpy float32 arrays), keyed by
#: the layer names of ``dlperf.workloads`` plus a suffix:
WEIGHT_LAYOUT = """
dense     NAME.w (in, out)            NAME.b (out,)
conv      NAME.w (kh, kw, in, out)    NAME.b (out,)      (HWIO, as TensorFlow and Flax)
bn        NAME.gamma (C,)             NAME.beta (C,)
embedding NAME.w (vocab, embed)
lstm      NAME.wx (in, 4H)  NAME.wh (H, 4H)  NAME.b (4H,)   gate order i, f, g, o
A dense layer fed by a flattened feature map takes its rows in (C, H, W) order.
Inputs: images (N, C, H, W) float32; tokens (N, T) int; targets (N,) or (N, T) int.
"""


#: Why tf32 never runs on a CPU.
NO_TF32_ON_CPU = ("tf32 is a GPU format (NVIDIA Ampere and later tensor cores); CPUs have "
                  "no TF32 arithmetic: use --precision fp32 (or bf16)")


#: the mixed precisions (``RunSpec.precision``)
MIXED = ("bf16", "fp16")
MIXED_KERNELS = ("the calibration kernels run under mixed precision in PyTorch only (its "
                 "autocast); calibrate this framework at fp32 or tf32")


# ----------------------------------------------------------------------------- the core
class Backend(ABC):
    """A framework's implementation: what every backend has. Subclasses live in modules
    that import the framework, and add the capabilities below that they implement."""

    name: str
    #: the precision that set_precision applied; build() reads it
    precision: str = "fp32"

    @abstractmethod
    def set_threads(self, threads: int) -> int:
        """Apply the thread count before the first op; return the count now in force."""

    @abstractmethod
    def set_precision(self, precision: str, device: str) -> dict[str, Any]:
        """Apply the numeric precision (dlperf.core.spec.Precision) before anything is built and
        return the framework's settings read back, which the result records. fp32 turns
        TF32 and reduced-precision reductions off; tf32 turns them on; bf16 and fp16 make
        build() use the framework's mixed precision. A precision this backend cannot run
        on this device raises UnsupportedError with the reason (``fp32_only``: a backend
        that runs fp32 alone)."""

    @abstractmethod
    def software(self) -> dict[str, Any]:
        """Versions of the framework, its BLAS/DNN libraries and the devices it sees."""

    @abstractmethod
    def has_gpu(self) -> bool: ...

    @abstractmethod
    def build(
        self, workload: str, config: Any, batch_size: int, variant: str, device: str, seed: int
    ) -> Trainer:
        """Build the network, optimizer (plain SGD) and synthetic data on the device."""


def fp32_only(backend: Backend, precision: str) -> dict[str, Any]:
    """``set_precision`` of a backend that runs fp32 only: it has no settings to read back."""
    if precision != "fp32":
        raise UnsupportedError(f"the {backend.name} backend runs fp32 only")
    backend.precision = precision
    return {}


# ----------------------------------------------------------------------------- capabilities
class Capability(ABC):
    """Something a backend can do beyond the core, declared by inheriting it."""

    #: what the capability is, as the message of a backend without it names it
    label: ClassVar[str]
    #: that message; ``{name}`` is the backend's name
    missing: ClassVar[str]


class Inference(Capability):
    """Forward-only queries (kind 'inference')."""

    label = "inference mode"
    missing = "the {name} backend has no inference mode"

    @abstractmethod
    def build_inference(
        self, workload: str, config: Any, batch_size: int, variant: str, device: str, seed: int
    ) -> ForwardOnly:
        """The network and a synthetic batch of ``batch_size`` on the device, in the
        framework's inference mode (``ForwardOnly``); the same weights as ``build``."""


class InputPipelines(Capability):
    """The framework's own input pipeline (kind 'dataflow', a step on real data). Its
    ``build`` returns a ``PipelineTrainer`` for a DLBench network."""

    label = "input pipeline"
    missing = "the {name} backend has no input pipeline"

    @abstractmethod
    def input_pipeline(self, source: Any, batch_size: int, seed: int, device: str) -> Any:
        """The framework's own input pipeline over ``source`` (a
        ``dlperf.inputs.pipeline.Source``): an ``InputPipeline`` whose batches are in
        this framework's tensor type, for ``PipelineTrainer.train_on``."""


class PeakMatmul(Capability):
    """The fp32 matmul among the kernels whose best FLOP/s is the machine's peak
    (kind 'peak', ``dlperf.kinds.peak.rates``; ``probe`` picks a kernel by name)."""

    label = "matmul probe"
    missing = "{name} has no matmul probe"

    @abstractmethod
    def matmul(self, n: int, device: str) -> Timed:
        """An n x n fp32 matmul."""


class PeakConv(Capability):
    """The fp32 convolution peak kernel."""

    label = "conv probe"
    missing = "{name} has no conv probe"

    @abstractmethod
    def conv(self, n: int, device: str) -> Timed:
        """The fp32 convolution of ``conv_probe_shape(n)``, forward."""


class CalibrationKernels(Capability):
    """The kernels the performance model is calibrated on (kind 'kernel')."""

    label = "calibration kernels"
    missing = "{name} has no calibration kernels"

    @abstractmethod
    def kernel(self, op: str, shape: tuple[int, ...], device: str) -> Timed:
        """One calibration kernel (``dlperf.perfmodel.kernels``: 'gemm', 'conv', 'conv_bwd',
        'memory', 'dispatch', ...) of one shape: ``step()`` runs it once, the way this
        framework runs a training step's ops."""


class Profiling(Capability):
    """The framework's own profiler over training steps (kind 'profile', ``dlperf explain``)."""

    label = "profiler"
    missing = ("dlperf explain cannot profile {name} steps yet "
               "(the profilers of torch, tensorflow and jax are wired)")

    @abstractmethod
    def profile(self, trainer: Trainer, steps: int, device: str) -> tuple[list[dict], float]:
        """Run ``steps`` of ``trainer`` under this framework's own profiler: (each op group
        as ``kinds.explain.options.ProfiledOp`` fields, per step; the mean wall time of a
        step)."""


@dataclass(frozen=True)
class WorkerRuntime:
    """A parallel worker's resident memory before its network: with its process group up
    (gloo), after a plain backward pass of a tiny layer (backward), and after a
    DistributedDataParallel step of one (ddp); with the RPC agent of a parameter-server
    worker up besides (rpc), and a DDP step too (ddp_rpc; None where the agent could not
    be measured)."""

    gloo_bytes: int
    ddp_bytes: int
    rpc_bytes: int | None = None
    ddp_rpc_bytes: int | None = None
    backward_bytes: int | None = None


class AllReduce(Capability):
    """All-reduces among processes on this machine (the calibration's 'allreduce' op)."""

    label = "all-reduce kernel"
    missing = "{name} has no all-reduce kernel (torch's gloo has)"

    @abstractmethod
    def allreduce(self, sizes: list[int], world: int, repeats: int, warmup: int,
                  op: str = "allreduce") -> tuple[list[list[float]], WorkerRuntime | None]:
        """Per size in bytes, the seconds of each of ``repeats`` all-reduces among
        ``world`` processes on this machine (after ``warmup`` untimed ones); ``op``
        'allgather', 'reducescatter' or 'broadcast': that collective, the size its whole
        tensor's.
        Also the resident memory of a parallel worker's runtime measured in those
        processes (None where not measured)."""

    def collectives(self, parts: list[tuple[str, list[int]]], world: int, repeats: int,
                    warmup: int) -> tuple[list[list[list[float]]], WorkerRuntime | None]:
        """``allreduce`` of each (op, sizes) of ``parts``, per part its series; a backend
        that can time them all among one set of processes does (by default, one set
        each, the runtime of the last)."""
        out, runtime = [], None
        for op, sizes in parts:
            series, runtime = self.allreduce(sizes, world, repeats, warmup, op=op)
            out.append(series)
        return out, runtime

    @abstractmethod
    def core_sharing(self, seconds: float, batch: int | None = None
                     ) -> tuple[list[float], list[float]]:
        """Seconds of a small training step (at ``batch``, else its own) in one process
        alone on a CPU, and in each of two processes on that CPU at once, each timed for
        ``seconds`` (the calibration's 'share' op: what workers sharing a core lose beyond
        processor sharing)."""


#: every capability a backend can declare
CAPABILITIES: tuple[type[Capability], ...] = (
    Inference, InputPipelines, PeakMatmul, PeakConv, CalibrationKernels, Profiling, AllReduce,
)

C = TypeVar("C", bound=Capability)


def capability(backend: Backend, cap: type[C]) -> C:
    """``backend`` as the capability ``cap``; a backend that does not declare it raises
    UnsupportedError with ``cap.missing``, which names the backend and the capability."""
    if isinstance(backend, cap):
        return backend
    raise UnsupportedError(cap.missing.format(name=backend.name))


#: the peak kernels (a peak run's ``RunSpec.network``)
PEAK_KERNELS = ("matmul", "conv")


def probe(backend: Backend, kernel: str, n: int, device: str) -> Timed:
    """The peak kernel ``kernel`` ('matmul': ``PeakMatmul``, 'conv': ``PeakConv``) of size
    ``n`` on ``backend``."""
    if kernel == "matmul":
        return capability(backend, PeakMatmul).matmul(n, device)
    if kernel == "conv":
        return capability(backend, PeakConv).conv(n, device)
    raise UnsupportedError(f"no peak kernel '{kernel}' (known: {', '.join(PEAK_KERNELS)})")


def conv_probe_shape(n: int) -> tuple[int, int, int]:
    """(batch, channels, height = width) of the conv probe of size ``n``: ResNet-50's
    conv4_x 3x3 layer (256 -> 256 channels on a 14x14 map, stride 1, padding 1; He et al.,
    "Deep Residual Learning for Image Recognition", 2016, Table 1), at batch n // 64, so
    that at the default size 2048 (batch 32, 7.4 GFLOP) a step costs about as much as the
    2048 x 2048 matmul's (17 GFLOP)."""
    return max(1, n // 64), 256, 14


def conv_probe_flops(n: int) -> float:
    """2 x multiply-adds of the conv probe: batch x H x W x C_out x C_in x 3 x 3."""
    b, c, hw = conv_probe_shape(n)
    return 2.0 * b * hw * hw * c * c * 9
