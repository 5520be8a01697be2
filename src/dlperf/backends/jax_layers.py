"""The Flax layers that both the JAX networks (``jax_backend``) and JAX's calibration
kernels (``jax_kernels``) build, defined once so that a kernel times the layer a network
trains with."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

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


def uniform(bound: float) -> Callable[..., jax.Array]:
    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class LSTM(nn.Module):
    """One LSTM layer over a time-major sequence, with the neutral parameters: ``wx``
    (in, 4H), ``wh`` (H, 4H), one bias ``b`` (4H,), gates in the order i, f, g, o.

    The input projection of every time step is one matrix product hoisted out of the
    recurrence; ``lax.scan`` then carries (h, c) with only ``h @ wh`` inside the loop. The
    first step is peeled off the scan: its state is the constant zero, so autodiff computes
    no gradient into the initial state (as PyTorch's autograd does not), which it would
    inside the loop, and XLA folds the products with zero away.
    """

    hidden: int

    @nn.compact
    def __call__(self, xs: jax.Array) -> jax.Array:  # xs: (T, B, in) -> (T, B, H)
        h_dim = self.hidden
        init = uniform(1.0 / math.sqrt(h_dim))
        wx = self.param("wx", init, (xs.shape[-1], 4 * h_dim))
        wh = self.param("wh", init, (h_dim, 4 * h_dim))
        b = self.param("b", nn.initializers.zeros, (4 * h_dim,))
        gates_x = xs @ wx + b  # (T, B, 4H) in one product

        def cell(carry: tuple[jax.Array, jax.Array], gx: jax.Array):
            h, c = carry
            i, f, g, o = jnp.split(gx + h @ wh, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        zeros = jnp.zeros((xs.shape[1], h_dim), xs.dtype)
        carry, h0 = cell((zeros, zeros), gates_x[0])
        _, hs = jax.lax.scan(cell, carry, gates_x[1:])
        return jnp.concatenate([h0[None], hs])
