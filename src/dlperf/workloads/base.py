"""Framework-neutral workload definitions: layers, shapes, parameter counts, FLOPs.

A workload is defined once here and built by every backend from the same definition.
Nothing in this package imports a framework.

FLOP convention (the one PyTorch's ``torch.utils.flop_counter`` uses, so the two can be
checked against each other): only matrix multiplies and convolutions count, one
multiply-add is 2 FLOPs. A training step costs, per layer with weights, the forward
product, the weight-gradient product (same size) and, unless the layer's input needs no
gradient (the first layer fed by data), the input-gradient product (same size again):
the familiar "6 x params x batch" of Kaplan et al. (2020) for dense nets, minus the first
layer's input gradient.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Gemm:
    """One forward matrix product of a layer, per sample: ``count`` products of an
    (``m`` x ``k``) by a (``k`` x ``n``) matrix. How the batch B enters decides the shape
    a library runs: ``batch_rows`` (dense, convolution as an implicit GEMM, an LSTM's
    per-step products) stacks the samples into the rows, ``count`` products of
    (B m x k) @ (k x n); otherwise (attention) each sample's products stay separate,
    B x ``count`` products of (m x k) @ (k x n). Its FLOPs are 2 x count x m x n x k per
    sample, and a layer's products add up to its ``fwd_flops`` (a test checks it).
    ``window`` is a convolution's kernel side (1 for a plain matrix product), ``stride``
    its step (a library may choose its algorithm by both)."""

    m: int
    n: int
    k: int
    count: int = 1
    batch_rows: bool = True
    window: int = 1
    stride: int = 1

    @property
    def flops(self) -> int:
        return 2 * self.count * self.m * self.n * self.k


@dataclass(frozen=True)
class Layer:
    """One layer's cost for a single sample.

    ``fwd_flops`` counts the forward matmul/conv FLOPs for one sample; ``out_elems`` the
    elements of its output activation (what the backward pass keeps alive).
    """

    name: str
    op: str  # dense | conv | pool | act | lstm | rnn | embedding | bn | flatten | loss | ...
    params: int = 0
    fwd_flops: int = 0
    out_elems: int = 0
    input_grad: bool = True  # False for the first layer fed by data
    dgrad_flops: int | None = None  # input-gradient FLOPs when they differ from fwd_flops
    gemms: tuple[Gemm, ...] = ()  # the forward's matrix products (the performance model's shapes)
    #: the segment this layer is recomputed in under activation checkpointing ('' when
    #: its output is kept): only a segment's last output is kept through the step
    segment: str = ""
    #: the block whose skip connection joins its input to its output ('' for a layer of
    #: its own): a pipeline cuts between blocks, never inside one, where the skip would
    #: have to cross the cut beside the layer's output
    block: str = ""
    #: on its block's shortcut (a residual block's projection and its batch norm): it
    #: reads the block's input, not its predecessor's output, and its output joins the
    #: block's sum; the predecessor's output goes to the sum
    shortcut: bool = False
    #: the elements a window's padding adds around its input, per sample (a padded
    #: pooling layer's border: C x ((H + 2p)^2 - H^2)); 0 where its window pads nothing
    pad_elems: int = 0
    #: rows and columns of zeros a window (a convolution's, a pool's) adds on every side
    #: of its input, and that input's elements with them per sample (C x (H + 2p)^2);
    #: 0 where it pads nothing
    pad: int = 0
    padded_in_elems: int = 0

    def train_flops(self) -> int:
        """Forward + weight gradient + (input gradient) matmul FLOPs for one sample."""
        if self.fwd_flops == 0:
            return 0
        wgrad = self.fwd_flops if self.params else 0
        dgrad = 0
        if self.input_grad:
            dgrad = self.fwd_flops if self.dgrad_flops is None else self.dgrad_flops
        return self.fwd_flops + wgrad + dgrad


@dataclass(frozen=True)
class Workload:
    """A named network with its sizes; ``config(size)`` gives the shapes a backend builds."""

    name: str
    family: str
    description: str
    sizes: dict[str, Any]  # size name -> config dataclass
    default_size: str
    default_batch: int
    batch_sweep: tuple[int, ...]
    task: str  # classification | language-model | reconstruction | generation | ...
    group: str = "dlbench"  # dlbench | guide
    tunable: tuple[str, ...] = field(default_factory=tuple)  # params a user may override

    def config(self, size: str | None = None, params: dict[str, Any] | None = None):
        size = size or self.default_size
        cfg = self.sizes[size]
        if params:
            cfg = replace(cfg, **params)
        return cfg

    def layers(self, size: str | None = None, params: dict[str, Any] | None = None) -> list[Layer]:
        return self.config(size, params).layers()

    def param_count(self, size: str | None = None, params: dict[str, Any] | None = None) -> int:
        return sum(layer.params for layer in self.layers(size, params))

    def train_flops(
        self, batch: int, size: str | None = None, params: dict[str, Any] | None = None
    ) -> int:
        """Matmul/conv FLOPs of one training step (forward + backward) at this batch size."""
        return batch * sum(layer.train_flops() for layer in self.layers(size, params))


def conv_out(size: int, kernel: int, stride: int, pad: int) -> int:
    """Output side of a convolution or pooling window (floor mode, symmetric padding)."""
    return (size + 2 * pad - kernel) // stride + 1


def dense(name: str, n_in: int, n_out: int, *, bias: bool = True, first: bool = False) -> Layer:
    return Layer(
        name,
        "dense",
        params=n_in * n_out + (n_out if bias else 0),
        fwd_flops=2 * n_in * n_out,
        out_elems=n_out,
        input_grad=not first,
        gemms=(Gemm(1, n_out, n_in),),
    )


def conv(
    name: str,
    c_in: int,
    c_out: int,
    k: int,
    out_hw: int,
    *,
    bias: bool = True,
    first: bool = False,
    stride: int = 1,
    pad: int = 0,
    in_hw: int = 0,
) -> Layer:
    """A convolution of ``c_in`` maps of ``in_hw`` x ``in_hw`` (needed where it pads:
    ``pad`` rows of zeros on every side) into ``c_out`` of ``out_hw`` x ``out_hw``."""
    if pad and not in_hw:
        raise ValueError(f"{name}: a padded convolution needs its input's side")
    return Layer(
        name,
        "conv",
        params=k * k * c_in * c_out + (c_out if bias else 0),
        fwd_flops=2 * k * k * c_in * c_out * out_hw * out_hw,
        out_elems=c_out * out_hw * out_hw,
        input_grad=not first,
        # the implicit GEMM: one row per output pixel, one column per output channel
        gemms=(Gemm(out_hw * out_hw, c_out, k * k * c_in, window=k, stride=stride),),
        pad=pad,
        padded_in_elems=c_in * (in_hw + 2 * pad) ** 2 if pad else 0,
    )


def max_pool(name: str, channels: int, in_hw: int, *, kernel: int = 3, stride: int = 2,
             pad: int = 1) -> Layer:
    """A max pool over ``channels`` maps of ``in_hw`` x ``in_hw`` (3x3, stride 2, one row
    of padding on every side: DLBench's AlexNet and ResNet-50's stem)."""
    out_hw = conv_out(in_hw, kernel, stride, pad)
    return Layer(name, "pool", out_elems=channels * out_hw * out_hw,
                 pad_elems=channels * ((in_hw + 2 * pad) ** 2 - in_hw * in_hw), pad=pad,
                 padded_in_elems=channels * (in_hw + 2 * pad) ** 2 if pad else 0)
