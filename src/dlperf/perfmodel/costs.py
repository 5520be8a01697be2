"""FLOPs and bytes moved per layer for one training step, from the neutral definitions.

FLOPs are exactly ``Layer.train_flops`` (the count the tests check against each
framework's own FLOP counter), split into forward and backward. Bytes follow one rule
for every layer, with B the batch, I the layer's input elements per sample (the output
of the layer before it; the data for the first), O its ``out_elems`` and P its params:

- forward: read the weights P, read the input I*B, write the output O*B
  (an embedding reads only the O*B rows it gathers, not its whole table);
- backward (a layer with weights or an input gradient; others have none): read the
  output gradient O*B and the saved input I*B (for the weight gradient, or the
  derivative of an elementwise op); read the weights P for the input gradient; write
  the input gradient I*B unless the input is data; write the weight gradient P;
- update (plain SGD): read w and g, write w: 3*P, in fp32 at every precision (mixed
  precision keeps the weights and their gradients in fp32: PyTorch's 'Automatic Mixed
  Precision' and Keras' 'Mixed precision' guides).

Under mixed precision (2-byte elements) the layers PyTorch's autocast runs in float32
(``AUTOCAST_FP32``) move their elements at 4 bytes, and each of their activations, input
and output, is cast once per pass between the half and the float32 copy (read one, write
the other: a kernel and 2 + 4 bytes an element each way).

Every tensor is counted once per pass, as if nothing stayed in cache: the bytes a
kernel must move at least, the memory side of Williams et al.'s roofline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlperf.workloads.base import Layer


@dataclass(frozen=True)
class LayerCost:
    """One layer's work in one training step at a given batch and element size."""

    name: str
    op: str
    fwd_flops: float
    bwd_flops: float
    fwd_bytes: float
    bwd_bytes: float
    update_bytes: float
    kernels: int  # launches: forward, each gradient product, the update

    @property
    def flops(self) -> float:
        return self.fwd_flops + self.bwd_flops

    @property
    def bytes(self) -> float:
        return self.fwd_bytes + self.bwd_bytes + self.update_bytes


def kernels(layer: Layer) -> int:
    """Kernel launches of a layer per step: its forward, the weight gradient and the input
    gradient where they exist, and its share of the optimizer update."""
    grads = (1 if layer.params else 0) + (1 if layer.input_grad else 0)
    return 1 + grads + (1 if layer.params else 0)


#: bytes of a weight and of its gradient: fp32 under mixed precision too (module docstring)
WEIGHT_BYTES = 4
#: layers that autocast runs in float32 under mixed precision: PyTorch's
#: aten/src/ATen/autocast_mode.h lists softmax and log_softmax among the ops it runs in
#: fp32 (AT_FORALL_FP32_SET_OPT_DTYPE) and layer_norm among AT_FORALL_FP32 (the torch.amp
#: documentation's 'CUDA Ops that can autocast to float32'); the loss has its own curve
AUTOCAST_FP32 = ("softmax", "ln")


def layer_cost(layer: Layer, in_elems: int, batch: float, elem_bytes: int) -> LayerCost:
    """The cost of one layer (see the module docstring for the byte rule)."""
    p, i, o, b = layer.params, in_elems * batch, layer.out_elems * batch, batch
    weights_read = o if layer.op == "embedding" else p
    fwd = weights_read + i + o
    bwd = 0  # a layer with neither weights nor an input gradient has no backward
    if p or layer.input_grad:
        bwd += o + i  # the output gradient and the saved input
    if p and layer.input_grad:
        bwd += p  # the weights, for the input gradient
    if layer.input_grad:
        bwd += i  # the input gradient
    bwd += p  # the weight gradient
    fwd_bytes, bwd_bytes, launches = fwd * elem_bytes, bwd * elem_bytes, kernels(layer)
    if elem_bytes < WEIGHT_BYTES and layer.op in AUTOCAST_FP32:  # float32, and the casts
        cast = (i + o) * (elem_bytes + WEIGHT_BYTES)
        fwd_bytes = fwd * WEIGHT_BYTES + cast
        bwd_bytes = bwd * WEIGHT_BYTES + (cast if bwd else 0)
        launches += 2 + (2 if bwd else 0)
    return LayerCost(
        name=layer.name,
        op=layer.op,
        fwd_flops=layer.fwd_flops * b,
        bwd_flops=(layer.train_flops() - layer.fwd_flops) * b,
        fwd_bytes=fwd_bytes,
        bwd_bytes=bwd_bytes,
        update_bytes=3 * p * WEIGHT_BYTES,
        kernels=launches,
    )


def layer_costs(
    layers: list[Layer], input_shape: tuple[int, ...], batch: float, elem_bytes: int
) -> list[LayerCost]:
    """Costs of every layer; activations flow down the list, so a layer's input is the
    output of the last layer before it that has one (the data for the first)."""
    in_elems = math.prod(input_shape)
    out = []
    for layer in layers:
        out.append(layer_cost(layer, in_elems, batch, elem_bytes))
        if layer.out_elems:
            in_elems = layer.out_elems
    return out


def activation_bytes(layers: list[Layer], batch: float, elem_bytes: int) -> float:
    """Bytes of the activations a training step keeps for its backward pass."""
    return sum(layer.out_elems for layer in layers) * batch * elem_bytes
