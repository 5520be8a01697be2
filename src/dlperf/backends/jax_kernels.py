"""JAX's calibration kernels (``dlperf.perfmodel.kernels``): each op under jax.jit, as
the 'jit' variant runs a training step (NHWC, fp32 at HIGHEST precision)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dlperf.backends.base import Timed, UnsupportedError
from dlperf.backends.operands import uniform
from dlperf.perfmodel.kernels import (
    CONVS,
    DISPATCH_SIDE,
    POOL_STRIDE,
    POOL_WINDOW,
    conv_out,
    flops,
)

HIGHEST = jax.lax.Precision.HIGHEST


class Kernel(Timed):
    """One call of a jitted calibration kernel per step."""

    batch_size = 1
    param_count = 0

    def __init__(self, op: str, shape: tuple[int, ...], device: jax.Device):
        self.op, self.shape = op, shape
        rng = np.random.default_rng(0)

        def operand(*dims: int) -> np.ndarray:
            # values do not change a kernel's time (``backends.operands``)
            return uniform(dims, rng)

        if op == "gemm":
            m, n, k = shape
            args = (operand(m, k), operand(k, n))

            def fn(a, b):
                return jnp.matmul(a, b, precision=HIGHEST)
        elif op == "gemm_tn":
            m, n, k = shape
            args = (operand(k, m), operand(k, n))

            def fn(a, b):
                return jnp.matmul(a.T, b, precision=HIGHEST)
        elif op == "gemm_nt":  # flax's Dense input gradient: its kernel transposed
            m, n, k = shape
            args = (operand(m, k), operand(n, k))

            def fn(a, b):
                return jnp.matmul(a, b.T, precision=HIGHEST)
        elif op == "gemm_tn_seq":  # Flax's Dense on a (time, batch, features) tensor: in
            # the compiled training step (an LSTM's, read in its HLO) XLA lays the output
            # gradient out transposed, (n, time x batch), and runs the weight gradient as
            # one plain dot with both operands transposed, not as its YNNPACK fusion (an
            # einsum of the same shapes alone gets the fusion, up to twice as fast)
            m, n, t, b = shape
            args = (operand(t * b, m), operand(n, t * b))

            def fn(a, g):
                return jax.lax.dot_general(a, g, (((0,), (1,)), ((), ())), precision=HIGHEST)
        elif op in CONVS:
            batch, c_in, c_out, side, window, stride = shape
            p = window // 2

            def conv(x, w):
                return jax.lax.conv_general_dilated(
                    x, w, (stride, stride), ((p, p), (p, p)),
                    dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=HIGHEST)

            x, w = operand(batch, side, side, c_in), operand(window, window, c_in, c_out)
            if op == "conv":
                args, fn = (x, w), conv
            else:  # the forward's output is not needed and XLA drops it
                args = (x, w, operand(*jax.eval_shape(conv, x, w).shape))
                if op == "conv_wgrad":  # a first layer's: the weights' gradient alone

                    def fn(x, w, g):
                        return jax.vjp(lambda w: conv(x, w), w)[1](g)
                else:  # both gradients

                    def fn(x, w, g):
                        return jax.vjp(conv, x, w)[1](g)
        elif op in ("memory", "update"):
            args = (operand(shape[0]),)

            def fn(x):  # scaled by less than 1 so that repeated calls stay finite
                return x * 0.999
        elif op == "bn":  # jax_backend's Flax BatchNorm in training mode, and its vjp
            from dlperf.backends.jax_layers import batch_norm

            batch, channels, side = shape
            layer = batch_norm("bn")
            x = operand(batch, side, side, channels)
            # the variables' structure traced, not computed: Flax's init runs op by op,
            # each compiled, 0.4-0.9 s a shape; its values do not change the time
            variables = jax.tree.map(lambda v: np.ones(v.shape, v.dtype),
                                     jax.eval_shape(layer.init, jax.random.PRNGKey(0), x))
            args = (x, variables["params"], variables["batch_stats"],
                    operand(batch, side, side, channels))

            def fn(x, params, stats, g):
                def apply(x, params):
                    return layer.apply({"params": params, "batch_stats": stats}, x,
                                       mutable=["batch_stats"])[0]

                return jax.vjp(apply, x, params)[1](g)
        elif op == "pool":  # jax_backend's max pool, and its vjp (the input's gradient)
            from dlperf.backends.jax_layers import max_pool

            batch, channels, side = shape
            out = conv_out(side, POOL_WINDOW, POOL_STRIDE)
            args = (operand(batch, side, side, channels), operand(batch, out, out, channels))

            def fn(x, g):
                return jax.vjp(max_pool, x)[1](g)
        elif op == "lstm":  # jax_backend's LSTM layer (time-major), and its vjp
            from dlperf.backends.jax_layers import LSTM

            batch, steps, inputs, hidden = shape
            layer = LSTM(hidden)
            xs = operand(steps, batch, inputs)
            params = jax.tree.map(lambda v: operand(*v.shape) / np.sqrt(hidden),
                                  jax.eval_shape(layer.init, jax.random.PRNGKey(0), xs))
            args = (xs, params, operand(steps, batch, hidden))

            def fn(xs, params, g):
                return jax.vjp(lambda x, p: layer.apply(p, x), xs, params)[1](g)
        elif op == "xent":  # the loss jax_backend trains with, and its gradient
            rows, classes = shape
            # the mean's gradient (1/rows a row) passed in, not a constant: as a constant,
            # XLA folded the labels' scatter at compile time, 3.5 s at a million rows
            args = (operand(rows, classes), rng.integers(0, classes, rows).astype(np.int32),
                    np.full(rows, 1 / rows, np.float32))

            def fn(z, y, g):
                return jax.vjp(lambda z: optax.softmax_cross_entropy_with_integer_labels(
                    z, y), z)[1](g)[0]
        elif op == "dispatch_train":
            args = (operand(DISPATCH_SIDE, DISPATCH_SIDE) / DISPATCH_SIDE,
                    [operand(DISPATCH_SIDE, DISPATCH_SIDE) / DISPATCH_SIDE
                     for _ in range(shape[0])])

            def loss(ws, a):
                z = a
                for w in ws:
                    z = jnp.matmul(z, w, precision=HIGHEST)
                return z.sum()

            # a training step as jax_backend's: grad, optax's SGD update, the state
            # donated (a small rate keeps the weights finite over any number of calls)
            tx = optax.sgd(1e-4)
            a, ws = args
            args = ((ws, tx.init(ws)), a)

            def fn(state, a):
                ws, opt_state = state
                updates, opt_state = tx.update(jax.grad(loss)(ws, a), opt_state, ws)
                return optax.apply_updates(ws, updates), opt_state
        elif op == "dispatch":
            args = (operand(DISPATCH_SIDE, DISPATCH_SIDE) / DISPATCH_SIDE,)

            def fn(a):
                z = a
                for _ in range(shape[0]):
                    z = jnp.matmul(z, a, precision=HIGHEST)
                return z
        else:
            raise UnsupportedError(f"jax has no calibration kernel '{op}'")
        self.args = jax.device_put(args, device)
        # the update writes over its array (its input donated), as a training step updates
        # its weights; the memory pass makes a fresh result, as a layer does
        self._donate = op in ("update", "dispatch_train")
        self._fn = jax.jit(fn, donate_argnums=(0,) if self._donate else ())
        self._out = None

    def step(self) -> None:
        self._out = self._fn(*self.args)
        if self._donate:  # the new state is the next call's
            self.args = (self._out, *self.args[1:])

    def sync(self) -> None:
        if self._out is not None:
            jax.block_until_ready(self._out)

    def flops_per_step(self) -> float:
        return flops(self.op, self.shape)


def kernel(op: str, shape: tuple[int, ...], device: jax.Device) -> Timed:
    return Kernel(op, shape, device)
