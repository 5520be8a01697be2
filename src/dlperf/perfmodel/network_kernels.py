"""The kernel shapes a network's training step runs, from its neutral layer definitions,
in the form the step model times them (``local.product_times``): what ``dlperf calibrate
--networks`` times instead of the whole grid, beside a sparse skeleton of that grid.

A calibration scoped to a few networks (the main job's) times each product and
convolution of their layers at their batch (the forward, the input's gradient, the
weights' gradient), and of the generic grid only every ``SKELETON_STRIDE``-th shape (of
each window size, for a convolution: ``skeleton``), so that each curve keeps its form
between and beyond those shapes. The memory passes, the loss, the dispatch chains, batch
normalisation and the max pool keep their whole grids: they are cheap, and interpolated
over sizes rather than fitted. An LSTM layer (for a network that has one) is timed whole
at its own shape, beside its grid's skeleton. The networks' shapes are timed as kernels
alone, one at a time, never as the step they are then compared with.

What the skeleton is for: a network outside the scope (the advice's ResNet-50 after the
main job's calibration of FCN-5, AlexNet and LSTM-32) is predicted from it. Predicted so,
with its own shapes held out of a calibration that had them (``plan.without_network``;
2-vCPU Intel Xeon, one thread, batch 16), ResNet-50's step came out 35% (TensorFlow) and
44% (JAX) shorter than with them, two terms making most of it: batch normalisation, then
timed only for a network with such layers, taken from the memory pass's curve
(TensorFlow's 0.29 s a step against 1.93 s timed), and JAX's 1x1 convolutions, which XLA
runs at 40% of its other convolutions' rate, from a skeleton with a single small 1x1
shape (2.24 s against 5.57 s timed).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable

from dlperf.perfmodel.fit import MIN_VARIANT_SAMPLES, PRODUCT_VARIANTS
from dlperf.perfmodel.kernels import (
    CONVS,
    SEQ_FEATURES_FLOPS,
    SEQ_STEPS,
    conv_out,
    flops,
    grid,
)
from dlperf.perfmodel.local import (
    CONV_OPS,
    UNFUSED_CONV_BATCH,
    lstm_shape,
    transposed_weights_pass,
    weight_gradient_sides,
)
from dlperf.workloads.base import Gemm, Layer

#: the ops whose grid a scoped calibration thins to its skeleton, adding the networks'
#: shapes; every other op keeps its grid
SCOPED_OPS = ("gemm", "gemm_tn", "gemm_nt", "gemm_tn_seq", "conv", "conv_bwd", "conv_wgrad",
              "lstm")
#: the ops timed only for a network that has a layer of that kind (each op is named after
#: the layer kind it times): an LSTM's grid is of whole layers, seconds each
LAYER_KIND_OPS = ("lstm",)
#: the ops named after a layer kind: without the skeleton (``scoped_grid``) each is timed
#: only for a network that has such a layer
LAYER_OPS = ("bn", "pool", "lstm")
#: every this-many-th shape of a scoped op's generic grid is kept (the grids are ordered
#: by their sides, so the kept ones span each side's range)
SKELETON_STRIDE = 4
#: the ops whose skeleton is taken per window size (``skeleton``)
WINDOWED_OPS = CONVS
#: the ops timed only for a network that has a layer they stand for, where no skeleton is
#: timed: a first layer's weight gradient alone (``_whole_shapes``)
FIRST_LAYER_OPS = ("conv_wgrad",)
#: a network's product or convolution beyond this many FLOPs is timed on fewer rows or
#: samples (``_bounded``), so that a calibration stays minutes long. Below it a shape is
#: timed whole, since a product's rate need not saturate in its rows: LSTM-32's softmax
#: projection at batch 128 (4096 rows x 256 -> 10000, 21 GFLOP) ran at 45-53 GFLOP/s on
#: its 4096 rows and 57-59 on 1562, in turn in one JAX process at one thread (2-vCPU AMD
#: EPYC); timed on 1562 rows (an earlier bound of 8 GFLOP), it made JAX's LSTM-32 step
#: 15% too fast (docs/prediction.md). The bound takes every layer of the DLBench
#: networks at the benchmark's batches whole, the largest AlexNet's second convolution's
#: gradients at 32 (62 GFLOP, about 1.4 s a call at one thread there)
MAX_SHAPE_FLOPS = 64e9
#: ... except an LSTM layer, whose time at a smaller batch would be stretched to the
#: layer's by its bytes: timed whole up to the sequence's bound (DLBench's LSTM-32 at
#: batch 256 is 26 GFLOP)
MAX_LSTM_FLOPS = SEQ_FEATURES_FLOPS
#: the dimension of each scoped op's shape that the batch scales
BATCH_AXIS = {"gemm": 0, "gemm_tn": 2, "gemm_nt": 0, "gemm_tn_seq": 3, "conv": 0,
              "conv_bwd": 0, "conv_wgrad": 0, "lstm": 0}


def label(network: str, batch: int) -> str:
    """A scope entry: 'alexnet@16'."""
    return f"{network}@{batch}"


def step_shapes(layers: Iterable[Layer], batch: int, framework: str | None = None
                ) -> dict[str, set[tuple[int, ...]]]:
    """Per op, the shapes one training step of ``layers`` at ``batch`` runs in
    ``framework`` (a weight gradient's sides in the order it stores the weights,
    ``local.weight_gradient_sides``; None: in any framework, both orders), each within
    ``MAX_SHAPE_FLOPS`` (``_bounded``)."""
    return scoped_shapes(layers, batch, framework)[0]


def cut_ops(layers: Iterable[Layer], batch: int, framework: str | None = None) -> set[str]:
    """The ops of which ``step_shapes`` times a shape on fewer rows or samples than the
    step runs (``_bounded``): the step's own is then predicted off the curve's form past
    the timed shape, which the skeleton keeps (``scoped_grid``)."""
    return scoped_shapes(layers, batch, framework)[1]


def scoped_shapes(layers: Iterable[Layer], batch: int, framework: str | None = None
                  ) -> tuple[dict[str, set[tuple[int, ...]]], set[str]]:
    """``step_shapes`` and ``cut_ops`` from one walk over ``layers``."""
    whole = _whole_shapes(layers, batch, framework)
    bounded = {op: {_bounded(op, s) for s in shapes} for op, shapes in whole.items()}
    return bounded, {op for op, shapes in whole.items() if bounded[op] != shapes}


def _whole_shapes(layers: Iterable[Layer], batch: int, framework: str | None
                  ) -> dict[str, set[tuple[int, ...]]]:
    """``step_shapes`` before the bound."""
    out: dict[str, set[tuple[int, ...]]] = {op: set() for op in SCOPED_OPS}
    for layer in layers:
        if layer.op == "lstm" and (shape := lstm_shape(layer, batch)):  # the layer whole
            out["lstm"].add(shape)
        for g in layer.gemms:
            if layer.op in CONV_OPS:
                shape = conv_shape(g, batch)
                out["conv"].add(shape)
                # a first layer's backward is its weights' gradient alone: the data has none
                if layer.input_grad:
                    out["conv_bwd"].add(shape)
                elif layer.params:
                    out["conv_wgrad"].add(shape)
                if g.window == 1 and g.stride == 1 and batch < UNFUSED_CONV_BATCH:
                    # PyTorch's per-sample path at one thread (``local._unfused_conv``)
                    out["gemm"].update({(g.n, g.m, g.k), (g.k, g.m, g.n)})
                    out["gemm_tn"].add((g.n, g.k, g.m))
                continue
            rows = g.m * batch if g.batch_rows else g.m
            out["gemm"].add((rows, g.n, g.k))
            if layer.input_grad:
                out["gemm"].add((rows, g.k, g.n))
            if layer.params:  # the product that reads the weights transposed
                nt = transposed_weights_pass(framework)
                if "forward" in nt:
                    out["gemm_nt"].add((rows, g.n, g.k))
                if "input_grad" in nt and layer.input_grad:
                    out["gemm_nt"].add((rows, g.k, g.n))
                sides = ({weight_gradient_sides(g, framework)} if framework is not None
                         else {(g.k, g.n), (g.n, g.k)})
                for m, n in sides:
                    if g.batch_rows and g.m > 1 and g.count == 1:  # over a sequence
                        out["gemm_tn_seq"].add((m, n, SEQ_STEPS, max(1, rows // SEQ_STEPS)))
                    else:
                        out["gemm_tn"].add((m, n, rows))
    return out


def conv_shape(g: Gemm, batch: int) -> tuple[int, ...]:
    """The calibration kernel's (batch, c_in, c_out, side, window, stride) of a layer's
    implicit GEMM: the input side whose output (padding window // 2, ``kernels.conv_out``)
    has the layer's output pixels, as the networks make it: the output side times the
    stride (224 into ResNet's and AlexNet's strided stems, 56 into a stage's stride-2
    convolutions), else the smallest such side. The smallest is odd at a stride of 2 (55
    for 56), a map of another size than the step's, which oneDNN runs a little slower:
    at one thread on a Xeon, timed in turn in one process, a 1x1 stride-2 convolution
    over 16x256x55x55 took 60 ms forward and 248 ms for both gradients, over the step's
    own 16x256x56x56 54 and 238 ms."""
    out = max(1, round(math.sqrt(g.m)))
    side = out * g.stride
    if conv_out(side, g.window, g.stride) != out:
        side = max(1, (out - 1) * g.stride + g.window - 2 * (g.window // 2))
        while conv_out(side, g.window, g.stride) < out:
            side += 1
    return (batch, max(1, g.k // (g.window * g.window)), g.n, side, g.window, g.stride)


def _bounded(op: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` within ``MAX_SHAPE_FLOPS``: its batch dimension (``BATCH_AXIS``: a
    product's rows, a weight gradient's inner dimension, a convolution's samples) cut
    to what fits, at least 1."""
    bound = MAX_LSTM_FLOPS if op == "lstm" else MAX_SHAPE_FLOPS
    if flops(op, shape) <= bound:
        return shape
    axis = BATCH_AXIS[op]
    per_row = flops(op, (*shape[:axis], 1, *shape[axis + 1:]))
    return (*shape[:axis], max(1, int(bound // per_row)), *shape[axis + 1:])


def skeleton(op: str, full: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Every ``SKELETON_STRIDE``-th shape of ``op``'s grid; of a convolution's, every
    ``SKELETON_STRIDE``-th of each window size's shapes and the last of them (the
    largest), so that every window is timed at two sizes at least: how fast a library runs
    a convolution depends on its window (XLA's 1x1 ones at 40% of the rate of its others),
    which the one small 1x1 shape among the whole grid's every fourth did not show."""
    if op not in WINDOWED_OPS:
        return full[::SKELETON_STRIDE]
    out: list[tuple[int, ...]] = []
    for window in dict.fromkeys(s[4] for s in full):  # (batch, c_in, c_out, side, window, stride)
        mine = [s for s in full if s[4] == window]
        out += [*mine[::SKELETON_STRIDE], mine[-1]]
    return list(dict.fromkeys(out))


def scoped_grid(op: str, needed: dict[str, set[tuple[int, ...]]], *,
                layer_kinds: Collection[str], device: str = "cpu",
                with_skeleton: bool = True, cut: Collection[str] = ()
                ) -> list[tuple[int, ...]]:
    """The shapes a calibration scoped to networks times for ``op``: the skeleton of its
    grid (``skeleton``) and the networks' own shapes (``needed``, from ``step_shapes``)
    for a product or a convolution; the whole grid for any other op (none for an LSTM
    where no network has one: ``layer_kinds``, the networks' layer ops).

    ``with_skeleton=False``: what the networks themselves need, where no network outside
    them is predicted at that thread count (``plan.skeleton_threads``). A product's or a
    convolution's skeleton stays where a network's shape of it is cut (``cut``, from
    ``cut_ops``: predicted off the curve's form past the timed shape; under an earlier
    bound, without it LSTM-32's softmax projection, 4096 rows timed on 1562, came out 29%
    faster in JAX at one thread), where they run none of it (the ops every prediction
    needs), or where they run fewer shapes of a product's variant than its curve is
    fitted on (``fit.MIN_VARIANT_SAMPLES``: LSTM-32's two weight gradients over a
    sequence alone left JAX at one thread without that curve, its LSTM-32 14% too fast);
    else their own shapes alone, each timed whole, are what predicts them. No layer op
    (``LAYER_OPS``) of a kind they lack: the main job's networks have no batch
    normalisation, whose grid is there for a ResNet-50 the advice predicts. Nor, without
    the skeleton, a first layer's weight gradient where none of them starts with a
    convolution (``FIRST_LAYER_OPS``: a prediction without it takes half the pair's)."""
    if op in (LAYER_OPS if not with_skeleton else LAYER_KIND_OPS) and op not in layer_kinds:
        return []
    if op in FIRST_LAYER_OPS and not with_skeleton and not needed.get(op):
        return []
    full = grid(op, device=device)
    if op not in SCOPED_OPS:
        return full
    if not with_skeleton and op not in cut and needed.get(op) and not (
            op in PRODUCT_VARIANTS and len(needed[op]) < MIN_VARIANT_SAMPLES):
        return sorted(needed[op])
    return list(dict.fromkeys([*skeleton(op, full), *sorted(needed.get(op, ()))]))
