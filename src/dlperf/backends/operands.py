"""The values of a calibration kernel's operands (``torch_kernels``, ``tf_kernels``, ``jax_kernels``).

A kernel's time does not depend on its operands' values, only on their shapes: uniform
draws in [-1, 1) serve (float32 draws are multiples of 2^-23 there: no denormals).
Drawing every element took seconds for the largest operands, the memory and update
kernels' hundreds of MiB: 6.2 s of a 44 s PyTorch calibration worker (2-vCPU Intel Xeon,
one thread; PyTorch's generator draws on one thread). A block of draws repeated to the
operand's size is written at the speed of memory.
"""

from __future__ import annotations

import math

import numpy as np

#: elements drawn at random (256 KiB); a larger operand repeats them. Caches hold
#: addresses, not values: a repeated block is read and written as any other data is
BLOCK = 1 << 16


def uniform(dims: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A float32 array of shape ``dims`` in [-1, 1): ``BLOCK`` draws, repeated."""
    block = rng.random(min(math.prod(dims), BLOCK), np.float32)
    block *= 2
    block -= 1
    return np.resize(block, dims)
