"""Profiled ops beside the model: each op group a framework's profiler reports (an op at one
set of operand shapes, per step) timed by this machine's fitted kernel curves, so that
``dlperf explain`` can say which ops run slower than the calibration expects for their
shape, and by how much.

An op is classed by what does its work (PyTorch's op names; the profiler's own time of
an op excludes its children, so a wrapper that only calls others costs its dispatch):

- ``gemm``: ``mm`` (m x k) @ (k x n), ``addmm`` (bias, m x k, k x n), ``bmm``/``baddbmm``
  (b products), timed by the GEMM curve, never faster than making its result fresh, as
  the step model times a layer's products (``local.one_product``);
- ``conv``: the library convolution a ``conv2d`` ends in, on its implicit GEMM (rows =
  output pixels x batch, taken from the profiler's FLOP count where it has one, else the
  input's pixels); ``conv_bwd``: ``convolution_backward`` (both gradients), from the
  output gradient's shape, or the ``_slow_conv2d_backward`` it calls where PyTorch runs a
  convolution without oneDNN (then the parent counts as dispatch);
- ``dispatch``: wrappers, views and autograd's bookkeeping: the per-op cost alone;
- a batch normalisation's or a max pool's forward or backward (PyTorch's
  ``native_batch_norm``, ``max_pool2d_with_indices`` and their backwards, TensorFlow's
  max pool and its gradient): the layer's own calibrated curve, as the step model times
  the layer (``local.fitted_timing``), for the bytes of ``costs``' rule, of which the
  pass takes its share (forward P + I + O, backward O + 2 I + 2 P): a library can run
  these many times slower than one memory pass (PyTorch's max pool forward moved 0.9
  GB/s of its operands on the 2-vCPU AMD EPYC, where a memory pass moves tens);
  classed ``memory``;
- ``memory``: everything else (elementwise, reductions, normalisation, pooling, the
  optimizer's update): its operands read and a result as large as the largest written
  (each at its own element size where the profiler recorded dtypes, PyTorch's: half or
  fp32 under mixed precision; else fp32; a ``copy_``, autocast's cast among them, its
  source read and its destination written), at the bandwidth the memory curve gives for
  that many bytes (an in-place op's, which writes over its first operand, PyTorch's
  trailing underscore: the optimizer's update, a gradient's accumulation, at the in-place
  update's curve, as the step model times them), plus the per-op cost;
- ``unmodelled``: an op whose operands the profiler did not record (the optimizer's fused
  ``_foreach_*`` ops on some builds): its time is shown, the model claims none for it.

XLA's instructions (JAX, ``backends/jax_profile``) come as ``xla:dot`` (m x k, k x n;
``xla:dot_tn`` with its first operand transposed, timed by the transposed product's curve,
``xla:dot_tt`` with both, by the sequence's weight gradient's, which JAX's calibration
times in that form; ``xla:dot_nt`` by the product's with its second operand stored
transposed, ``gemm_nt``, where calibrated, else the GEMM's),
``xla:convolution`` (input NCHW, kernel OIHW, and its FLOPs) and ``xla:<opcode>`` for the
rest, a fusion by the kind XLA names it after (fusions of elementwise ops, reductions,
copies such as ``xla:transpose_copy_fusion``: memory-bound; a while loop's own
time, whose operands are a tuple: unmodelled). XLA runs a convolution's gradients as
convolutions too: the input gradient is timed by the forward convolution curve, the
weight gradient (``xla:convolution_wgrad``, on the layer's input, output gradient and
window) by half the calibrated backward pair, as the step model times a layer's weight
gradient alone. TensorFlow's graph ops (``backends/tf_profile``) come the same way:
``tf:matmul`` (``tf:matmul_tn`` and ``tf:matmul_nt`` by their layout's curves, as
XLA's), ``tf:conv2d`` (forward and both gradients, with their FLOPs) and
``tf:<OpType>``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from dlperf.perfmodel.fit import LocalFit
from dlperf.perfmodel.kernels import ELEM, POOL_STRIDE, POOL_WINDOW, bn_bytes, conv_out, pool_bytes
from dlperf.perfmodel.local import CONV_OPS, new_pages_s, one_product, weights_grad_s
from dlperf.perfmodel.network_kernels import conv_shape
from dlperf.workloads.base import Layer

GEMM = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "xla:dot", "xla:dot_tn",
        "xla:dot_nt", "xla:dot_tt", "tf:matmul", "tf:matmul_tn", "tf:matmul_nt"}
CONV = {"aten::mkldnn_convolution", "aten::cudnn_convolution", "aten::_slow_conv2d_forward",
        "aten::_nnpack_spatial_convolution", "xla:convolution", "tf:conv2d"}
#: XLA's weight gradient of a convolution, run as a convolution (``backends/jax_profile``)
XLA_WGRAD = "xla:convolution_wgrad"
CONV_BWD = {"aten::convolution_backward", "aten::_slow_conv2d_backward", XLA_WGRAD}
#: PyTorch's convolution without oneDNN (a 1x1 window at a small batch on one thread):
#: ``convolution_backward`` calls this op, which does the work; the same operands, in order
SLOW_CONV_BWD = "aten::_slow_conv2d_backward"
#: ops whose own time is their dispatch: they call others, or move no data
DISPATCH = {"aten::linear", "aten::matmul", "aten::conv2d", "aten::convolution",
            "aten::_convolution", "aten::t", "aten::transpose", "aten::view", "aten::reshape",
            "aten::_reshape_alias", "aten::expand", "aten::permute", "aten::as_strided",
            "aten::detach", "aten::detach_", "aten::empty", "aten::empty_like",
            "aten::empty_strided", "aten::resize_", "aten::unsqueeze", "aten::squeeze",
            "aten::select", "aten::slice", "aten::alias", "aten::lift_fresh", "aten::zeros",
            "aten::_unsafe_view", "aten::numpy_T", "aten::contiguous", "aten::flatten",
            "aten::thnn_conv2d",  # (calls _slow_conv2d_forward, which does the work)
            # ATen's relu is clamp_min(self, 0) and relu_ clamp_min_ (native/Activation.cpp):
            # the child, profiled beside it, moves the data
            "aten::relu", "aten::relu_",
            # a view's conjugate or negation bit resolved where none is set, and autograd's
            # detach as PyTorch 2.x's profiler names it: no data moved
            "aten::resolve_conj", "aten::resolve_neg", "detach", "detach_",
            # the calls that end in a normalisation, a pool or the loss's own kernels
            "aten::batch_norm", "aten::_batch_norm_impl_index", "aten::max_pool2d",
            "aten::log_softmax", "aten::cross_entropy_loss", "aten::nll_loss_nd",
            "aten::nll_loss"}
#: ops that run a layer's forward or backward pass which the step model times with that
#: layer's own curve (``_layer_pass``): batch normalisation (PyTorch; TensorFlow's Keras
#: layer runs as elementwise ops and reductions) and the max pool
BN_PASSES = {"aten::native_batch_norm": "forward", "aten::native_batch_norm_backward": "backward"}
POOL_PASSES = {"aten::max_pool2d_with_indices": "forward",
               "aten::max_pool2d_with_indices_backward": "backward",
               "tf:MaxPool": "forward", "tf:_MklNativeMaxPool": "forward",
               "tf:MaxPoolGrad": "backward", "tf:_MklNativeMaxPoolGrad": "backward"}


class ProfiledOp(Protocol):
    """What the model reads of one op group (``dlperf.kinds.explain.options.ProfiledOp``)."""

    name: str
    shapes: tuple[tuple[int, ...], ...]
    calls: float
    time_s: float
    flops: float | None
    element_bytes: tuple[int, ...] | None


@dataclass(frozen=True)
class OpTime:
    """One op group per step: measured and modelled."""

    name: str
    shapes: tuple[tuple[int, ...], ...]
    kind: str  # gemm, conv, conv_bwd, memory, dispatch
    calls: float
    measured_s: float
    model_s: float
    flops: float  # per step (the product's closed form for gemm/conv; the profiler's else)
    bytes: float  # per step, memory-bound ops

    @property
    def achieved_flops(self) -> float | None:
        return self.flops / self.measured_s if self.flops and self.measured_s else None

    @property
    def calibrated_flops(self) -> float | None:
        """The rate the calibration expects for this shape."""
        return self.flops / self.model_s if self.flops and self.model_s else None

    @property
    def share_of_calibrated(self) -> float:
        """Model over measured: 1 runs as calibrated, 0.3 takes 3.3 times as long."""
        return self.model_s / self.measured_s if self.measured_s else 1.0

    @property
    def excess_s(self) -> float:
        return self.measured_s - self.model_s

    def shape_text(self) -> str:
        dims = [s for s in self.shapes if s]
        if self.kind == "gemm" and (mnk := gemm_shape(self.name, self.shapes)):
            b, m, n, k = mnk
            head = f"{b} x " if b > 1 else ""
            return f"{head}({m}x{k}) @ ({k}x{n}), inner dimension {k}"
        return ", ".join("x".join(map(str, s)) for s in dims[:3])


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 0


def _memory_bytes(op: ProfiledOp) -> float:
    """A memory-bound call's bytes: every operand read, and a result as large as the
    largest written, each at its recorded element size (fp32 where none is known). A
    ``copy_`` (autocast's casts among them) writes its first operand and reads the
    second: their bytes once each."""
    sizes = [_numel(s) for s in op.shapes]
    known = op.element_bytes or ()
    elems = [known[i] if i < len(known) and known[i] else ELEM for i in range(len(sizes))]
    moved = float(sum(n * e for n, e in zip(sizes, elems, strict=True)))
    if op.name == "aten::copy_":
        return moved
    largest = max(range(len(sizes)), key=lambda i: sizes[i], default=None)
    return moved + (sizes[largest] * elems[largest] if largest is not None else 0)


def _in_place(name: str) -> bool:
    """A PyTorch op that writes its result over its first operand: its name ends in an
    underscore (PyTorch's convention for in-place ops, 'torch.Tensor' documentation),
    other than ``copy_``, whose destination is usually new (autocast's casts)."""
    return name.startswith("aten::") and name.endswith("_") and name != "aten::copy_"


def gemm_shape(name: str, shapes: Sequence[Sequence[int]]) -> tuple[int, int, int, int] | None:
    """(b, m, n, k) of a matrix-product op from its operands' shapes, or None."""
    ops = [tuple(s) for s in shapes]
    if name == "aten::addmm":
        ops = ops[1:3]
    elif name == "aten::baddbmm":
        ops = ops[1:3]
    else:
        ops = ops[:2]
    if len(ops) < 2:
        return None
    a, b = ops
    if len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        return 1, a[0], b[1], a[1]
    if len(a) == 3 and len(b) == 3 and a[2] == b[1]:
        return a[0], a[1], b[2], a[2]
    return None


def classify(name: str) -> str:
    if name in GEMM:
        return "gemm"
    if name in CONV:
        return "conv"
    if name in CONV_BWD:
        return "conv_bwd"
    if name in DISPATCH or name.startswith(("autograd::", "torch::autograd::")) \
            or name.endswith("Backward0") or name.endswith("Backward1"):
        return "dispatch"
    return "memory"


def _conv(op: ProfiledOp, kind: str, fit: LocalFit, flops: float | None = None,
          data_fed: Collection[tuple[int, ...]] = ()) -> tuple[float, float] | None:
    """(seconds per call, FLOPs per call) of a convolution op, or None when its operands
    are not those of a 2-D convolution. ``flops``: the op's FLOPs per step where its
    own record has none. ``data_fed``: the inputs of the network's first layers, whose
    backward is the weights' gradient alone (``fit.WeightGradCurve``, as the step model
    charges it, where calibrated)."""
    calls = max(op.calls, 1e-12)
    total = op.flops or flops
    if len(op.shapes) < (2 if kind == "conv" else 3):
        return None
    if kind == "conv":
        x, w = op.shapes[0], op.shapes[1]
        if len(x) != 4 or len(w) != 4:
            return None
        o, cg, kh, kw = w
        k = cg * kh * kw
        rows = total / calls / (2 * o * k) if total else _pixels(x)
        return (fit.conv.time(rows, o, k, kh, _stride(x, rows)) + new_pages_s(fit, rows * o),
                2.0 * rows * o * k)
    if op.name == XLA_WGRAD:  # (input, output gradient, window): the weight gradient alone,
        x, g, win = op.shapes[:3]  # half the calibrated pair, as a step's layer is timed
        if len(x) != 4 or len(g) != 4 or len(win) != 2:
            return None
        rows, o, k = _pixels(g), g[1], x[1] * win[0] * win[1]
        stride = _stride(x, rows)
        seconds = (weights_grad_s(fit, rows, o, k, win[0], stride) if tuple(x) in data_fed
                   else fit.conv_bwd.time(rows, o, k, win[0], stride) / 2)
        return seconds, 2.0 * rows * o * k
    g, w = op.shapes[0], op.shapes[2]
    if len(g) != 4 or len(w) != 4:
        return None
    o, cg, kh, kw = w
    k = cg * kh * kw
    rows = _pixels(g)
    x = op.shapes[1]  # convolution_backward(grad_output, input, weight, ...)
    if tuple(x) in data_fed:  # the weights' gradient alone, as the step model times it
        return (weights_grad_s(fit, rows, o, k, kh, _stride(x, rows))
                + new_pages_s(fit, _numel(w)), 2.0 * rows * o * k)
    pages = new_pages_s(fit, _numel(x)) + new_pages_s(fit, _numel(w))  # both gradients'
    return fit.conv_bwd.time(rows, o, k, kh, _stride(x, rows)) + pages, 4.0 * rows * o * k


def _pixels(x: Sequence[int]) -> int:
    """Pixels of an (N, C, H, W) activation over its batch."""
    return x[0] * x[2] * x[3]


def _stride(x: Sequence[int], out_pixels: float) -> int:
    """A convolution's stride from its (N, C, H, W) input and its output pixels ('same'
    padding: the output side is the input's over the stride); 1 for another operand."""
    if len(x) != 4:
        return 1
    return max(1, round((_pixels(x) / max(out_pixels, 1.0)) ** 0.5))


def _layer_pass(op: ProfiledOp, fit: LocalFit) -> tuple[float, float] | None:
    """(seconds, bytes) per call of a batch normalisation's or a max pool's forward or
    backward op (``BN_PASSES``, ``POOL_PASSES``): the layer's curve for its training
    step's bytes by ``costs``' rule, the pass's share of them; None where the operands
    are not such a layer's or the calibration has no such curve."""
    s = [tuple(x) for x in op.shapes]
    if op.name in BN_PASSES:  # (input or output gradient, NCHW; weight; ...)
        if not s or len(s[0]) != 4:
            return None
        e, c = _numel(s[0]), s[0][1]
        fwd, bwd = 2 * e + 2 * c, 3 * e + 4 * c
        whole = fit.bn_time(bn_bytes(e, c), c)
        forward = BN_PASSES[op.name] == "forward"
    elif op.name in POOL_PASSES and fit.pool is not None:
        forward = POOL_PASSES[op.name] == "forward"
        if op.name.startswith("tf:"):  # (input, output) and (input, output, gradient, ...)
            if len(s) < 2:
                return None
            i, o = _numel(s[0]), _numel(s[1])
        elif forward:  # (input): the output as the calibrated pool's window and stride give
            if not s or len(s[0]) != 4:
                return None
            n, c, h, w = s[0]
            i = _numel(s[0])
            o = n * c * conv_out(h, POOL_WINDOW, POOL_STRIDE) * conv_out(w, POOL_WINDOW,
                                                                          POOL_STRIDE)
        else:  # (output gradient, input, ...)
            if len(s) < 2:
                return None
            o, i = _numel(s[0]), _numel(s[_input_at(op)])
        fwd, bwd = i + o, o + 2 * i
        whole = fit.pool.time(pool_bytes(i, o))
    else:
        return None
    share = (fwd if forward else bwd) / (fwd + bwd) if fwd + bwd else 0.0
    return whole * share, (fwd if forward else bwd) * float(ELEM)


def op_time(op: ProfiledOp, fit: LocalFit, kind: str | None = None,
            flops: float | None = None, data_fed: Collection[tuple[int, ...]] = ()) -> OpTime:
    """The model's time for one op group (module docstring), per step; ``kind`` overrides
    the class its name gives, ``flops`` the FLOPs of a convolution that has no count of its
    own; ``data_fed`` as ``_conv``'s."""
    kind = kind or classify(op.name)
    per_call, flops_call, bytes_call = fit.dispatch.op_s, 0.0, 0.0
    found: tuple[float, float] | None = None
    if kind == "gemm" and (mnk := gemm_shape(op.name, op.shapes)):
        b, m, n, k = mnk
        curve = ((fit.gemm_tn_seq or fit.gemm_tn) if op.name == "xla:dot_tt"
                 else fit.gemm_tn if op.name in ("xla:dot_tn", "tf:matmul_tn")
                 else fit.gemm_nt if op.name in ("xla:dot_nt", "tf:matmul_nt")
                 else None) or fit.gemm
        found = b * one_product(fit, curve, m, n, k), 2.0 * b * m * n * k
    elif kind in ("conv", "conv_bwd"):
        found = _conv(op, kind, fit, flops, data_fed)
    if found is not None:
        per_call, flops_call = found
    elif kind == "memory" and (layer := _layer_pass(op, fit)) is not None:
        per_call, bytes_call = fit.dispatch.op_s + layer[0], layer[1]
        flops_call = (op.flops or 0.0) / max(op.calls, 1e-12)
    elif kind != "dispatch" and not any(op.shapes):  # nothing recorded: no claim
        return OpTime(op.name, tuple(op.shapes), "unmodelled", op.calls, op.time_s, op.time_s,
                      op.flops or 0.0, 0.0)
    elif kind != "dispatch":  # elementwise and the like, or a product of unknown layout
        kind = "memory"
        bytes_call = _memory_bytes(op)
        curve = fit.in_place if _in_place(op.name) else fit.memory
        per_call = fit.dispatch.op_s + curve.time(bytes_call)
        flops_call = (op.flops or 0.0) / max(op.calls, 1e-12)
    return OpTime(op.name, tuple(op.shapes), kind, op.calls, op.time_s,
                  per_call * op.calls * fit.slowdown, flops_call * op.calls,
                  bytes_call * op.calls)


def op_times(ops: Sequence[ProfiledOp], fit: LocalFit,
             data_fed: Collection[tuple[int, ...]] = ()) -> list[OpTime]:
    """Every op group with its model time, the most measured time first. A
    ``convolution_backward`` whose work its child ``_slow_conv2d_backward`` (same operands)
    did counts as the call that it is: the child's own time is the gradients'.
    ``data_fed``: the network's first layers' inputs (``data_fed_inputs``)."""
    slow = {tuple(op.shapes[:3]) for op in ops if op.name == SLOW_CONV_BWD}
    # torch.profiler counts a convolution's FLOPs on 'aten::conv2d' only, not on the
    # library op it ends in (same input and weight): without them the rows would be the
    # input's pixels, 16 times too many for a stride of 4
    counted = {tuple(op.shapes[:2]): op.flops for op in ops
               if op.name == "aten::conv2d" and op.flops}

    def kind(op: ProfiledOp) -> str | None:
        if op.name == "aten::convolution_backward" and tuple(op.shapes[:3]) in slow:
            return "dispatch"
        return None

    times = _layers_as_a_whole(ops, [op_time(op, fit, kind(op), counted.get(tuple(op.shapes[:2])),
                                             data_fed) for op in ops])
    return sorted(times, key=lambda t: t.measured_s, reverse=True)


def data_fed_inputs(layers: Sequence[Layer], batch: int) -> frozenset[tuple[int, ...]]:
    """The input shapes (N, C, H, W, as PyTorch's profile and ``backends.jax_profile``
    record them) of the convolutions among ``layers`` that have weights and no input
    gradient (a first layer, fed by the data): a profiled backward over one of them is
    the weights' gradient alone."""
    return frozenset((b, c_in, side, side)
                     for layer in layers
                     if layer.op in CONV_OPS and layer.params and not layer.input_grad
                     for b, c_in, _, side, _, _ in (conv_shape(g, batch) for g in layer.gemms))


def _input_at(op: ProfiledOp) -> int:
    """Where a pass's operands hold its layer's input: second in PyTorch's pool backward
    (output gradient, input, ...), else first (a backward's output gradient has a
    normalisation's input shape; TensorFlow's pool gradient takes the input first)."""
    return 1 if op.name.startswith("aten::") and POOL_PASSES.get(op.name) == "backward" else 0


def _layer_key(op: ProfiledOp) -> tuple | None:
    """The layer a batch normalisation's or a max pool's pass belongs to: its input's
    shape (``_input_at``)."""
    s = [tuple(x) for x in op.shapes]
    if op.name in BN_PASSES and s:
        return ("bn", s[0])
    if op.name in POOL_PASSES and s:
        return ("pool", s[_input_at(op)] if len(s) > _input_at(op) else s[0])
    return None


def _layers_as_a_whole(ops: Sequence[ProfiledOp], times: list[OpTime]) -> list[OpTime]:
    """Where both passes of a normalisation or a max pool were profiled, their model
    time as the calibration has it: the layer's, forward and backward together, shared
    between the two in the measured proportion (the curve does not split a layer between
    its passes, and a library does not split its work by bytes: PyTorch's max pool spent
    9.0 ms in its forward and 0.4 in its backward at ResNet-50's first pool, batch 2, on
    the AMD EPYC). Each pass then shows the layer's own ratio to its calibration."""
    found: dict[tuple, list[int]] = {}
    for i, op in enumerate(ops):
        if (key := _layer_key(op)) is not None and times[i].kind == "memory":
            found.setdefault(key, []).append(i)
    out = list(times)
    for pair in found.values():
        measured = sum(times[i].measured_s for i in pair)
        if len(pair) != 2 or measured <= 0:
            continue
        model = sum(times[i].model_s for i in pair)
        for i in pair:
            out[i] = replace(times[i], model_s=model * times[i].measured_s / measured)
    return out
