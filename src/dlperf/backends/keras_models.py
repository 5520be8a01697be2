"""The DLBench networks written once in Keras 3 layers, for any Keras backend: the Keras
framework (``keras_backend``) and the TensorFlow backend (``tf_backend``) both build them.

Nothing here imports TensorFlow, PyTorch or JAX: Keras runs these layers on whichever
backend ``KERAS_BACKEND`` named when Keras was imported (``keras_backend`` sets it per
variant). The networks mirror ``torch_backend`` layer for layer: the same shapes
(explicit symmetric padding where Keras' 'same' would pad asymmetrically), the same
initial distributions, PyTorch's batch-norm epsilon and momentum. Images are NHWC (Keras'
default ``channels_last``) on every backend; the neutral exchange layout is NCHW.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from dlperf.backends.base import UnsupportedError
from dlperf.workloads.dlbench import AlexNetConfig, FCNConfig, LSTMLMConfig, ResNetConfig

BN_EPSILON = 1e-5  # PyTorch's default; Keras' own default is 1e-3
BN_MOMENTUM = 0.9  # PyTorch's momentum=0.1 in Keras' convention (running stats only)

#: For every dense layer fed by a flattened feature map, that map's (C, H, W) shape: its
#: kernel rows are in Keras' (H, W, C) order, the neutral layout's are (C, H, W).
FlatRows = dict[str, tuple[int, int, int]]


def _uniform(bound: float) -> keras.initializers.Initializer:
    return keras.initializers.RandomUniform(-bound, bound)


def _fan_in_uniform(fan_in: int) -> keras.initializers.Initializer:
    """U(-1/sqrt(fan_in), +1/sqrt(fan_in)) as in every framework's backend; biases are zeros."""
    return _uniform(1.0 / math.sqrt(fan_in))


def _dense(n_in: int, n_out: int, name: str, activation: str | None = None) -> keras.layers.Dense:
    return keras.layers.Dense(
        n_out, activation=activation, name=name,
        kernel_initializer=_fan_in_uniform(n_in), bias_initializer="zeros",
    )


def _conv(x: Any, c_in: int, c_out: int, k: int, stride: int, pad: int, name: str,
          activation: str | None = None, bias: bool = True) -> Any:
    """A convolution with PyTorch's symmetric padding: 'same' only where it pads exactly
    so (stride 1, pad (k-1)/2); else ZeroPadding2D and 'valid' ('same' pads
    asymmetrically at stride 2, on every Keras backend)."""
    if stride == 1 and 2 * pad == k - 1:
        padding = "same"
    else:
        padding = "valid"
        if pad:
            x = keras.layers.ZeroPadding2D(pad, name=f"{name}_pad")(x)
    return keras.layers.Conv2D(
        c_out, k, strides=stride, padding=padding, activation=activation, use_bias=bias,
        name=name, kernel_initializer=_fan_in_uniform(k * k * c_in), bias_initializer="zeros",
    )(x)


def max_pool_layers(name: str) -> tuple[Any, Any]:
    """Max-pool 3x3, stride 2, padding 1, as two Keras layers. Zero padding is exact:
    every pool follows a ReLU, so no window maximum is below zero."""
    return (keras.layers.ZeroPadding2D(1, name=f"{name}_pad"),
            keras.layers.MaxPooling2D(3, 2, padding="valid", name=name))


def _max_pool(x: Any, name: str) -> Any:
    pad, pool = max_pool_layers(name)
    return pool(pad(x))


def _bn(x: Any, name: str) -> Any:
    return keras.layers.BatchNormalization(
        epsilon=BN_EPSILON, momentum=BN_MOMENTUM, name=name,
        gamma_initializer="ones", beta_initializer="zeros",
    )(x)


def build_fcn(cfg: FCNConfig) -> tuple[keras.Model, FlatRows]:
    widths = (cfg.inputs, *cfg.hidden, cfg.classes)
    x = inputs = keras.Input((cfg.inputs,), name="x")
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        x = _dense(a, b, f"fc{i + 1}", cfg.activation if i < len(widths) - 2 else None)(x)
    return keras.Model(inputs, x, name="fcn"), {}


def build_alexnet(cfg: AlexNetConfig) -> tuple[keras.Model, FlatRows]:
    x = inputs = keras.Input((cfg.image, cfg.image, cfg.channels_in), name="x")
    c_in = cfg.channels_in
    for i, c in enumerate(cfg.convs, start=1):
        x = _conv(x, c_in, c.out, c.kernel, c.stride, c.pad, f"conv{i}", "relu")
        if c.pool_after:
            x = _max_pool(x, f"pool{i}")
        c_in = c.out
    side = cfg.feature_side()
    x = keras.layers.Flatten(name="flatten")(x)  # (H, W, C) order
    widths = (c_in * side * side, *cfg.fc, cfg.classes)
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        x = _dense(a, b, f"fc{i + 1}", "relu" if i < len(widths) - 2 else None)(x)
    return keras.Model(inputs, x, name="alexnet"), {"fc1": (c_in, side, side)}


def _bottleneck(x: Any, c_in: int, width: int, c_out: int, stride: int, name: str) -> Any:
    y = _conv(x, c_in, width, 1, 1, 0, f"{name}_c1", bias=False)
    y = keras.layers.ReLU()(_bn(y, f"{name}_bn1"))
    y = _conv(y, width, width, 3, stride, 1, f"{name}_c2", bias=False)
    y = keras.layers.ReLU()(_bn(y, f"{name}_bn2"))
    y = _bn(_conv(y, width, c_out, 1, 1, 0, f"{name}_c3", bias=False), f"{name}_bn3")
    if stride != 1 or c_in != c_out:
        x = _bn(_conv(x, c_in, c_out, 1, stride, 0, f"{name}_proj", bias=False),
                f"{name}_proj_bn")
    return keras.layers.ReLU()(keras.layers.Add()([y, x]))


def build_resnet(cfg: ResNetConfig) -> tuple[keras.Model, FlatRows]:
    x = inputs = keras.Input((cfg.image, cfg.image, cfg.channels_in), name="x")
    x = _conv(x, cfg.channels_in, cfg.stem, 7, 2, 3, "stem", bias=False)
    x = keras.layers.ReLU(name="stem_relu")(_bn(x, "stem_bn"))
    x = _max_pool(x, "stem_pool")
    c_in = cfg.stem
    for s, (width, blocks, stride) in enumerate(cfg.stages, start=1):
        for b in range(1, blocks + 1):
            c_out = width * cfg.expansion
            x = _bottleneck(x, c_in, width, c_out, stride if b == 1 else 1, f"s{s}b{b}")
            c_in = c_out
    x = keras.layers.GlobalAveragePooling2D(name="avgpool")(x)
    x = _dense(c_in, cfg.classes, "fc")(x)
    return keras.Model(inputs, x, name="resnet"), {}


def build_lstm_lm(cfg: LSTMLMConfig, unroll: bool = False) -> tuple[keras.Model, FlatRows]:
    """Embedding -> stacked LSTM -> vocabulary projection at every step. Keras' LSTM has
    one bias per gate (the neutral definition) and gate order i, f, c, o."""
    x = inputs = keras.Input((cfg.seq_len,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(
        cfg.vocab, cfg.embed, name="embedding", embeddings_initializer=_uniform(0.1)
    )(x)
    bound = 1.0 / math.sqrt(cfg.hidden)
    for i in range(cfg.layers_n):
        x = keras.layers.LSTM(
            cfg.hidden, return_sequences=True, name=f"lstm{i + 1}", unroll=unroll,
            kernel_initializer=_uniform(bound), recurrent_initializer=_uniform(bound),
            bias_initializer="zeros", unit_forget_bias=False,
        )(x)
    x = _dense(cfg.hidden, cfg.vocab, "softmax_proj")(x)
    return keras.Model(inputs, x, name="lstm_lm"), {}


BUILDERS: dict[type, Callable[..., tuple[keras.Model, FlatRows]]] = {
    FCNConfig: build_fcn,
    AlexNetConfig: build_alexnet,
    ResNetConfig: build_resnet,
    LSTMLMConfig: build_lstm_lm,
}


def build_model(cfg: Any, **kw: Any) -> tuple[keras.Model, FlatRows]:
    """The Keras model of a DLBench config, and its ``FlatRows``."""
    try:
        builder = BUILDERS[type(cfg)]
    except KeyError:
        raise UnsupportedError(f"no Keras model of {type(cfg).__name__}") from None
    return builder(cfg, **kw)


def trainable_params(model: keras.Model) -> int:
    return int(sum(math.prod(v.shape) for v in model.trainable_variables))


def synthetic_batch(cfg: Any, batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Host inputs (images NHWC, tokens int32) and int32 targets; the trainer moves them to
    the device once."""
    rng = np.random.default_rng(seed)
    if isinstance(cfg, LSTMLMConfig):
        shape = (batch, cfg.seq_len)
        return (rng.integers(0, cfg.vocab, shape, dtype=np.int32),
                rng.integers(0, cfg.vocab, shape, dtype=np.int32))
    c, *spatial = cfg.input_shape()
    x = rng.standard_normal((batch, *spatial, c) if spatial else (batch, c), dtype=np.float32)
    return x, rng.integers(0, cfg.classes, (batch,), dtype=np.int32)


# ----------------------------------------------------------------------------- weights
def _flat_rows(a: np.ndarray, chw: tuple[int, int, int], to_neutral: bool) -> np.ndarray:
    """Permute a dense kernel's rows between (H, W, C) (Keras) and (C, H, W) order."""
    c, h, w = chw
    out = a.shape[-1]
    if to_neutral:
        return a.reshape(h, w, c, out).transpose(2, 0, 1, 3).reshape(c * h * w, out)
    return a.reshape(c, h, w, out).transpose(1, 2, 0, 3).reshape(h * w * c, out)


def _neutral_vars(model: keras.Model) -> list[tuple[str, Any]]:
    """(neutral name, Keras variable) for every trainable parameter."""
    out: list[tuple[str, Any]] = []
    for layer in model.layers:
        n = layer.name
        if isinstance(layer, keras.layers.Dense | keras.layers.Conv2D):
            out.append((f"{n}.w", layer.kernel))
            if layer.use_bias:
                out.append((f"{n}.b", layer.bias))
        elif isinstance(layer, keras.layers.BatchNormalization):
            out += [(f"{n}.gamma", layer.gamma), (f"{n}.beta", layer.beta)]
        elif isinstance(layer, keras.layers.Embedding):
            out.append((f"{n}.w", layer.embeddings))
        elif isinstance(layer, keras.layers.LSTM):
            cell = layer.cell
            out += [(f"{n}.wx", cell.kernel), (f"{n}.wh", cell.recurrent_kernel),
                    (f"{n}.b", cell.bias)]
    return out


def export_weights(model: keras.Model, flat: FlatRows) -> dict[str, np.ndarray]:
    """Trainable weights in the neutral layout (``base.WEIGHT_LAYOUT``), as numpy copies."""
    out = {}
    for name, v in _neutral_vars(model):
        a = np.array(keras.ops.convert_to_numpy(v), dtype=np.float32, copy=True)
        layer = name.split(".")[0]
        if layer in flat and name.endswith(".w"):
            a = _flat_rows(a, flat[layer], to_neutral=True)
        out[name] = a
    return out


def import_weights(model: keras.Model, flat: FlatRows, weights: dict[str, np.ndarray]) -> None:
    params = _neutral_vars(model)
    missing = {n for n, _ in params} - set(weights)
    if missing:
        raise KeyError(f"weights missing: {sorted(missing)[:5]}")
    for name, v in params:
        a = np.asarray(weights[name], dtype=np.float32)
        layer = name.split(".")[0]
        if layer in flat and name.endswith(".w"):
            a = _flat_rows(a, flat[layer], to_neutral=False)
        v.assign(a.reshape(v.shape))
