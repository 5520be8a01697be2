"""JAX backend: Flax (linen) modules, Optax SGD, the whole training step under ``jax.jit``.

Networks are built from the framework-neutral configs of ``dlperf.workloads`` and mirror
``torch_backend`` layer for layer: the same shapes (explicit symmetric padding), the same
initial distributions, the same loss and plain SGD at the same learning rate, in fp32.
Images are NHWC inside JAX; the neutral NCHW layout is converted only at the edges
(``set_batch``, and the rows of a dense layer fed by a flattened feature map).

The timed ``step()`` is one call of the jitted step, with the parameters and optimizer
state donated so XLA updates them in place, and nothing else; ``sync()`` blocks on its
outputs. FLOPs are counted on the traced step's matmuls and convolutions, because XLA's
own cost analysis counts something else (see ``JaxTrainer.flops_per_step``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
import optax
from jax.extend import core as jax_core

from dlperf.backends.base import (
    MIXED,
    MIXED_KERNELS,
    NO_TF32_ON_CPU,
    Backend,
    CalibrationKernels,
    ForwardOnly,
    Inference,
    InputPipelines,
    PeakMatmul,
    PipelineTrainer,
    Profiling,
    Timed,
    Trainer,
    UnsupportedError,
)
from dlperf.backends.jax_layers import LSTM, uniform
from dlperf.backends.jax_layers import batch_norm as _bn
from dlperf.backends.jax_layers import max_pool as _max_pool
from dlperf.workloads.dlbench import AlexNetConfig, FCNConfig, LSTMLMConfig, ResNetConfig

LEARNING_RATE = 0.01


# ----------------------------------------------------------------------------- init
def uniform_fan_in(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
    """U(-1/sqrt(fan_in), +1/sqrt(fan_in)); fan_in is every axis but the last (HWIO, IO)."""
    bound = 1.0 / math.sqrt(math.prod(shape[:-1]))
    return jax.random.uniform(key, shape, dtype, -bound, bound)


def _dense(features: int, name: str, bias: bool = True) -> nn.Dense:
    return nn.Dense(features, use_bias=bias, kernel_init=uniform_fan_in,
                    bias_init=nn.initializers.zeros, name=name)


def _conv(features: int, kernel: int, stride: int, pad: int, name: str,
          bias: bool = True) -> nn.Conv:
    return nn.Conv(features, (kernel, kernel), (stride, stride), ((pad, pad), (pad, pad)),
                   use_bias=bias, kernel_init=uniform_fan_in,
                   bias_init=nn.initializers.zeros, name=name)


# ----------------------------------------------------------------------------- models
_ACTS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "sigmoid": jax.nn.sigmoid, "relu": jax.nn.relu, "tanh": jnp.tanh,
}


class FCN(nn.Module):
    cfg: FCNConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = _ACTS[self.cfg.activation]
        widths = (*self.cfg.hidden, self.cfg.classes)
        for i, w in enumerate(widths):
            x = _dense(w, f"fc{i + 1}")(x)
            if i < len(widths) - 1:
                x = act(x)
        return x


class AlexNet(nn.Module):
    cfg: AlexNetConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # x: NHWC
        for i, c in enumerate(self.cfg.convs, start=1):
            x = jax.nn.relu(_conv(c.out, c.kernel, c.stride, c.pad, f"conv{i}")(x))
            if c.pool_after:
                x = _max_pool(x)
        # (H, W, C) order; the neutral (C, H, W) order is restored on weight exchange
        x = x.reshape(x.shape[0], -1)
        widths = (*self.cfg.fc, self.cfg.classes)
        for i, w in enumerate(widths):
            x = _dense(w, f"fc{i + 1}")(x)
            if i < len(widths) - 1:
                x = jax.nn.relu(x)
        return x


class Bottleneck(nn.Module):
    width: int
    c_out: int
    stride: int
    train: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        t = self.train
        y = jax.nn.relu(_bn("bn1", t)(_conv(self.width, 1, 1, 0, "c1", bias=False)(x)))
        y = jax.nn.relu(_bn("bn2", t)(_conv(self.width, 3, self.stride, 1, "c2",
                                             bias=False)(y)))
        y = _bn("bn3", t)(_conv(self.c_out, 1, 1, 0, "c3", bias=False)(y))
        if self.stride != 1 or x.shape[-1] != self.c_out:
            x = _bn("proj_bn", t)(_conv(self.c_out, 1, self.stride, 0, "proj", bias=False)(x))
        return jax.nn.relu(y + x)


class ResNet(nn.Module):
    cfg: ResNetConfig
    train: bool = True  # False: batch normalisation on the running averages (inference)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # x: NHWC
        cfg = self.cfg
        x = jax.nn.relu(_bn("stem_bn", self.train)(_conv(cfg.stem, 7, 2, 3, "stem",
                                                         bias=False)(x)))
        x = _max_pool(x)
        for s, (width, blocks, stride) in enumerate(cfg.stages, start=1):
            for b in range(1, blocks + 1):
                x = Bottleneck(width, width * cfg.expansion, stride if b == 1 else 1,
                               self.train, name=f"s{s}b{b}")(x)
        x = jnp.mean(x, axis=(1, 2))
        return _dense(cfg.classes, "fc")(x)


class LSTMLanguageModel(nn.Module):
    """Embedding -> stacked LSTM -> vocabulary projection at every step (time-major)."""

    cfg: LSTMLMConfig

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:  # (B, T) -> logits (T, B, V)
        cfg = self.cfg
        x = nn.Embed(cfg.vocab, cfg.embed, embedding_init=uniform(0.1), name="embedding")(
            tokens.T
        )
        for k in range(cfg.layers_n):
            x = LSTM(cfg.hidden, name=f"lstm{k + 1}")(x)
        return _dense(cfg.vocab, "softmax_proj")(x)


BUILDERS: dict[type, type[nn.Module]] = {
    FCNConfig: FCN,
    AlexNetConfig: AlexNet,
    ResNetConfig: ResNet,
    LSTMLMConfig: LSTMLanguageModel,
}


def build_model(cfg: Any) -> nn.Module:
    try:
        return BUILDERS[type(cfg)](cfg)
    except KeyError:
        raise UnsupportedError(f"jax backend cannot build {type(cfg).__name__}") from None


def prng_key(seed: int) -> jax.Array:
    """A key for the initial weights (not timed).

    RBG keys (XLA's RngBitGenerator) compile in a fraction of the time of the default
    threefry keys, whose per-initialiser kernels take tens of seconds for a ResNet on a
    small CPU; their randomness is ample for initial weights.
    """
    return jax.random.key(seed, impl="rbg")


def input_spec(cfg: Any, batch: int) -> jax.ShapeDtypeStruct:
    """Shape and dtype of one batch of inputs, in JAX's layout (images NHWC)."""
    if isinstance(cfg, LSTMLMConfig):
        return jax.ShapeDtypeStruct((batch, cfg.seq_len), jnp.int32)
    shape = cfg.input_shape()
    if len(shape) == 3:  # (C, H, W) -> (H, W, C)
        shape = (shape[1], shape[2], shape[0])
    return jax.ShapeDtypeStruct((batch, *shape), jnp.float32)


def synthetic_batch(cfg: Any, batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and integer targets in JAX's layout, drawn on the host (as torch_backend
    draws them) and put on the device by the trainer, before anything is timed."""
    rng = np.random.default_rng(seed)
    spec = input_spec(cfg, batch)
    if isinstance(cfg, LSTMLMConfig):
        return (rng.integers(0, cfg.vocab, spec.shape, dtype=np.int32),
                rng.integers(0, cfg.vocab, spec.shape, dtype=np.int32))
    x = rng.standard_normal(spec.shape, dtype=np.float32)
    return x, rng.integers(0, cfg.classes, (batch,), dtype=np.int32)


def init_variables(model: nn.Module, cfg: Any, batch: int, key: jax.Array) -> dict[str, Any]:
    """{'params': ..., 'batch_stats': ...} (the latter only for batch-normalised nets)."""
    spec = input_spec(cfg, batch)
    # one compiled init instead of one dispatch per op (seconds for a ResNet)
    return dict(jax.jit(model.init)(key, jnp.zeros(spec.shape, spec.dtype)))


def param_shapes(cfg: Any, batch: int = 1) -> Any:
    """The parameter tree as shapes only (``jax.eval_shape``): no memory, no compute."""
    model = build_model(cfg)
    spec = input_spec(cfg, batch)
    return jax.eval_shape(model.init, prng_key(0), spec)["params"]


def count_params(params: Any) -> int:
    return sum(math.prod(p.shape) for p in jax.tree_util.tree_leaves(params))


# ----------------------------------------------------------------------------- weights
# Flax leaf name -> neutral suffix, by the kind of module that owns it
_BN_NAMES = {"scale": "gamma", "bias": "beta"}
_LAYER_NAMES = {"kernel": "w", "bias": "b", "embedding": "w", "wx": "wx", "wh": "wh", "b": "b"}


def _neutral_name(path: tuple[str, ...], siblings: dict[str, Any]) -> str:
    module, leaf = "_".join(path[:-1]), path[-1]
    table = _BN_NAMES if "scale" in siblings else _LAYER_NAMES
    return f"{module}.{table[leaf]}"


def _flatten_params(params: Any) -> dict[tuple[str, ...], Any]:
    return flax.traverse_util.flatten_dict(flax.core.unfreeze(params))


def _siblings(flat: dict[tuple[str, ...], Any], path: tuple[str, ...]) -> dict[str, Any]:
    return {p[-1]: v for p, v in flat.items() if p[:-1] == path[:-1]}


def _chw_rows(cfg: Any) -> tuple[str, tuple[int, int, int]] | None:
    """(layer, (C, H, W)) of the dense layer fed by a flattened feature map, if any."""
    if isinstance(cfg, AlexNetConfig):
        side = cfg.feature_side()
        return "fc1", (cfg.convs[-1].out, side, side)
    return None


def export_weights(params: Any, cfg: Any) -> dict[str, np.ndarray]:
    flat = _flatten_params(params)
    out = {_neutral_name(p, _siblings(flat, p)): np.array(v, dtype=np.float32)
           for p, v in flat.items()}
    rows = _chw_rows(cfg)
    if rows:
        name, (c, h, w) = f"{rows[0]}.w", rows[1]
        # JAX rows are (H, W, C); the neutral order is (C, H, W)
        out[name] = out[name].reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(c * h * w, -1)
    return out


def import_weights(params: Any, cfg: Any, weights: dict[str, Any]) -> Any:
    """A new parameter tree with every leaf taken from the neutral ``weights``."""
    flat = _flatten_params(params)
    names = {p: _neutral_name(p, _siblings(flat, p)) for p in flat}
    missing = set(names.values()) - set(weights)
    if missing:
        raise KeyError(f"weights missing: {sorted(missing)[:5]}")
    rows = _chw_rows(cfg)
    new = {}
    for p, v in flat.items():
        a = np.asarray(weights[names[p]], dtype=np.float32)
        if rows and names[p] == f"{rows[0]}.w":
            c, h, w = rows[1]
            a = a.reshape(c, h, w, -1).transpose(1, 2, 0, 3)
        new[p] = jnp.asarray(a.reshape(v.shape))
    return flax.traverse_util.unflatten_dict(new)


# ----------------------------------------------------------------------------- FLOPs
def jaxpr_matmul_flops(jaxpr: Any) -> int:
    """Matmul and convolution FLOPs of a jaxpr, 2 per multiply-add, loops times their length.

    ``dot_general``: 2 x output elements x contracted size (XLA's own formula for a dot).
    ``conv_general_dilated``: 2 x multiply-adds over the full kernel window, zero padding
    counted as data (see ``_conv_macs``): the convention of ``dlperf.workloads`` and of
    torch's FlopCounterMode, whereas XLA's own count skips the padding.
    A ``scan`` body counts ``length`` times; a ``while`` loop with matmuls has no static trip
    count, so it raises ``ValueError``.
    """
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)  # ClosedJaxpr -> Jaxpr
    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            (contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            k = math.prod(lhs[d] for d in contract)
            total += 2 * math.prod(eqn.outvars[0].aval.shape) * k
        elif name == "conv_general_dilated":
            total += 2 * _conv_macs(eqn)
        subs = list(jax_core.jaxprs_in_params(eqn.params))
        if not subs:
            continue
        counts = [jaxpr_matmul_flops(j) for j in subs]
        if name == "scan":
            total += eqn.params["length"] * sum(counts)
        elif name == "cond":
            total += max(counts)  # one branch runs
        elif name == "while":
            if any(counts):
                raise ValueError("matmuls inside a while loop: no static trip count")
        else:  # nested jit, custom_jvp/vjp, remat: their body runs once
            total += sum(counts)
    return total


def _conv_macs(eqn: Any) -> int:
    """Multiply-adds of a convolution over its full kernel window (padding counted).

    A convolution of a dilated input is a transposed convolution (JAX's input gradient of
    a strided convolution): each real input element meets every kernel tap and every
    output feature of its group. Any other convolution: each output element takes every
    kernel tap of every input feature of its group.
    """
    p = eqn.params
    lhs, rhs = (v.aval.shape for v in eqn.invars[:2])
    out = eqn.outvars[0].aval.shape
    dn = p["dimension_numbers"]
    taps = math.prod(rhs[d] for d in dn.rhs_spec[2:])
    rhs_out, rhs_in = rhs[dn.rhs_spec[0]], rhs[dn.rhs_spec[1]]
    if any(d > 1 for d in p["lhs_dilation"]):
        groups = p["feature_group_count"] * p["batch_group_count"]
        return math.prod(lhs) * taps * rhs_out // groups
    return math.prod(out) * taps * rhs_in


# ----------------------------------------------------------------------------- trainer
def make_train_step(model: nn.Module, tx: optax.GradientTransformation, has_bn: bool):
    """The training step a JAX user writes: loss, grad, SGD update, new state."""

    def loss_fn(params, batch_stats, x, y):
        variables = {"params": params}
        if has_bn:
            variables["batch_stats"] = batch_stats
            logits, updates = model.apply(variables, x, mutable=["batch_stats"])
            batch_stats = updates["batch_stats"]
        else:
            logits = model.apply(variables, x)
        if logits.ndim == 3:  # language model: logits (T, B, V), targets (B, T)
            y = y.T
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        return loss, batch_stats

    def train_step(state, x, y):
        params, batch_stats, opt_state = state
        (loss, batch_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, batch_stats, x, y
        )
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return (params, batch_stats, opt_state), loss

    return train_step


class JaxTrainer(PipelineTrainer):
    """The state (parameters, batch statistics, optimizer state) lives on the device and is
    donated to every step; ``step()`` is a single call of the jitted step."""

    def __init__(self, model: nn.Module, cfg: Any, variables: dict[str, Any], x: Any,
                 y: Any, device: jax.Device):
        self.model, self.cfg, self.device = model, cfg, device
        self.x, self.y = jax.device_put((x, y), device)
        self.batch_size = int(x.shape[0])
        params = variables["params"]
        batch_stats = variables.get("batch_stats", {})
        self.param_count = count_params(params)
        self.tx = optax.sgd(LEARNING_RATE)
        self.state = jax.device_put((params, batch_stats, self.tx.init(params)), device)
        # donated: XLA writes the new parameters over the old buffers
        self._step = jax.jit(make_train_step(model, self.tx, bool(batch_stats)),
                             donate_argnums=0)
        self._last_loss: jax.Array | None = None

    def step(self) -> jax.Array:
        self.state, self._last_loss = self._step(self.state, self.x, self.y)
        return self._last_loss

    def sync(self) -> None:
        jax.block_until_ready((self.state, self._last_loss))

    def loss(self) -> float:
        return float(self._last_loss) if self._last_loss is not None else float("nan")

    def device_peak_bytes(self) -> int | None:
        """The GPU allocator's peak (XLA's ``peak_bytes_in_use``; what it preallocated
        beyond that is not counted), or None on the CPU."""
        if self.device.platform != "gpu":
            return None
        stats = self.device.memory_stats() or {}
        return int(stats["peak_bytes_in_use"]) if "peak_bytes_in_use" in stats else None

    def flops_per_step(self) -> float | None:
        """Matmul/conv FLOPs of the jitted step, counted on the jaxpr JAX hands to XLA.

        XLA's ``compiled.cost_analysis()['flops']`` is not comparable with the analytic
        count, for three reasons found by probing it: it adds every elementwise op (one
        FLOP per element of each add, multiply, compare, select; transcendentals are
        counted apart) and reductions (n - 1 per reduced row); it counts a convolution's
        multiply-adds only where the window meets real input (zero padding skipped, and
        XLA rewrites small convolutions); and it counts a ``while`` body once whatever its
        trip count (a scan over 64 steps counts as one step). So the count walks the traced
        step instead - the jaxpr that jit lowers and compiles, before XLA's rewrites - and
        adds up its ``dot_general`` and ``conv_general_dilated`` ops from their shapes (see
        ``jaxpr_matmul_flops``). Like the analytic count it includes products XLA then
        simplifies: convolution padding, and the LSTM's first recurrent product with the
        zero state (and its weight gradient), which PyTorch computes and XLA folds away.
        Returns None if the step has matmuls in a loop without a static trip count.
        """
        try:
            traced = self._step.trace(self.state, self.x, self.y)
            return float(jaxpr_matmul_flops(traced.jaxpr))
        except ValueError:
            return None

    def xla_cost_analysis(self) -> dict[str, float]:
        """XLA's own cost model of the compiled step (all ops; see ``flops_per_step``)."""
        compiled = self._step.lower(self.state, self.x, self.y).compile()
        return {k: float(v) for k, v in compiled.cost_analysis().items()
                if k in ("flops", "transcendentals", "bytes accessed")}

    def get_weights(self) -> dict[str, np.ndarray]:
        return export_weights(self.state[0], self.cfg)

    def set_weights(self, weights: dict[str, Any]) -> None:
        params, batch_stats, _ = self.state
        params = jax.device_put(import_weights(params, self.cfg, weights), self.device)
        self.state = (params, batch_stats, self.tx.init(params))

    def set_batch(self, x: Any, y: Any) -> None:
        x = np.asarray(x)
        if x.ndim == 4:  # NCHW -> NHWC
            x = x.transpose(0, 2, 3, 1)
        dtype = np.int32 if np.issubdtype(x.dtype, np.integer) else np.float32
        self.x = jax.device_put(np.ascontiguousarray(x, dtype=dtype), self.device)
        self.y = jax.device_put(np.asarray(y, dtype=np.int32), self.device)
        self.batch_size = int(self.x.shape[0])

    def train_on(self, x: Any, y: Any) -> jax.Array:
        # Grain's numpy batch onto the device, JAX's way in; targets as int32
        self.x, self.y = jax.device_put((x, np.asarray(y, dtype=np.int32)), self.device)
        return self.step()


class JaxInference(ForwardOnly):
    """One forward pass: the model's apply function jitted on its own (never under
    ``jax.grad``, so no gradient is traced), batch normalisation on its running averages."""

    mode = "jax.jit(model.apply), no grad, batch norm on running averages"

    def __init__(self, model: nn.Module, variables: dict[str, Any], x: Any,
                 device: jax.Device):
        self.device = device
        self.x = jax.device_put(x, device)
        self.batch_size = int(x.shape[0])
        self.variables = jax.device_put(variables, device)
        self.param_count = count_params(variables["params"])
        self._apply = jax.jit(model.apply)
        self._out: jax.Array | None = None

    def step(self) -> jax.Array:
        self._out = self._apply(self.variables, self.x)
        return self._out

    def sync(self) -> None:
        jax.block_until_ready(self._out)


def xla_cpu_threads() -> int:
    """Threads of XLA:CPU's intra-op pool, as created by the running CPU client.

    The pool is sized once, when the client starts, from ``PJRT_NPROC``/``NPROC`` if set,
    else from the CPUs in this process's affinity; no XLA flag or runtime call changes
    it (``--xla_cpu_multi_thread_eigen=false`` does not: the pool still works in parallel).
    Counted from the pool's threads (named ``tf_XLAEigen``); the rule above is the fallback
    if a future XLA renames them.
    """
    jax.devices("cpu")  # starts the client, and with it the pool
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # the thread has exited
            pass
    pool = sum(n == "tf_XLAEigen" for n in names)
    if pool:
        return pool
    for var in ("PJRT_NPROC", "NPROC"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return len(os.sched_getaffinity(0))


class JaxBackend(Backend, Inference, InputPipelines, PeakMatmul, CalibrationKernels, Profiling):
    name = "jax"

    def set_threads(self, threads: int) -> int:
        # Nothing to set at run time: the launcher's NPROC and CPU affinity sized the pool
        # before JAX loaded. Report what is in force, not what was asked for.
        return xla_cpu_threads()

    def software(self) -> dict[str, Any]:
        gpus = _gpus()
        return {
            "framework": "jax",
            "jax": jax.__version__,
            "jaxlib": jaxlib.__version__,
            "flax": flax.__version__,
            "optax": optax.__version__,
            "backend": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()],
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "xla_cpu_threads": xla_cpu_threads(),
            "gpu": gpus[0].device_kind if gpus else None,
        }

    def has_gpu(self) -> bool:
        return bool(_gpus())

    def set_precision(self, precision: str, device: str) -> dict[str, Any]:
        """fp32: jax_default_matmul_precision 'highest' (XLA's default on a GPU lets fp32
        products run in TF32); tf32: 'tensorfloat32'. bf16/fp16 are unsupported: dlperf's
        Flax networks have no mixed-precision form (it needs a dtype on every module)."""
        if precision in ("bf16", "fp16"):
            raise UnsupportedError(f"{precision} is not built for the jax backend: dlperf's "
                                   "Flax networks run fp32 (or tf32 on a GPU) only")
        if precision == "tf32" and device == "cpu":
            raise UnsupportedError(NO_TF32_ON_CPU)
        jax.config.update("jax_default_matmul_precision",
                          "tensorfloat32" if precision == "tf32" else "highest")
        self.precision = precision
        return {"jax_default_matmul_precision": jax.config.jax_default_matmul_precision}

    def build(self, workload: str, config: Any, batch_size: int, variant: str, device: str,
              seed: int) -> JaxTrainer:
        if variant != "jit":
            raise UnsupportedError(f"jax backend has no variant '{variant}'")
        dev = _device(device)
        model = build_model(config)
        with jax.default_device(dev):
            variables = init_variables(model, config, batch_size, prng_key(seed))
        x, y = synthetic_batch(config, batch_size, seed + 1)
        return JaxTrainer(model, config, variables, x, y, dev)

    def input_pipeline(self, source, batch_size: int, seed: int, device: str):
        from dlperf.backends.jax_input import build_pipeline

        return build_pipeline(source, batch_size, seed, device)

    def build_inference(self, workload: str, config: Any, batch_size: int, variant: str,
                        device: str, seed: int) -> JaxInference:
        if variant != "jit":
            raise UnsupportedError(f"jax backend has no variant '{variant}'")
        dev = _device(device)
        model = build_model(config)
        with jax.default_device(dev):
            variables = init_variables(model, config, batch_size, prng_key(seed))
        if isinstance(model, ResNet):  # the same parameter tree, evaluation-mode norms
            model = ResNet(config, train=False)
        x, _ = synthetic_batch(config, batch_size, seed + 1)
        return JaxInference(model, variables, x, dev)

    def matmul(self, n: int, device: str) -> Timed:
        return MatmulProbe(n, _device(device))

    def kernel(self, op: str, shape: tuple[int, ...], device: str) -> Timed:
        from dlperf.backends.jax_kernels import kernel

        if self.precision in MIXED:
            raise UnsupportedError(MIXED_KERNELS)
        return kernel(op, shape, _device(device))

    def profile(self, trainer: Trainer, steps: int, device: str) -> tuple[list[dict], float]:
        from dlperf.backends.jax_profile import profile

        if not isinstance(trainer, JaxTrainer):
            raise UnsupportedError("dlperf explain profiles JAX training steps only")
        return profile(trainer, steps, device)


class MatmulProbe(Timed):
    """An n x n fp32 matmul as a 'step': the peak that achieved FLOP/s is compared with."""

    def __init__(self, n: int, device: jax.Device):
        rng = np.random.default_rng(0)
        self.a, self.b = jax.device_put(
            (rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)),
            device,
        )
        # HIGHEST: full fp32 (XLA's default precision on a GPU would be TF32 or bf16)
        self._mm = jax.jit(lambda a, b: jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST))
        self._out: jax.Array | None = None
        self.batch_size = n
        self.param_count = 0
        self.n = n

    def step(self) -> None:
        self._out = self._mm(self.a, self.b)

    def sync(self) -> None:
        if self._out is not None:
            self._out.block_until_ready()

    def flops_per_step(self) -> float:
        return float(jaxpr_matmul_flops(self._mm.trace(self.a, self.b).jaxpr))


def _gpus() -> list[jax.Device]:
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


def _device(device: str) -> jax.Device:
    if device == "gpu":
        gpus = _gpus()
        if not gpus:
            raise UnsupportedError("no GPU visible to jax")
        return gpus[0]
    return jax.devices("cpu")[0]


BACKEND_CLASS = JaxBackend
