"""The calibration kernels, framework-free: what each one computes, its FLOPs and bytes,
the grid of shapes ``dlperf calibrate`` times, and the typed options and outcome of a
run of kind 'kernel'.

A kernel run times a list of shapes of one op in one worker (one framework start for
the whole list) and returns one ``KernelSample`` per shape. The ops:

- ``gemm`` (m, n, k): C = A @ B with A m x k, B k x n, at the run's precision (fp32; TF32
  where the run turns it on; fp16 or bf16 operands under mixed precision, as autocast
  casts them);
- ``gemm_tn`` (m, n, k): C = A^T @ B with A stored k x m: the weight gradient's form
  (inputs transposed against the output gradient, inner dimension the batch), which a
  BLAS can run at another speed than the plain product;
- ``gemm_nt`` (m, n, k): C = A @ B^T with B stored n x k: a dense layer's product that
  reads its weights transposed (the input gradient where the weights are stored inputs x
  outputs, as Keras' and flax's are; the forward where outputs x inputs, as PyTorch's),
  which a library can run at another speed at a few rows (TensorFlow at one thread on
  this project's 2-vCPU AMD EPYC: 64 x 2048 over 26752, 32 ms plain, 60 ms transposed);
- ``gemm_tn_seq`` (m, n, t, b): the same weight gradient of a layer applied to a
  sequence: inputs (t x b x m) and output gradients (t x b x n), contracted over time and
  batch, the way each framework's dense layer on a 3-D tensor runs it (PyTorch and
  TensorFlow flatten it into ``gemm_tn``; XLA's training step runs one plain dot with
  the output gradient laid out transposed, at another speed);
- ``conv`` (batch, c_in, c_out, side, window, stride): a 2-D convolution, padding
  window // 2, forward only; ``conv_bwd`` the same layer's backward (input and weight
  gradients from a given output gradient); ``conv_wgrad`` the weights' gradient alone,
  which is all a step computes for its first layer, fed by data (no input gradient:
  PyTorch's autograd, a TensorFlow tape and XLA all skip it); the input's gradient of a
  three-channel window is most of the pair (PyTorch at one thread on this project's
  2-vCPU AMD EPYC: AlexNet's first layer at batch 16, both 220 ms, the weights' 38 ms);
- ``memory`` (elements,): y = 2 x into a fresh result, one read and one write per
  element: the bandwidth a memory-bound layer gets for a working set of that size (its
  result newly allocated, as a layer's is);
- ``update`` (elements,): x = 0.999 x in place: the optimizer's update of a weight, which
  writes over what it read;
- ``dispatch`` (ops,): a chain of ``ops`` dependent 8 x 8 matrix products, nothing to
  compute: the fixed cost of one op in this framework's step (the slope over the
  chain length) and of one call (the intercept);
- ``dispatch_train`` (layers,): the same chain of ``layers`` 8 x 8 weights trained as the
  backends train: the forward, the backward's two products per layer through the
  framework's autograd (eager PyTorch's engine, a TensorFlow tape, JAX's grad under jit)
  and the framework's SGD optimizer (torch.optim.SGD with zero_grad, Keras' SGD, optax's
  sgd): the per-kernel cost of a training step's ops (the slope over 4 kernels per layer)
  and of one step call (the intercept: the optimizer's own fixed cost included);
- ``xent`` (rows, classes): the framework's softmax cross-entropy with integer labels
  over (rows x classes) logits, its mean and the gradient of that mean (the loss of
  every classifier, as the backends compute it): exponentials and two passes over the
  logits, slower than a plain memory pass of the same bytes, and by how much is the
  library's;
- ``bn`` (batch, channels, side): the framework's batch normalisation in training mode
  over a (batch, channels, side, side) activation, forward and backward (the input's,
  the scale's and the shift's gradients), as the backends' layers run it: several passes
  over the activation (the batch statistics, the normalisation, and as many back), so
  far slower than one memory pass of the same bytes;
- ``pool`` (batch, channels, side): the framework's 3x3 max pool at stride 2 with one
  row of padding (the pool of AlexNet and of ResNet's stem, as the backends build it)
  over a (batch, channels, side, side) activation, forward and its input's gradient: the
  gradient scatters each window's maximum back, which a library can run far slower than a
  memory pass of the same bytes (XLA:CPU as an iota, a reduce-window and a scatter);
- ``lstm`` (batch, steps, inputs, hidden): one LSTM layer as the backends build it over a
  sequence (PyTorch's ``nn.LSTM``, run by oneDNN's fused RNN primitive; Keras' ``LSTM``;
  the Flax layer of ``jax_backend``, a ``lax.scan``), forward and the gradients of its
  input and weights: the recurrence's small products and the gates' elementwise work in
  the library's own loop, which its products timed one by one do not show (PyTorch's
  oneDNN LSTM at DLBench's shape took 262 ms a step against 187 ms from the GEMM curve);
- ``allreduce`` (bytes,): a gloo all-reduce of fp32 on loopback among ``world``
  processes (PyTorch only);
- ``allgather``, ``reducescatter`` (bytes,): gloo's all-gather into a tensor of those
  bytes from a 1/``world`` shard of each process, and its reduce-scatter of a tensor of
  those bytes into such shards (PyTorch only; what fully sharded data parallelism runs);
- ``broadcast`` (bytes,): gloo's broadcast of a tensor of those bytes from one process to
  the others (PyTorch only; how a mixed group's leader hands its group the pulled
  weights): one transfer, no sum, so faster than an all-reduce of the same bytes;
- ``share`` (processes,) or (processes, batch): a small network's training step, at batch
  ``SHARE_BATCH`` or ``batch``, in 1 or 2 processes pinned to one CPU at once, the
  seconds of a step in each (PyTorch only): what two processes on one core lose beyond
  processor sharing (``perfmodel.sharing``), for a short step and a long one.

The grids are generic (powers of two across the range layers use), never the shapes of
the networks that are then predicted: a prediction for resnet50 from the full grid uses
kernel rates, not resnet50's layers measured. A calibration scoped to networks
(``perfmodel.network_kernels``, the main job's) times their layers' products and
convolutions as kernels alone, beside a skeleton of the grid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from dlperf.perfmodel.catalogue import PRECISIONS

Op = Literal["gemm", "gemm_tn", "gemm_nt", "gemm_tn_seq", "conv", "conv_bwd", "conv_wgrad",
             "memory", "update", "xent", "bn", "pool", "lstm", "dispatch", "dispatch_train", "allreduce",
             "allgather", "reducescatter", "broadcast", "share"]
OPS: tuple[str, ...] = ("gemm", "gemm_tn", "gemm_nt", "gemm_tn_seq", "conv", "conv_bwd",
                        "conv_wgrad", "memory", "update", "xent", "bn", "pool", "lstm", "dispatch",
                        "dispatch_train", "allreduce", "allgather", "reducescatter",
                        "broadcast", "share")
#: the matrix products among the ops
PRODUCTS = ("gemm", "gemm_tn", "gemm_nt", "gemm_tn_seq")
#: the convolutions among the ops, each on (batch, c_in, c_out, side, window, stride)
CONVS = ("conv", "conv_bwd", "conv_wgrad")
#: the collectives among processes the calibration times (gloo, on loopback)
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast")
#: ops timed among processes, of the machine rather than of one framework's threads
MACHINE_OPS = (*COLLECTIVES, "share")
#: products per layer of the trained chain: the forward and the two gradients
TRAIN_PRODUCTS = 3
#: kernels per layer of the trained chain: its products and the optimizer's update
TRAIN_KERNELS = 4
#: the fp32 element
ELEM = 4
#: the kernels' own revision, part of a kernel run's identity. 1: the first kernels;
#: 2: the transposed product, the in-place update, and the products and memory pass make a
#: fresh result per call (as a training step's ops do); 3: small convolutions, the
#: trained dispatch chain; 4: TensorFlow's convolutions padded as its Keras layers pad,
#: an 11x11 window at stride 4; 5: the trained chain updates its weights with the
#: framework's SGD optimizer; 6: the weight gradient over a sequence (gemm_tn_seq);
#: 7: the softmax cross-entropy (xent), and the sequence's weight gradient timed up to
#: the inner dimension of a long sequence batch (8192 rows); 8: batch normalisation (bn),
#: the memory passes at every power of two; 9: JAX's weight gradient over a sequence as
#: the plain dot its training step runs; 10: convolutions also at a large map
#: (``CONV_LARGE_ELEMS``); 11: the sequence's weight gradient also at ``SEQ_FEATURES`` rows,
#: every convolution also at a training batch's size, operands drawn uniform; 12: the
#: products also at a few rows (``SMALL_ROWS``), the all-reduce up to 256 MB; 13: the max
#: pool and its gradient (pool); 14: an LSTM layer whole (lstm); 15: a network's strided
#: convolutions at the input side the network gives them (``network_kernels.conv_shape``);
#: 16: the first layers' 7x7 and 11x11 windows also at 64 outputs (``CONV_LAYERS``);
#: 17: pointwise convolutions over a 48-pixel map (``POINTWISE_LARGE_MAPS``); 18: the
#: product with its second operand stored transposed (gemm_nt); 19: a first layer's weight
#: gradient alone (conv_wgrad)
REVISION = 19
#: what a revision changed, in a user's words (``LocalFit.older_kernels``)
REVISION_CHANGES = {
    13: "the max pool and its gradient timed",
    14: "an LSTM layer timed whole",
    15: "a network's strided convolutions timed at the input side the network gives them",
    16: "the first layers' 7x7 and 11x11 windows timed at 64 outputs too, where XLA runs "
        "them six times faster than at 32",
    17: "pointwise (1x1) convolutions timed over a large map too, as a bottleneck block "
        "runs them",
    18: "a dense layer's product that reads its weights transposed timed as such (the "
        "input gradient in TensorFlow and JAX, up to twice the plain product's time at a "
        "few rows)",
    19: "a first layer's weight gradient timed alone, as a step runs it (no input "
        "gradient), where the pair's half had stood in for it",
}


def changes_since(revision: int) -> list[str]:
    """What each revision after ``revision`` changed, oldest first (``REVISION_CHANGES``;
    'kernels changed' for one not described)."""
    return [REVISION_CHANGES.get(r, f"revision {r}: kernels changed")
            for r in range(revision + 1, REVISION + 1)]


#: the core-sharing step's batch beside ``torch_kernels.SHARE_BATCH``'s: a step of about
#: 0.1 s on one core, longer than the scheduler's time slices, as a network's step is
SHARE_LONG_BATCH = 512
#: the max pool the calibration times (``pool``): window, stride, padding
POOL_WINDOW, POOL_STRIDE = 3, 2
#: side of the dependent matrix products of the dispatch chain
DISPATCH_SIDE = 8


class KernelPart(BaseModel):
    """One op and the shapes to time it at."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    op: Op
    shapes: tuple[tuple[int, ...], ...]


class KernelOptions(BaseModel):
    """``RunSpec.options`` of a run of kind 'kernel': the ops and their shapes, timed one
    after another in one worker, and how long to time each shape (after ``warmup``
    untimed calls; at least ``min_steps`` calls)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parts: tuple[KernelPart, ...] = Field(min_length=1)
    world: int = Field(1, ge=1)  # processes of an all-reduce
    min_time_s: float = Field(0.05, gt=0)
    min_steps: int = Field(3, ge=1)
    warmup: int = Field(1, ge=0)
    #: the versions of the framework's packages: a new version is a new calibration
    versions: dict[str, str] = Field(default_factory=dict)
    #: how dlperf's kernels run (``REVISION``): kernels that changed measure again
    revision: int = 0
    #: the networks whose layers' shapes it times, 'alexnet@16' (network@batch), beside a
    #: skeleton of the grid (``perfmodel.network_kernels``); empty: the whole grid
    scope: tuple[str, ...] = ()
    #: after its shapes, the worker times its framework's peak kernels at its thread count
    #: (``kinds.peak``), stored as peak runs of their own: the framework is loaded and the
    #: CPUs held already, where a peak worker of its own costs a framework start
    peaks: bool = False
    #: a run that times again every shape of its ops that a calibration's runs timed at
    #: other speeds (``kinds.calibrate.retime``), rather than the shapes slower at more
    #: threads than at fewer
    together: bool = False
    #: what the worker measures besides its configuration: not part of the run's identity
    #: (``RunSpec.identity``), so that a calibration stored without it is not run again
    BESIDE: ClassVar[frozenset[str]] = frozenset({"peaks"})

    def label(self, framework: str, device: str, threads: int, again: bool = False) -> str:
        """'kernels torch cpu x1 (gemm, conv, ...)', 'allreduce torch cpu 4 processes';
        ``again``: a run that times shapes again ('kernels torch cpu x2 timed again
        (memory 1 shape)', 'kernels torch cpu x2 timed again where its runs disagreed
        (gemm 56 shapes)')."""
        ops = [p.op for p in self.parts]
        if ops[0] == "allreduce":
            return f"allreduce {framework} {device} {self.world} processes"
        if again:
            why = " where its runs disagreed" if self.together else ""
            return (f"kernels {framework} {device} x{threads} timed again{why} ("
                    + ", ".join(f"{p.op} {len(p.shapes)} shape{'s' if len(p.shapes) != 1 else ''}"
                                for p in self.parts) + ")")
        scope = f" for {', '.join(self.scope)}" if self.scope else ""
        return f"kernels {framework} {device} x{threads}{scope} ({', '.join(ops)})"


class KernelSample(BaseModel):
    """One shape's time: the median of its timed calls, and every call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    op: Op
    shape: tuple[int, ...]
    median_s: float
    times_s: tuple[float, ...] = ()
    flops: float = 0.0
    bytes: float = 0.0
    world: int = 1
    cpu_util: float | None = None  # process CPU seconds per second over the timed calls
    #: what timed it: 'wall' (the host's clock: the framework's call and launch included)
    #: or 'device' (the GPU's own clock: the kernel's work alone, ``calibrate.worker.Queued``)
    clock: Literal["wall", "device"] = "wall"

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.median_s

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.median_s


class KernelOutcome(BaseModel):
    """``RunResult.outcome`` of a kernel run: one sample per shape that ran, and why the
    others did not. Fields written by another version of dlperf are kept (a store stays
    readable both ways)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    samples: tuple[KernelSample, ...] = ()
    failures: dict[str, str] = Field(default_factory=dict)  # 'm x n x k' -> reason
    #: samples kept from an interrupted run of the same spec instead of timed again
    resumed: int = 0
    #: samples timed while the machine's own speed moved, timed once more at the end of
    #: the run (``perfmodel.steadiness``), and of them those the second timing replaced
    retimed: int = 0
    steadier: int = 0
    #: the worker's resident memory with the framework loaded, before any kernel: the
    #: framework's runtime baseline (``perfmodel.memory``)
    baseline_rss_bytes: int | None = None
    #: the files' pages (the libraries'; ``environment.file_resident_bytes``) it held once
    #: the networks' runtimes were measured (their training's code mapped), else before
    #: any kernel: a step's own beside them says how far the page cache's state moved
    baseline_file_rss_bytes: int | None = None
    #: per op, the share of its CPUs' time other processes took while its shapes were
    #: timed (``core.disturbance``); an op missing: not measurable
    other_cpu_share: dict[str, float] = Field(default_factory=dict)
    #: a parallel worker's runtime, measured in the collectives' processes: its resident
    #: memory with gloo's process group up, and after a DistributedDataParallel step of a
    #: tiny layer (the leanest rank's, a spawned process as a parallel worker is; None
    #: where no collective ran)
    gloo_runtime_bytes: int | None = None
    ddp_runtime_bytes: int | None = None
    #: the same after a plain backward pass of a tiny layer, between the two (autograd's
    #: engine: a pipeline stage's runtime; None: measured by an older dlperf)
    backward_runtime_bytes: int | None = None
    #: the same with torch.distributed.rpc's agent up besides (a parameter-server
    #: worker's: async), and after the DDP step too (a mixed group's worker), in processes
    #: of their own at the run's world (``backends.torch_rpc_runtime``; None: not measured)
    rpc_runtime_bytes: int | None = None
    ddp_rpc_runtime_bytes: int | None = None
    #: those runtimes (``<name>_runtime_bytes``, as ``WorkerRuntime`` names them
    #: ``<name>_bytes``), each with the name the memory model reads it by and whether it
    #: was measured at the run's world ('rpc@4': ``machine_fits.at_world``)
    RUNTIMES: ClassVar[dict[str, tuple[str, bool]]] = {
        "gloo": ("gloo", False), "backward": ("backward", False), "ddp": ("ddp", False),
        "rpc": ("rpc", True), "ddp_rpc": ("ddp+rpc", True)}
    #: the machine's speed as its kernels ran: the probes before, between (``Spread``)
    #: and after them, part by part their median (``core.speed_probe``, seconds per part;
    #: empty: not a CPU run, or a calibration of an older dlperf; an older one's probed
    #: before and after the kernels only)
    speed_probe: dict[str, float] = Field(default_factory=dict)
    #: per network, the worker's peak resident memory after training the network's tiny
    #: size for two steps (``kinds.calibrate.runtime``), and that peak less the memory
    #: model's tensors of the step: the network's runtime baseline (empty: not a CPU
    #: grid's 1-thread run, or a calibration of an older dlperf)
    train_peak_bytes: dict[str, int] = Field(default_factory=dict)
    train_runtime_bytes: dict[str, int] = Field(default_factory=dict)
    #: the peak kernels timed after the shapes (``KernelOptions.peaks``), each a result of
    #: kind 'peak' as JSON; the runner stores them as runs of their own and empties this
    peak_runs: tuple[dict[str, Any], ...] = ()


def conv_out(side: int, window: int, stride: int) -> int:
    """Output side with padding window // 2 (floor mode)."""
    return (side + 2 * (window // 2) - window) // stride + 1


def conv_gemm(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """The implicit GEMM (M, N, K) of a convolution: one row per output pixel of the
    batch, one column per output channel, window^2 x c_in products per output."""
    batch, c_in, c_out, side, window, stride = shape
    out = conv_out(side, window, stride)
    return batch * out * out, c_out, window * window * c_in


def flops(op: str, shape: tuple[int, ...]) -> float:
    """FLOPs of one call (2 per multiply-add, the convention of ``dlperf.workloads``)."""
    if op in PRODUCTS:
        m, n, *k = shape
        return 2.0 * m * n * math.prod(k)
    if op in CONVS:
        m, n, k = conv_gemm(shape)
        return 2.0 * m * n * k * (2 if op == "conv_bwd" else 1)
    if op == "dispatch":
        return 2.0 * shape[0] * DISPATCH_SIDE**3
    if op == "dispatch_train":
        return TRAIN_PRODUCTS * 2.0 * shape[0] * DISPATCH_SIDE**3
    if op == "lstm":  # the products of every step, forward and both gradients
        batch, steps, inputs, hidden = shape
        return TRAIN_PRODUCTS * 2.0 * batch * steps * 4 * hidden * (inputs + hidden)
    return 0.0


def nbytes(op: str, shape: tuple[int, ...], elem: int = ELEM) -> float:
    """Bytes one call must move at least (each operand read once, each result written
    once): the memory side of the roofline. ``elem``: the bytes of an activation's element
    at the run's precision (``element_bytes``); the update and the loss stay fp32."""
    if op in PRODUCTS:
        m, n, *ks = shape
        k = math.prod(ks)
        return float(elem * (m * k + k * n + m * n))
    if op in CONVS:
        batch, c_in, c_out, side, window, _ = shape
        out = conv_out(side, window, shape[5])
        x, w, y = batch * c_in * side * side, window * window * c_in * c_out, batch * c_out * out * out
        # the weights' gradient reads the input and the output's gradient, writes the weights'
        return float(elem * ((x + w + y) if op != "conv_bwd" else (2 * y + 2 * x + 2 * w)))
    if op == "memory":
        return float(2 * elem * shape[0])
    if op == "update":
        return float(2 * ELEM * shape[0])
    if op == "xent":
        return xent_bytes(shape[0] * shape[1])
    if op == "bn":
        batch, channels, side = shape
        return bn_bytes(batch * channels * side * side, channels, elem)
    if op == "pool":
        batch, channels, side = shape
        out = conv_out(side, POOL_WINDOW, POOL_STRIDE)
        return pool_bytes(batch * channels * side * side, batch * channels * out * out, elem)
    if op == "lstm":
        batch, steps, inputs, hidden = shape
        return lstm_bytes(lstm_params(inputs, hidden), batch * steps * inputs,
                          batch * steps * hidden, elem)
    if op in COLLECTIVES:
        return float(shape[0])
    return 0.0


def xent_bytes(logits: float) -> float:
    """Bytes the loss must move at least for ``logits`` elements: read the logits, write
    their gradient (the labels and the scalar loss are negligible)."""
    return float(2 * ELEM * logits)


def bn_bytes(elems: float, channels: float, elem: int = ELEM) -> float:
    """Bytes a batch normalisation must move at least in a training step, by the rule of
    ``perfmodel.costs`` for a layer of 2 x ``channels`` parameters whose input and output
    have ``elems`` elements: forward P + I + O, backward O + 2 I + 2 P."""
    return float(elem * (5 * elems + 3 * 2 * channels))


def pool_bytes(in_elems: float, out_elems: float, elem: int = ELEM) -> float:
    """Bytes a pool must move at least in a training step, by the rule of
    ``perfmodel.costs`` for a layer without weights whose input has ``in_elems`` and
    output ``out_elems`` elements: forward I + O, backward O + 2 I."""
    return float(elem * (3 * in_elems + 2 * out_elems))


def lstm_params(inputs: int, hidden: int) -> int:
    """An LSTM layer's parameters as the neutral definition counts them: the input's and
    the state's weights of its four gates and one bias (``workloads.dlbench``)."""
    return 4 * hidden * (inputs + hidden) + 4 * hidden


def lstm_bytes(params: float, in_elems: float, out_elems: float, elem: int = ELEM) -> float:
    """Bytes an LSTM layer must move at least in a training step, by the rule of
    ``perfmodel.costs`` for a layer with weights and an input gradient: forward P + I + O,
    backward O + I + P + I + P."""
    return float(elem * (3 * params + 3 * in_elems + 2 * out_elems))


def element_bytes(precision: str) -> int:
    """Bytes of an activation's element at a precision (``catalogue.PRECISIONS``): 2 under
    mixed precision (fp16, bf16: autocast runs products, convolutions and elementwise
    layers in half), else 4. The weights, their update and the loss stay fp32 there
    (PyTorch's 'Automatic Mixed Precision' documentation: the model's parameters stay
    float32; ``cross_entropy`` and the softmaxes autocast to float32)."""
    return PRECISIONS[precision]


def label(shape: tuple[int, ...]) -> str:
    return " x ".join(str(d) for d in shape)


# ----------------------------------------------------------------------------- grids
#: GEMM sides: rows and columns from 64 to 32768 (a weight gradient's rows are a layer's
#: inputs: tens of thousands for a wide dense layer), inner dimensions from 16 to 8192
#: (the inner dimension of a weight gradient is the batch, often small).
GEMM_SIDES = (64, 512, 4096, 32768)
GEMM_INNER = (16, 128, 1024, 8192)
#: the transposed form is timed at inner dimensions up to this (batches, not layers)
GEMM_TN_INNER_MAX = 1024
#: the product with its weights read transposed is timed at rows up to this (a batch)
GEMM_NT_ROWS_MAX = 512
#: A product's rows are also timed at these counts, the rows of a dense layer's forward
#: and input gradient at a batch or a pipeline's micro-batch of a few samples: there the
#: product streams the weights at a rate of the library's own (on this project's 2-core
#: machine PyTorch's 1 x 4096 x 4096 read them at 21 GB/s, 8 x 26752 x 2048 at 8 GB/s,
#: where the curve from 64 rows up gave 3-8 times less time), each over the columns and
#: inner dimensions from SMALL_ROWS_SIDES whose weights hold at most SMALL_ROWS_ELEMS
SMALL_ROWS = (1, 8)
SMALL_ROWS_SIDES = (512, 4096, 32768)
SMALL_ROWS_ELEMS = 2**25
#: the sequence's length in the weight gradient over a sequence (the batch is the rest of
#: the inner dimension)
SEQ_STEPS = 32
#: the sequence's weight gradient's rows (a recurrent layer's input features) are also
#: timed at these sides between GEMM_SIDES': a hidden size of a few hundred is where
#: XLA:CPU's plain dot of that form runs slowest (60-90 GFLOP/s at 256 rows on two
#: threads, where 64 rows reach about 90 and 512 rows 120-270), so the octave-spaced
#: sides alone miss it
SEQ_FEATURES = (256,)
#: a GEMM larger than this takes too long at one thread to be worth its calibration time
MAX_GEMM_FLOPS = 8e9
#: ... and the sequence's weight gradient at ``SEQ_FEATURES`` rows up to this: a language
#: model's vocabulary projection (thousands of columns) over a sequence batch (thousands
#: of rows) is that large, and at such rows its time stops following its FLOPs
SEQ_FEATURES_FLOPS = 4 * MAX_GEMM_FLOPS
#: Convolutions: (c_in, c_out, side, window, stride), at the batch that brings each to
#: about CONV_FLOPS: 1x1 to 11x11 windows (the large strided window of a first layer that
#: reads an image), few and many channels, large and small maps. The first layers' large
#: windows at 32 outputs and again at 64 (ResNet's stem, VGG's and torchvision's AlexNet's
#: first layer; DLBench's AlexNet has 96): XLA:CPU runs a 3-channel convolution with 32
#: outputs at 30-37 GFLOP/s at every batch and side timed, with 64 or 96 at 190-245 over a
#: 128-pixel side and AlexNet's 224 (103 at ResNet's stem: one thread, a 2-vCPU AMD EPYC
#: Zen 5, 11x11/4 and 7x7/2 windows), a cliff that the curve's
#: saturation in output channels cannot draw from the 32-output side alone (JAX's AlexNet
#: first layer predicted 2.9 times too slow from it).
FIRST_LAYERS_AT_64 = ((3, 64, 128, 7, 2), (3, 64, 128, 11, 4))
#: Pointwise (1x1) convolutions over a large map, widening and narrowing (a bottleneck
#: block's, a depthwise-separable network's), at channel counts no network dlperf is
#: validated on has; the grid's other 1x1 windows are over 32- and 8-pixel maps, and
#: from those the curves missed ResNet-50's 1x1 layers over 56- and 28-pixel maps
#: (PyTorch's step at one thread predicted 43-49% too slow from the whole grid; with
#: these timed, nothing else changed, 30%: docs/prediction.md)
POINTWISE_LARGE_MAPS = ((96, 384, 48, 1, 1), (384, 96, 48, 1, 1))
CONV_LAYERS = (
    (3, 32, 64, 3, 1), (3, 32, 128, 7, 2), (3, 32, 128, 11, 4), *FIRST_LAYERS_AT_64,
    (32, 32, 32, 3, 1), (32, 128, 32, 1, 1), (128, 32, 32, 1, 1), (128, 128, 16, 3, 1),
    (64, 64, 32, 5, 1), (256, 256, 8, 3, 1), (256, 512, 8, 1, 2), (512, 512, 4, 3, 1),
    *POINTWISE_LARGE_MAPS,
)
#: The layers of the grid a network's first layer is like (fed by an image's three
#: channels): the shapes of ``conv_wgrad``, the weights' gradient of such a layer alone
FIRST_CONV_LAYERS = tuple(x for x in CONV_LAYERS if x[0] == 3)
CONV_FLOPS = 4e8
CONV_SMALL_FLOPS = 4e6
#: Every layer is timed again at a training batch's size: the batch that gives its output
#: about CONV_LARGE_ELEMS elements (32 MB at fp32, the activations of a network's first
#: stages), at most CONV_LARGE_FLOPS (a many-channel layer's, whose map is small), where
#: that is at least twice CONV_FLOPS' batch. At a large map a library's layout copies and
#: fresh pages, not its FLOPs, can set the time (a 1x1 window); at many channels over a
#: small map XLA:CPU's backward on two threads reaches 250-310 GFLOP/s there, 1.6-1.9
#: times its one-thread rate, where at CONV_FLOPS' few samples the second thread adds
#: little (75-275), and one curve's saturations, fitted mostly on slower layers, do not
#: reach that from the small sample alone
CONV_LARGE_ELEMS = 2**23
CONV_LARGE_FLOPS = 3.2e9
#: Elements of the memory kernel: 16 KB to 256 MB per operand (caches to DRAM), every
#: power of two: where the working set leaves the last cache, and where the allocator
#: starts handing out fresh pages, the time per byte jumps several times within one
#: doubling.
MEMORY_ELEMS = tuple(2**e for e in range(12, 27))
#: Logits of the cross-entropy kernel: 4 K to 16 M elements, over few, a thousand and
#: many classes (a classifier's labels, a language model's vocabulary).
XENT_ELEMS = tuple(2**e for e in range(12, 25, 4))
XENT_CLASSES = (16, 1024, 16384)
#: Batch normalisation: (channels, side) over few and many channels, large and small
#: maps, at the batch that brings each to about each of BN_ELEMS elements.
BN_LAYERS = ((16, 64), (64, 32), (256, 16), (1024, 8))
BN_ELEMS = (2**16, 2**20, 2**24)
#: Max pools: (channels, side) of a first stage's and a later stage's maps, at the batch
#: that brings each input to about each of POOL_ELEMS elements (AlexNet's first pool at
#: batch 16: 4.6 M)
POOL_LAYERS = ((16, 64), (256, 14))
POOL_ELEMS = (2**16, 2**19, 2**22)
#: LSTM layers: hidden sizes (the input as wide) around DLBench's 256, over SEQ_STEPS
#: steps at each batch
LSTM_HIDDEN = (128, 512)
LSTM_BATCHES = (16, 128)
#: the sequence's weight gradient is timed at inner dimensions (time x batch) up to this
SEQ_INNER_MAX = SEQ_STEPS * 256
#: A GPU's products and convolutions are timed this many times larger (MAX_GEMM_FLOPS,
#: CONV_FLOPS): the grid is sized for a CPU's minutes, and on a GPU, hundreds of times
#: faster, its largest shapes take tens of microseconds and leave the rate of a network's
#: larger layers to extrapolation.
GPU_SCALE = 32
#: Lengths of the dispatch chain.
DISPATCH_OPS = (1, 16, 64)
#: All-reduce sizes: 4 KB to 256 MB (latency- to bandwidth-bound). A network's gradient
#: is tens to hundreds of MB; on this project's 2-core machine gloo on loopback moved
#: 16 MB among 2 processes at 1.3 GB/s and 64 MB to 472 MB at 1.8-1.9, and a fit that
#: stopped at 16 MB drew its bandwidth from the noise of the small sizes (1.2 to 4 GB/s
#: from one calibration to the next)
ALLREDUCE_BYTES = (*(4 * 2**e for e in range(10, 25, 3)), 2**26, 2**28)


def gemm_grid(fine: bool = False, scale: float = 1) -> list[tuple[int, int, int]]:
    sides = (64, 256, 1024, 4096, 16384, 32768) if fine else GEMM_SIDES
    inner = (16, 64, 256, 1024, 4096, 16384) if fine else GEMM_INNER
    cap = MAX_GEMM_FLOPS * (4 if fine else 1) * scale
    return [(m, n, k) for m in sides for n in sides for k in inner if 2 * m * n * k <= cap]


def conv_grid(fine: bool = False, scale: float = 1,
              layers: Sequence[tuple[int, ...]] = CONV_LAYERS) -> list[tuple[int, ...]]:
    """Each of ``layers`` at the batch that brings it to about ``CONV_FLOPS``, and
    again at ``CONV_SMALL_FLOPS`` (a quarter of its side where even one sample is more):
    the small convolutions of a small network or batch, where the library's fixed cost
    per call, not its rate, sets the time; on a CPU, also at a training batch's size
    (``CONV_LARGE_ELEMS``, ``CONV_LARGE_FLOPS``; a GPU's grid, ``scale`` times larger,
    reaches such sizes already)."""
    out = []
    for c_in, c_out, side, window, stride in layers:
        per_sample = flops("conv", (1, c_in, c_out, side, window, stride))
        batch = max(1, round(CONV_FLOPS * (2 if fine else 1) * scale / per_sample))
        out.append((batch, c_in, c_out, side, window, stride))
        small = side if per_sample <= CONV_SMALL_FLOPS else max(window, side // 4)
        per_small = flops("conv", (1, c_in, c_out, small, window, stride))
        out.append((max(1, round(CONV_SMALL_FLOPS / per_small)), c_in, c_out, small, window,
                    stride))
        per_out = c_out * conv_out(side, window, stride) ** 2
        large = min(round(CONV_LARGE_ELEMS / per_out), int(CONV_LARGE_FLOPS / per_sample))
        if scale == 1 and large >= 2 * batch:
            out.append((large, c_in, c_out, side, window, stride))
    return out


def grid(op: str, fine: bool = False, device: str = "cpu") -> list[tuple[int, ...]]:
    """The shapes ``dlperf calibrate`` times for ``op`` (``fine``: a denser grid; on a
    ``device`` 'gpu', products and convolutions ``GPU_SCALE`` times larger)."""
    scale = GPU_SCALE if device == "gpu" else 1
    if op == "gemm":  # on a CPU also at SMALL_ROWS (a GPU's grid is unchanged)
        small = [(m, n, k) for m in SMALL_ROWS for n in SMALL_ROWS_SIDES
                 for k in SMALL_ROWS_SIDES if n * k <= SMALL_ROWS_ELEMS]
        return list(gemm_grid(fine, scale)) + (small if scale == 1 else [])
    if op == "gemm_tn":  # a weight gradient's inner dimension is a batch: small to medium
        return [s for s in gemm_grid(fine, scale) if s[2] <= GEMM_TN_INNER_MAX]
    if op == "gemm_nt":  # a dense layer's weights read transposed: rows a batch
        return [s for s in grid("gemm", fine, device) if s[0] <= GEMM_NT_ROWS_MAX]
    if op == "gemm_tn_seq":  # time x batch as the inner dimension: a sequence's rows
        # on a CPU only (a GPU's grid, ``scale`` times larger, is unchanged); the fine
        # grid's sides hold 256 already, so a shape both give is timed once
        extra = [(m, n, k) for m in SEQ_FEATURES for n in GEMM_SIDES for k in GEMM_INNER
                 if 2 * m * n * k <= SEQ_FEATURES_FLOPS] if scale == 1 else []
        shapes = dict.fromkeys(gemm_grid(fine, scale) + extra)
        return [(m, n, SEQ_STEPS, k // SEQ_STEPS) for m, n, k in shapes
                if SEQ_STEPS * 4 <= k <= SEQ_INNER_MAX]
    if op == "bn":
        elems = tuple(2**e for e in range(14, 26, 2)) if fine else BN_ELEMS
        return [(max(1, round(e / (c * s * s))), c, s) for e in elems for c, s in BN_LAYERS]
    if op == "pool":
        elems = tuple(2**e for e in range(14, 26, 2)) if fine else POOL_ELEMS
        return [(max(1, round(e / (c * s * s))), c, s) for e in elems for c, s in POOL_LAYERS]
    if op == "lstm":
        batches = (8, 16, 32, 64, 128, 256) if fine else LSTM_BATCHES
        return [(b, SEQ_STEPS, h, h) for h in LSTM_HIDDEN for b in batches]
    if op == "xent":
        elems = tuple(2**e for e in range(10, 26, 2)) if fine else XENT_ELEMS
        return [(e // c, c) for e in elems for c in XENT_CLASSES if c <= e]
    if op in ("conv", "conv_bwd"):
        return conv_grid(fine, scale)
    if op == "conv_wgrad":
        return conv_grid(fine, scale, FIRST_CONV_LAYERS)
    if op in ("memory", "update"):
        return [(n,) for n in (tuple(2**e for e in range(10, 28)) if fine else MEMORY_ELEMS)]
    if op in ("dispatch", "dispatch_train"):
        return [(n,) for n in ((1, 4, 16, 64, 256) if fine else DISPATCH_OPS)]
    if op in COLLECTIVES:
        return [(n,) for n in (tuple(4 * 2**e for e in range(8, 27)) if fine else ALLREDUCE_BYTES)]
    if op == "share":  # the short step (batch SHARE_BATCH), then the long one
        return [(1,), (2,), (1, SHARE_LONG_BATCH), (2, SHARE_LONG_BATCH)]
    raise ValueError(f"unknown kernel op '{op}' (known: {', '.join(OPS)})")


def whole_grids(op: str, device: str = "cpu") -> list[set[tuple[int, ...]]]:
    """The shape sets a calibration of the whole grid of ``op`` may have timed: the
    standard and the fine grid, and for a convolution each as a calibration of an older
    revision timed it (16: without ``POINTWISE_LARGE_MAPS``; 15 or older: without
    ``FIRST_LAYERS_AT_64`` too), which stays a whole grid until it is calibrated again."""
    out = [set(grid(op, device=device)), set(grid(op, fine=True, device=device))]
    if op in ("conv", "conv_bwd"):
        scale = GPU_SCALE if device == "gpu" else 1
        at_16 = tuple(x for x in CONV_LAYERS if x not in POINTWISE_LARGE_MAPS)
        at_15 = tuple(x for x in at_16 if x not in FIRST_LAYERS_AT_64)
        out += [set(conv_grid(fine, scale, older))
                for older in (at_16, at_15) for fine in (False, True)]
    return out


def grid_seconds(op: str, shapes: list[tuple[int, ...]], flops_per_s: float,
                 bytes_per_s: float) -> float:
    """A rough duration of timing ``shapes`` at the given rates (for planning)."""
    per = [max(flops(op, s) / flops_per_s, nbytes(op, s) / bytes_per_s, 1e-5) for s in shapes]
    return sum(max(4 * t, 0.05) for t in per)


def log2(x: float) -> float:
    return math.log2(max(x, 1e-30))
