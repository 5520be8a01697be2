"""Classifiers: feed-forward, convolutional, recurrent (plain and LSTM), recursive."""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlperf.workloads.base import Gemm, Layer, conv, dense
from dlperf.workloads.families.common import (
    CLASSES,
    DATA_SHAPES,
    check_fields,
    dense_stack,
    parse_widths,
)


def check_side(cfg) -> None:
    """An input side replaces an image data set's 8x8 images (synthetic data)."""
    if not isinstance(cfg.side, int) or isinstance(cfg.side, bool) or cfg.side < 0:
        raise ValueError(f"side must be 0 (the data's own) or a positive integer, got {cfg.side!r}")
    if cfg.side and cfg.dataset != "digits":
        raise ValueError("side replaces the 8x8 digit images: it needs dataset 'digits'")


def side_shape(cfg) -> tuple[int, ...]:
    return (1, cfg.side, cfg.side) if cfg.side else DATA_SHAPES[cfg.dataset]


@dataclass(frozen=True)
class FFNConfig:
    """Feed-forward classifier: flattened input -> ``depth`` hidden layers of ``hidden``
    nodes -> 10 classes, softmax cross-entropy. ``depth=1`` is the guide's shallow net.

    ``widths`` ("256-128-64") gives every hidden layer its own width instead (a funnel, a
    growing stack; it overrides ``hidden`` and ``depth``). ``side`` replaces the data's
    input by a side x side image (synthetic data only: the input-size experiment)."""

    hidden: int = 128
    depth: int = 1
    activation: str = "relu"
    init_scale: float | str = "default"
    dataset: str = "digits"
    widths: str = ""
    side: int = 0  # 0: the data set's own input

    @property
    def inputs(self) -> int:
        return math.prod(self.input_shape())

    def hidden_widths(self) -> tuple[int, ...]:
        if not self.widths:
            return (self.hidden,) * self.depth
        return parse_widths(self.widths)

    def layers(self) -> list[Layer]:
        check_fields(self, datasets=("digits", "digits-seq", "mnist1d", "cancer"),
                     positive=("hidden", "depth"))
        check_side(self)
        hidden = self.hidden_widths()
        out = dense_stack("fc", (self.inputs, *hidden), first=True, act=self.activation)
        out.append(dense(f"fc{len(hidden) + 1}", hidden[-1], CLASSES))
        out.append(Layer("softmax_xent", "loss", out_elems=CLASSES))
        return out

    def input_shape(self) -> tuple[int, ...]:
        return side_shape(self)


@dataclass(frozen=True)
class CNNConfig:
    """Deep convolutional classifier for 8x8 digits: ``depth`` 3x3 convolutions (padding 1,
    ReLU), channels ``width * 2**(i // 2)``, a 2x2 max-pool after every second one while
    the map is larger than 1x1, then a dense layer of ``hidden`` and the classes."""

    width: int = 16
    depth: int = 4
    hidden: int = 64
    init_scale: float | str = "default"
    dataset: str = "digits"
    side: int = 0  # 0: the data set's 8x8 images; else side x side (synthetic data)

    def plan(self) -> list[tuple[int, int, bool]]:
        """(channels, side after the conv, pooled after it) for each convolution."""
        side, out = self.input_shape()[1], []
        for i in range(self.depth):
            pool = i % 2 == 1 and side >= 2
            out.append((self.width * 2 ** (i // 2), side, pool))
            side = side // 2 if pool else side
        return out

    def layers(self) -> list[Layer]:
        check_fields(self, datasets=("digits",), positive=("width", "depth", "hidden"))
        check_side(self)
        out: list[Layer] = []
        c_in, side = self.input_shape()[0], 0
        for i, (c, side, pool) in enumerate(self.plan()):
            out.append(conv(f"conv{i + 1}", c_in, c, 3, side, first=i == 0))
            out.append(Layer(f"relu{i + 1}", "act", out_elems=c * side * side))
            if pool:
                side //= 2
                out.append(Layer(f"pool{i + 1}", "pool", out_elems=c * side * side))
            c_in = c
        out.append(dense("fc1", c_in * side * side, self.hidden))
        out.append(Layer("fc_relu1", "act", out_elems=self.hidden))
        out.append(dense("fc2", self.hidden, CLASSES))
        out.append(Layer("softmax_xent", "loss", out_elems=CLASSES))
        return out

    def input_shape(self) -> tuple[int, ...]:
        return side_shape(self)


@dataclass(frozen=True)
class RNNConfig:
    """Sequence classifier: ``depth`` stacked recurrent layers (``cell`` 'rnn': tanh
    Elman units; 'lstm'), the last step's hidden state -> 10 classes. PyTorch's two bias
    vectors per gate are both counted (they are both trained)."""

    cell: str = "rnn"
    hidden: int = 64
    depth: int = 1
    init_scale: float | str = "default"
    dataset: str = "digits-seq"

    def layers(self) -> list[Layer]:
        check_fields(self, datasets=("digits-seq", "mnist1d"), positive=("hidden", "depth"))
        if self.cell not in ("rnn", "lstm"):
            raise ValueError(f"cell must be rnn or lstm, got '{self.cell}'")
        t, n_in = DATA_SHAPES[self.dataset]
        g = (4 if self.cell == "lstm" else 1) * self.hidden  # gate rows
        out: list[Layer] = []
        for i in range(self.depth):
            h2h = 2 * g * self.hidden
            # input gradient: into the layer below (not into data) and into h_{t-1}
            # for t >= 1 (no gradient flows into the zero initial state)
            dgrad = (t * 2 * g * n_in if i > 0 else 0) + (t - 1) * h2h
            out.append(
                Layer(
                    f"{self.cell}{i + 1}",
                    self.cell,
                    params=g * (n_in + self.hidden) + 2 * g,
                    fwd_flops=t * 2 * g * (n_in + self.hidden),
                    out_elems=t * self.hidden,
                    dgrad_flops=dgrad,
                    gemms=(Gemm(t, g, n_in), Gemm(1, g, self.hidden, count=t)),
                )
            )
            n_in = self.hidden
        out.append(dense("fc", self.hidden, CLASSES))
        out.append(Layer("softmax_xent", "loss", out_elems=CLASSES))
        return out

    def input_shape(self) -> tuple[int, ...]:
        return DATA_SHAPES[self.dataset]


@dataclass(frozen=True)
class RecursiveConfig:
    """Recursive network (Socher et al., 2011) over binary expression trees: leaf digits
    and operators are embedded; one composition cell h = tanh(W [h_left; h_right] + b +
    e_op) is applied bottom-up; the root's state -> the expression's value, a digit.
    Every tree has exactly ``leaves`` leaves, in a random shape (see ``random_tree``)."""

    hidden: int = 64
    leaves: int = 6
    ops: int = 2  # 1: max; 2: max, min; 3: max, min, sum mod 10 (ListOps-like)
    init_scale: float | str = "default"
    dataset: str = "trees"

    def layers(self) -> list[Layer]:
        check_fields(self, datasets=("trees",), positive=("hidden", "leaves", "ops"))
        if self.leaves < 2 or self.ops > 3:
            raise ValueError("need leaves >= 2 and ops in 1..3")
        h, n = self.hidden, self.leaves - 1  # n compositions per tree
        compose = dense("compose", 2 * h, h)
        return [
            Layer("leaf_embedding", "embedding", params=10 * h, out_elems=self.leaves * h),
            Layer("op_embedding", "embedding", params=self.ops * h, out_elems=n * h),
            Layer(
                "compose",
                "dense",
                params=compose.params,
                fwd_flops=n * compose.fwd_flops,
                out_elems=n * h,
                gemms=(Gemm(1, h, 2 * h, count=n),),  # bottom-up, one node after another
            ),
            dense("fc", h, CLASSES),
            Layer("softmax_xent", "loss", out_elems=CLASSES),
        ]

    def input_shape(self) -> tuple[int, ...]:
        return ()
