"""This machine as the model sees it: the fitted kernel curves of one framework at one
thread count (``LocalFit``), a ``Device`` for it, the loopback ``Link`` of its
all-reduce, and each layer's time from the curves instead of a datasheet roofline.

A layer's time per step (batch B):

- each forward matrix product (``Layer.gemms``) at the shape the library runs, and for
  the backward the input gradient (m x n) @ (n x k) and the weight gradient
  (k x m) @ (m x n), each timed by the GEMM curve (the weight gradient by the transposed
  product's, and by the sequence's where the layer runs on every step of a sequence:
  m > 1 rows per sample); a convolution by the convolution
  curves (forward; both gradients together), on its implicit GEMM;
- an LSTM layer takes the calibrated LSTM kernel's time at its shape, read as a FLOP
  rate between the hidden sizes timed (the library's recurrence, gates and products
  together: ``lstm_time``), where the calibration timed one;
- a dense or convolution layer with a bias adds it to its output (one pass that writes
  over what it reads) and sums the output's gradient into the bias's (a pass that reads
  it), at the in-place update's bandwidth (``bias_times``);
- a layer without products (activation, normalisation, pooling, embedding) moves its
  bytes (``costs``) at the bandwidth the memory curve gives for that many bytes; the
  softmax cross-entropy loss and batch normalisation take the times their own
  calibrated curves give for their bytes (exponentials, batch statistics, several
  passes: a library can run them many times slower than one memory pass);
- the optimizer update moves 3 x its parameters' bytes, at the in-place update's
  bandwidth;
- every kernel launch costs the framework's per-op time, and a training step one call;
- where the framework's compiled step allocates its temporaries as one block per call
  (``FRESH_BLOCK``: JAX), the step pays that block's new pages: its temporaries' bytes
  as the memory model counts them, at what a fresh result costs over an in-place one
  (``fresh_block_s``).
"""

from __future__ import annotations

from dlperf.perfmodel.catalogue import Device, Link
from dlperf.perfmodel.compute import LayerTiming
from dlperf.perfmodel.costs import WEIGHT_BYTES, LayerCost
from dlperf.perfmodel.fit import (
    FRESH_BLOCK,
    MMAP_THRESHOLD_MAX,
    AlphaBeta,
    GemmCurve,
    LocalFit,
    allocates_per_tensor,
    in_step_block,
    mapped_afresh_s,
    new_page_byte_s,
)
from dlperf.perfmodel.kernels import element_bytes, xent_bytes
from dlperf.perfmodel.memory import step_memory
from dlperf.workloads.base import Gemm, Layer

#: ops whose products run as convolutions (the others as matrix products)
CONV_OPS = ("conv", "deconv")
#: PyTorch runs a one-thread 1x1 convolution without oneDNN below this batch
#: (``_unfused_conv``)
UNFUSED_CONV_BATCH = 16
#: Frameworks that store a dense layer's weights as (outputs, inputs): PyTorch's
#: ``nn.Linear.weight`` is (out_features, in_features), so its weight gradient dY^T X is
#: outputs x inputs; Keras' ``Dense.kernel`` and flax's are (inputs, outputs), X^T dY.
#: The transposed product's time is not symmetric in its sides (PyTorch at one thread on
#: this project's 2-vCPU AMD EPYC: 26752 x 2048 from 4 rows 128 ms, 2048 x 26752 108 ms)
WEIGHTS_OUT_IN = ("torch",)


def weight_gradient_sides(g: Gemm, framework: str) -> tuple[int, int]:
    """(rows, columns) of a product's weight gradient as ``framework`` stores it."""
    return (g.n, g.k) if framework in WEIGHTS_OUT_IN else (g.k, g.n)


def transposed_weights_pass(framework: str | None) -> tuple[str, ...]:
    """Which of a dense layer's products read its stored weights transposed (``gemm_nt``):
    the forward where the framework stores them outputs x inputs (``WEIGHTS_OUT_IN``:
    ``nn.Linear`` computes x W^T), else the input gradient (Keras' and flax's dY W^T);
    None: either framework's (both)."""
    if framework is None:
        return ("forward", "input_grad")
    return ("forward",) if framework in WEIGHTS_OUT_IN else ("input_grad",)


def device_name(framework: str, threads: int, device: str = "cpu",
                precision: str = "fp32") -> str:
    return f"{device}:{framework}:x{threads}" + ("" if precision == "fp32" else f":{precision}")


def local_device(fit: LocalFit, memory_gb: float) -> Device:
    """A Device for this machine as ``fit`` sees it: its GEMM rate as the peak at the
    fit's precision (and fp32's), its DRAM bandwidth, its memory."""
    rate = fit.gemm.rate / 1e12
    peaks = {} if fit.precision == "fp32" else {f"{fit.precision}_tflops": rate}
    return Device(name=device_name(fit.framework, fit.threads, fit.device, fit.precision),
                  description=f"this machine, {fit.framework} at {fit.threads} thread(s)"
                              + ("" if fit.precision == "fp32" else f", {fit.precision}"),
                  kind="gpu" if fit.device == "gpu" else "cpu",
                  fp32_tflops=rate, **peaks,
                  memory_gbps=fit.memory.dram_bytes_per_s / 1e9, memory_gb=memory_gb,
                  source=fit.describe())


def loopback_link(ab: AlphaBeta) -> Link:
    """A link on which the ring formula gives the measured all-reduce of ``ab.world``
    processes: 2(p-1) x latency = alpha, 2(p-1)/p x bytes / bandwidth = bytes / beta."""
    p = ab.world
    return Link(name=f"loopback-{p}", kind="other", measured=True,
                description=f"gloo on loopback among {p} processes (calibrated)",
                gbps=2 * (p - 1) / p * ab.beta_bytes_per_s / 1e9,
                latency_us=ab.alpha_s / (2 * (p - 1)) * 1e6,
                source=f"dlperf calibrate: all-reduce among {p} processes, alpha "
                       f"{ab.alpha_s * 1e6:.3g} us, beta {ab.beta_bytes_per_s / 1e9:.3g} GB/s")


def _gemm_rows(g: Gemm, batch: float) -> tuple[float, float]:
    """(rows of each product, number of products) at this batch."""
    if g.batch_rows:
        return g.m * batch, g.count
    return g.m, g.count * batch


def product_times(layer: Layer, batch: float, fit: LocalFit) -> tuple[float, float]:
    """(forward, backward) seconds of a layer's matrix products or convolutions."""
    fwd = bwd = 0.0
    gemms = layer.gemms or _guess(layer)
    for g in gemms:
        rows, calls = _gemm_rows(g, batch)
        if layer.op in CONV_OPS and _unfused_conv(fit, g, batch):
            fwd_s, bwd_s = _per_sample_conv(layer, g, batch, fit)
            fwd, bwd = fwd + fwd_s, bwd + bwd_s
            continue
        if layer.op in CONV_OPS:  # results: the output (rows x n); the input's gradient
            # (rows x stride^2 pixels of the input channels) and the weights'; each
            # result's new pages beside the curve (``fit.without_new_pages``)
            fwd += calls * max(fit.conv.time(rows, g.n, g.k, g.window, g.stride)
                               + new_pages_s(fit, rows * g.n), _fresh(fit, rows * g.n))
            d_input = rows * g.stride**2 * g.k / g.window**2 if layer.input_grad else 0.0
            d_weights = g.n * g.k if layer.params else 0.0
            bwd += calls * max(_conv_grads_s(layer, g, rows, fit)
                               + new_pages_s(fit, d_input) + new_pages_s(fit, d_weights),
                               _fresh(fit, d_input + d_weights))
            continue
        # the product that reads the layer's weights transposed, at its own curve where
        # timed (``transposed_weights_pass``); a product of two inputs (attention) has none
        nt = (transposed_weights_pass(fit.framework)
              if layer.params and fit.gemm_nt is not None else ())
        fwd += calls * one_product(fit, fit.gemm_nt if "forward" in nt else fit.gemm,
                                   rows, g.n, g.k)
        if layer.input_grad:  # dX = dY @ W^T; two inputs (attention): one product each
            curve = fit.gemm_nt if "input_grad" in nt else fit.gemm
            bwd += calls * one_product(fit, curve, rows, g.k, g.n) * (1 if layer.params else 2)
        if layer.params:  # dW = X^T @ dY (dY^T @ X in PyTorch, ``weight_gradient_sides``):
            # transposed inputs, the batch the inner dimension
            # (time x batch for a layer applied to each step of a sequence)
            seq = g.batch_rows and g.m > 1 and g.count == 1 and fit.gemm_tn_seq is not None
            curve = fit.gemm_tn_seq if seq else (fit.gemm_tn or fit.gemm)
            bwd += calls * one_product(fit, curve, *weight_gradient_sides(g, fit.framework),
                                       rows)
    return fwd, bwd


def weights_grad_s(fit: LocalFit, rows: float, n: float, k: float, window: int,
                   stride: int = 1) -> float:
    """Seconds of a convolution's weights' gradient alone (a first layer's: its input,
    the data, has no gradient): its own curve (``fit.WeightGradCurve``), or half the pair
    where that was not timed."""
    if fit.conv_wgrad is not None:
        return fit.conv_wgrad.time(fit.conv_bwd, rows, n, k, window, stride)
    return fit.conv_bwd.time(rows, n, k, window, stride) / 2


def _conv_grads_s(layer: Layer, g: Gemm, rows: float, fit: LocalFit) -> float:
    """Seconds of a convolution's gradients (``product_times``): both, as the pair was
    timed; a first layer's its weights' alone (``weights_grad_s``); the input's alone
    (no weights) half the pair."""
    if layer.params and not layer.input_grad:
        return weights_grad_s(fit, rows, g.n, g.k, g.window, g.stride)
    pair = fit.conv_bwd.time(rows, g.n, g.k, g.window, g.stride)
    if layer.input_grad and layer.params:
        return pair
    return pair / 2 if layer.input_grad else 0.0


#: layers whose bias is its own pass over the output: a recurrent layer adds its bias
#: inside its cell, with the gates' other elementwise work
BIASED_OPS = ("dense", *CONV_OPS)


def bias_elems(layer: Layer) -> int:
    """The elements of a layer's bias: its parameters beyond the weights of its products
    (n x k each; a product without weights, as attention's, does not count)."""
    weights = sum(g.n * g.k for g in layer.gemms if g.batch_rows)
    return max(0, layer.params - weights) if layer.gemms else 0


def bias_times(layer: Layer, batch: float, fit: LocalFit) -> tuple[float, float]:
    """(forward, backward) seconds of a dense or convolution layer's bias: forward, the
    output read and written over once, the bias added (PyTorch's ``add_`` after a batched
    product, ``addmm``'s copy of the bias into the output before the product; Keras'
    ``BiasAdd``; a fusion of XLA's after its dot); backward, the output's gradient read once
    and summed into the bias's (``sum``, ``BiasAddGrad``, a reduce). Both at the in-place
    update's bandwidth: neither writes a new result of the output's size. Seen in
    ``dlperf explain -n lstm32 -f torch``: the projection's ``add_`` and ``sum`` over its
    4096 x 10000 output, 23 and 29 ms of a 1.15 s step (a strided reduction runs slower
    than a pass), both missing from the model."""
    if layer.op not in BIASED_OPS or not (n := bias_elems(layer)):
        return 0.0, 0.0
    out = layer.out_elems * batch * element_bytes(fit.precision)
    return fit.in_place.time(2 * out), fit.in_place.time(out + n * WEIGHT_BYTES)


def lstm_shape(layer: Layer, batch: float) -> tuple[float, int, int, int] | None:
    """The LSTM kernel's (batch, steps, inputs, hidden) of an LSTM layer, from its input
    projection of every step, (steps x 4 hidden x inputs) per sample
    (``workloads.dlbench``); None for a layer without products."""
    if not layer.gemms:
        return None
    into = layer.gemms[0]
    return batch, into.m, into.k, into.n // 4


def lstm_time(layer: Layer, batch: float, fit: LocalFit) -> float | None:
    """An LSTM layer's training step from the calibrated LSTM kernel (``kernels``' op
    'lstm': the framework's own layer, timed whole) at the layer's shape
    (``LocalFit.lstm_time``); None where no LSTM was calibrated (its products then stand
    in)."""
    shape = lstm_shape(layer, batch)
    return fit.lstm_time(shape) if shape else None


def _unfused_conv(fit: LocalFit, g: Gemm, batch: float) -> bool:
    """Whether PyTorch runs this convolution without oneDNN: a 1x1 window, stride 1, a
    batch below 16, one thread, on a CPU. ATen's ``ConvParams::use_mkldnn``
    (aten/src/ATen/native/Convolution.cpp): 'For 1x1 filters, MKLDNN is faster than THNN
    when multi-threaded, but THNN is faster when single-threaded'; torch.profiler shows
    ``aten::_slow_conv2d_forward`` and ``_backward`` there."""
    return (fit.framework == "torch" and fit.device == "cpu" and fit.threads == 1
            and g.window == 1 and g.stride == 1 and batch < UNFUSED_CONV_BATCH)


def _per_sample_conv(layer: Layer, g: Gemm, batch: float, fit: LocalFit) -> tuple[float, float]:
    """(forward, backward) of THNN's convolution (``_unfused_conv``): a 1x1 window needs no
    unfolding, so each sample is one product of the weights (n x k) with its k x pixels
    input; backward, the input's gradient (k x pixels) and the weights' gradient summed
    over the samples (n x k, the pixels the inner dimension)."""
    pixels = g.m
    fwd = batch * one_product(fit, fit.gemm, g.n, pixels, g.k)
    bwd = 0.0
    if layer.input_grad:
        bwd += batch * one_product(fit, fit.gemm, g.k, pixels, g.n)
    if layer.params:
        bwd += batch * one_product(fit, fit.gemm_tn or fit.gemm, g.n, g.k, pixels)
    return fwd, bwd


def one_product(fit: LocalFit, curve: GemmCurve, m: float, n: float, k: float) -> float:
    """One (m x k) @ (k x n) product: its curve plus its result's new pages where they are
    new at every call (``new_pages_s``), and never less than making its m x n result
    fresh, as the memory pass does, or into kept pages where the step's temporaries
    block pays them (``_product_result``; a roofline's memory side, Williams et al.
    2009). A weight gradient of a wide layer at a small batch is such a product: its
    result's new pages, not its FLOPs, set its time, at a shape the GEMM grid (its
    inner dimension at least 16) only approaches."""
    return max(curve.time(m, n, k) + new_pages_s(fit, m * n), _product_result(fit, m * n))


def new_pages_s(fit: LocalFit, elems: float) -> float:
    """The first touch of a result's new pages, where the framework allocates it with
    glibc's malloc (``MALLOC_PER_TENSOR``) and it is at least ``MMAP_THRESHOLD_MAX``: such a
    block is mapped afresh at every allocation and unmapped when freed (mallopt(3),
    M_MMAP_THRESHOLD: the dynamic threshold rises at most to 32 MiB on 64-bit systems),
    so a product that writes it takes a page fault per page on its own thread, beside
    and not under its arithmetic; a weight gradient is such a result at every step
    (``zero_grad(set_to_none=True)``, PyTorch's default, frees it). Priced at what a
    fresh result costs over an in-place one (``fresh_byte_s``). At full speed, like the
    product's curve beside it: the caller slows the two together (``fit.slowdown``)."""
    return mapped_afresh_s(fit.framework, fit.device, elems * element_bytes(fit.precision),
                           fresh_byte_s(fit))


def _fresh(fit: LocalFit, elems: float) -> float:
    """Seconds to make a fresh result of ``elems`` elements, as the memory pass does."""
    return fit.memory.time(2 * element_bytes(fit.precision) * elems)


def _product_result(fit: LocalFit, elems: float) -> float:
    """Seconds to write a matrix product's result of ``elems`` elements: fresh
    (``_fresh``), or into pages already mapped where the step's temporaries block pays
    them (``fit.in_step_block``, ``fresh_block_s``)."""
    if in_step_block(fit.framework, fit.device):
        return fit.in_place.time(2 * element_bytes(fit.precision) * elems)
    return _fresh(fit, elems)


def _guess(layer: Layer) -> tuple[Gemm, ...]:
    """A layer with FLOPs but no recorded products: one square-ish product per sample."""
    if not layer.fwd_flops:
        return ()
    side = max(1, round((layer.fwd_flops / 2) ** 0.5))
    return (Gemm(1, side, max(1, round(layer.fwd_flops / 2 / side))),)


def launches(layer: Layer, cost: LayerCost) -> int:
    """Kernel launches per step: the cost's (``costs.kernels``, and autocast's casts), plus
    the extra calls of products run one after another (an LSTM's steps), forward and
    backward."""
    extra = sum(g.count - 1 for g in layer.gemms if g.batch_rows)
    return cost.kernels + extra * (1 + (1 if layer.input_grad else 0) + (1 if layer.params else 0))


def fitted_timing(layer: Layer, cost: LayerCost, batch: float, fit: LocalFit) -> LayerTiming:
    """One layer's step on this machine from the fitted curves (module docstring)."""
    fwd, bwd = product_times(layer, batch, fit)
    moved = cost.fwd_bytes + cost.bwd_bytes
    if layer.op == "lstm" and (whole := lstm_time(layer, batch, fit)) is not None:
        # the layer's own kernel: its recurrence and gates as the library loops over them
        compute, memory, trained = whole, 0.0, layer.train_flops()
        forward = whole * layer.fwd_flops / trained if trained else 0.0
    elif layer.fwd_flops:
        add, grad = bias_times(layer, batch, fit)
        compute, memory, forward = fwd + bwd, add + grad, fwd + add
    elif layer.op == "loss" and fit.xent is not None:  # the loss and its gradient
        compute, memory = 0.0, fit.xent.time(xent_bytes(layer.out_elems * batch))
        forward = memory * cost.fwd_bytes / moved if moved else 0.0
    elif layer.op == "bn" and fit.bn is not None:  # batch statistics: several passes
        compute, memory = 0.0, fit.bn_time(moved, layer.params / 2)
        forward = memory * cost.fwd_bytes / moved if moved else 0.0
    elif layer.op == "pool" and fit.pool is not None:  # the gradient scatters the maxima
        # back (a global average pool, whose bytes are few, is timed the same way)
        compute, memory = 0.0, fit.pool.time(moved)
        forward = memory * cost.fwd_bytes / moved if moved else 0.0
    else:
        compute = 0.0
        forward = fit.memory.time(cost.fwd_bytes)
        memory = forward + fit.memory.time(cost.bwd_bytes)
    s = fit.slowdown
    return LayerTiming(name=cost.name, op=cost.op, compute_s=compute * s, memory_s=memory * s,
                       update_s=fit.in_place.time(cost.update_bytes) * s,
                       overhead_s=launches(layer, cost) * fit.dispatch.step_op_s * s,
                       flops=cost.flops, bytes=cost.bytes, forward_s=forward * s)


def call_timing(fit: LocalFit) -> LayerTiming:
    """The fixed cost of calling the framework's step once."""
    return LayerTiming(name="step call", op="call", compute_s=0.0, memory_s=0.0, update_s=0.0,
                       overhead_s=fit.dispatch.step_call_s * fit.slowdown, flops=0.0,
                       bytes=0.0)


def fresh_byte_s(fit: LocalFit) -> float:
    """Seconds per byte that a new page costs (``fit.new_page_byte_s``)."""
    return new_page_byte_s(fit.memory, fit.update)


#: glibc's largest trim threshold: twice its largest dynamic mmap threshold (the trim
#: threshold follows the mmap threshold at twice it as that rises; mallopt(3),
#: M_TRIM_THRESHOLD): a free top of the heap larger than this always goes back to the system
TRIM_THRESHOLD_MAX = 2 * MMAP_THRESHOLD_MAX


def accumulated_pages_s(layers: list[Layer], fit: LocalFit) -> float:
    """New pages of one micro-batch's weight gradients in a pipeline stage, paid by every
    micro-batch after the first (calibrated devices where the framework allocates tensor
    by tensor, ``allocates_per_tensor``; else 0). The first micro-batch's gradients become
    the stage's own; each later one's are results that autograd's AccumulateGrad adds into
    those and frees, with the micro-batch's activations freed around them: where the
    weights below glibc's mmap threshold come to more than its largest trim threshold
    (``TRIM_THRESHOLD_MAX``), the free heap top they leave is given back, and the next
    micro-batch's gradients are new pages again. A gradient at or beyond the mmap
    threshold has its pages in its product already (``new_pages_s``); below the trim
    threshold a stage's gradients may stay in the heap, and count nothing. Measured
    (``getrusage`` in a stage's own process, PyTorch at one thread, a 2-vCPU AMD EPYC):
    ResNet-50's last of 4 stages at batch 16, micro-batches of one sample, 73 MB of weights
    in tensors of at most 9.4 MB, faulted 890 MB a step (0.44 s of system time in a 1.71
    s step; this term: 15 x 73 MB); its stages with 9-18 MB of weights faulted 17-39% of
    their churn, 0.02-0.04 s."""
    if not allocates_per_tensor(fit.framework, fit.device):
        return 0.0
    heap = sum(b for layer in layers if (b := layer.params * WEIGHT_BYTES) < MMAP_THRESHOLD_MAX)
    return heap * fresh_byte_s(fit) * fit.slowdown if heap > TRIM_THRESHOLD_MAX else 0.0


def fresh_block_s(layers: list[Layer], batch: float, fit: LocalFit) -> float:
    """A step's new pages for its temporaries block (``FRESH_BLOCK``; 0 for others and on
    a GPU): the step's temporaries as the memory model counts them for the framework
    (``memory.step_memory``: the activations kept for the backward pass, the one weight
    gradient live at a time under its fused update, the backward's largest working set).
    Per step, ``getrusage`` around JAX's steps at one thread on this project's 2-vCPU AMD
    EPYC faulted 227 MiB for FCN-5 at batch 64 (this count: 238 MiB) and 525 MiB for the
    LSTM at 128 (530 MiB). A result the memory curve already times as fresh counts again,
    and XLA's convolutions map scratch of their own (``fit.kernel_results_afresh``): ResNet-50
    at batch 16 faults 3.5 GB, this count 2.4 GB."""
    if fit.framework not in FRESH_BLOCK or fit.device != "cpu":
        return 0.0
    m = step_memory(layers, batch, fit.precision, framework=fit.framework)
    return (m.activations + m.gradients + m.transient) * fresh_byte_s(fit) * fit.slowdown
