"""The values of a calibration kernel's operands (``torch_kernels``, ``jax_kernels``).

A kernel's time does not depend on its operands' values, only on their shapes: uniform
draws in [-1, 1) (no zeros, no denormals) serve. Drawing every element took seconds for the
largest operands, the memory and update kernels' hundreds of MiB: 6.2 s of a 44 s PyTorch
calibration worker (2-vCPU Intel Xeon, one thread; PyTorch's generator draws on one
thread). A block of draws repeated to the operand's size is written at the speed of memory.
"""

from __future__ import annotations

import math

import numpy as np

#: elements drawn at random; a larger operand repeats them (256 KiB: past the L1 and L2
#: caches of one core, so no two nearby cache lines hold the same values)
BLOCK = 1 << 16


def uniform(dims: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A float32 array of shape ``dims`` in [-1, 1): ``BLOCK`` draws, repeated."""
    block = rng.random(min(math.prod(dims), BLOCK), np.float32)
    block *= 2
    block -= 1
    return np.resize(block, dims)
