"""TensorFlow's calibration kernels (``dlperf.perfmodel.kernels``): each op under
tf.function, as the 'graph' variant runs a training step (NHWC, fp32, TF32 off)."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from dlperf.backends import operands
from dlperf.backends.base import Timed, UnsupportedError
from dlperf.perfmodel.kernels import (
    CONVS,
    DISPATCH_SIDE,
    POOL_STRIDE,
    POOL_WINDOW,
    conv_out,
    flops,
)


class Kernel(Timed):
    """One call of a calibration kernel per step (one tf.function call)."""

    batch_size = 1
    param_count = 0

    def __init__(self, op: str, shape: tuple[int, ...], device: str):
        self.op, self.shape = op, shape
        tf.config.experimental.enable_tensor_float_32_execution(False)
        with tf.device(device):
            gen = tf.random.Generator.from_seed(0)
            rng = np.random.default_rng(0)

            def operand(shape: Any) -> tf.Tensor:
                # values do not change a kernel's time (``backends.operands``); TensorFlow's
                # generator drew the largest operands for 8.5 s of a 30 s worker
                return tf.constant(operands.uniform(tuple(shape), rng))

            if op == "gemm":
                m, n, k = shape
                args = (operand((m, k)), operand((k, n)))
                fn = tf.linalg.matmul
            elif op == "gemm_tn":
                m, n, k = shape
                args = (operand((k, m)), operand((k, n)))

                def fn(a, b):
                    return tf.linalg.matmul(a, b, transpose_a=True)
            elif op == "gemm_nt":  # Keras' Dense input gradient: its kernel transposed
                m, n, k = shape
                args = (operand((m, k)), operand((n, k)))

                def fn(a, b):
                    return tf.linalg.matmul(a, b, transpose_b=True)
            elif op == "gemm_tn_seq":  # Keras' Dense on 3-D: time and batch flattened
                m, n, t, b = shape
                args = (operand((t, b, m)), operand((t, b, n)))

                def fn(a, g):
                    return tf.linalg.matmul(tf.reshape(a, [-1, m]), tf.reshape(g, [-1, n]),
                                            transpose_a=True)
            elif op in CONVS:
                # padded as the Keras models pad (keras_models._conv): 'SAME' where that
                # is symmetric (stride 1, odd window), else the input padded beforehand
                # and 'VALID'. Explicit padding would take TensorFlow's slower backward
                # (1.5x here on 5x5 and 3x3 layers, measured with tf.raw_ops)
                batch, c_in, c_out, side, window, stride = shape
                p = window // 2
                same = stride == 1 and window % 2 == 1
                padded = side if same else side + 2 * p
                x = operand((batch, padded, padded, c_in))
                w = operand((window, window, c_in, c_out))
                pad = "SAME" if same else "VALID"
                y = tf.nn.conv2d(x, w, stride, pad)
                if op == "conv":
                    args = (x, w)

                    def fn(x, w):
                        return tf.nn.conv2d(x, w, stride, pad)
                else:  # a backward: the weights' gradient, and the input's but for a
                    # first layer (its input, the data, has no gradient)
                    args = (x, w, operand(y.shape))
                    strides = [1, stride, stride, 1]

                    def fn(x, w, g):
                        dx = () if op == "conv_wgrad" else (tf.raw_ops.Conv2DBackpropInput(
                            input_sizes=tf.shape(x), filter=w, out_backprop=g,
                            strides=strides, padding=pad),)
                        return (*dx, tf.raw_ops.Conv2DBackpropFilter(
                            input=x, filter_sizes=tf.shape(w), out_backprop=g,
                            strides=strides, padding=pad))
            elif op == "memory":
                args = (operand(shape),)

                def fn(x):
                    return x * 2.0
            elif op == "xent":  # the loss tf_backend trains with (_xent), and its gradient
                rows, classes = shape
                args = (operand((rows, classes)),
                        gen.uniform((rows,), 0, classes, dtype=tf.int32))

                def fn(z, y):
                    with tf.GradientTape() as tape:
                        tape.watch(z)
                        loss = tf.reduce_mean(
                            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=z))
                    return tape.gradient(loss, z)
            elif op == "bn":  # the Keras layer keras_models builds, in training mode
                from dlperf.backends.keras_models import BN_EPSILON, BN_MOMENTUM

                batch, channels, side = shape
                layer = keras.layers.BatchNormalization(epsilon=BN_EPSILON,
                                                        momentum=BN_MOMENTUM)
                layer.build((batch, side, side, channels))
                args = (operand((batch, side, side, channels)),
                        operand((batch, side, side, channels)))

                def fn(x, g):
                    with tf.GradientTape() as tape:
                        tape.watch(x)
                        y = layer(x, training=True)
                    return tuple(tape.gradient(y, [x, *layer.trainable_variables],
                                               output_gradients=g))
            elif op == "pool":  # the Keras layers keras_models builds, and the input's gradient
                from dlperf.backends.keras_models import max_pool_layers

                batch, channels, side = shape
                out = conv_out(side, POOL_WINDOW, POOL_STRIDE)
                pad, pool = max_pool_layers("pool")
                args = (operand((batch, side, side, channels)),
                        operand((batch, out, out, channels)))

                def fn(x, g):
                    with tf.GradientTape() as tape:
                        tape.watch(x)
                        y = pool(pad(x))
                    return tape.gradient(y, x, output_gradients=g)
            elif op == "lstm":  # one layer as keras_models' language model builds it
                batch, steps, inputs, hidden = shape
                layer = keras.layers.LSTM(hidden, return_sequences=True, bias_initializer="zeros",
                                          unit_forget_bias=False)
                layer.build((batch, steps, inputs))
                args = (operand((batch, steps, inputs)), operand((batch, steps, hidden)))

                def fn(x, g):
                    with tf.GradientTape() as tape:
                        tape.watch(x)
                        y = layer(x)
                    return tuple(tape.gradient(y, [x, *layer.trainable_variables],
                                               output_gradients=g))
            elif op == "update":  # a variable written over, as an optimizer's apply does
                var = tf.Variable(operand(shape))
                args = ()

                def fn():
                    var.assign(var * 0.999)
                    return var[:1]  # after the assignment (tf.function orders them)
            elif op == "dispatch_train":  # as tf_backend.make_train_step: tape, Keras SGD
                a = operand((DISPATCH_SIDE, DISPATCH_SIDE)) / DISPATCH_SIDE
                ws = [keras.Variable(operand((DISPATCH_SIDE, DISPATCH_SIDE)) / DISPATCH_SIDE)
                      for _ in range(shape[0])]
                opt = keras.optimizers.SGD(learning_rate=1e-4)  # small: stays finite
                opt.build(ws)
                args = ()

                def fn():
                    with tf.GradientTape() as tape:
                        z = a
                        for w in ws:
                            z = tf.linalg.matmul(z, w)
                        loss = tf.reduce_sum(z)
                    grads = tape.gradient(loss, ws)
                    opt.apply_gradients(zip(grads, ws, strict=True))
                    return loss
            elif op == "dispatch":
                args = (operand((DISPATCH_SIDE, DISPATCH_SIDE)) / DISPATCH_SIDE,)

                def fn(a):
                    z = a
                    for _ in range(shape[0]):
                        z = tf.linalg.matmul(z, a)
                    return z
            else:
                raise UnsupportedError(f"tensorflow has no calibration kernel '{op}'")
        self.args = args
        self._fn = tf.function(fn)
        self._out = None

    def step(self) -> None:
        self._out = self._fn(*self.args)

    def sync(self) -> None:
        out = self._out
        if out is not None:  # a value read back: the call's work is done
            first = out[0] if isinstance(out, tuple) else out
            tf.reshape(first, [-1])[0].numpy()

    def flops_per_step(self) -> float:
        return flops(self.op, self.shape)


def kernel(op: str, shape: tuple[int, ...], device: str) -> Timed:
    return Kernel(op, shape, device)
