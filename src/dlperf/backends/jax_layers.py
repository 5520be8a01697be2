"""The Flax layers that both the JAX networks (``jax_backend``) and JAX's calibration
kernels (``jax_kernels``) build, defined once so that a kernel times the layer a network
trains with."""

from __future__ import annotations

import flax.linen as nn
import jax

BN_EPSILON = 1e-5  # PyTorch's default (Flax's is 1e-6)
BN_MOMENTUM = 0.9  # running = 0.9 * running + 0.1 * batch: PyTorch's momentum=0.1


def batch_norm(name: str, train: bool = True) -> nn.BatchNorm:
    """Batch statistics in training, as torch's BatchNorm2d in train mode (the running
    averages are updated as in torch, except that Flax keeps the biased variance); the
    running averages in inference (``train=False``), as torch's eval mode."""
    return nn.BatchNorm(use_running_average=not train, momentum=BN_MOMENTUM,
                        epsilon=BN_EPSILON, name=name)


def max_pool(x: jax.Array) -> jax.Array:
    """3x3/2 with one row of -inf padding on every side: torch's MaxPool2d(3, 2, 1)."""
    return nn.max_pool(x, (3, 3), (2, 2), ((1, 1), (1, 1)))
