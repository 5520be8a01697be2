"""MXNet backend: Gluon blocks, ``hybridize()``d into one cached symbolic graph ('hybrid'),
or run op by op ('imperative'); plain SGD through ``gluon.Trainer``, fp32, on the CPU.

MXNet 1.9.1 (its last release) needs numpy<1.24, so this module runs in an environment of
its own (``dlperf setup mxnet``; see ``dlperf.core.separate_envs``): everything it imports must work on
that environment's Python 3.11 and numpy 1.23.

Networks are built from the framework-neutral configs of ``dlperf.workloads`` and mirror
``torch_backend`` layer for layer: the same shapes, initial distributions, loss (mean
softmax cross-entropy) and SGD at the same learning rate. MXNet's layout is NCHW and its
dense weights are (out, in), as PyTorch's; ``get_weights``/``set_weights`` convert to the
neutral layout. MXNet has no FLOP counter: ``flops_per_step`` is the neutral definition's.

Threads: MXNet's engine runs CPU operators on ``MXNET_CPU_WORKER_NTHREADS`` threads (one,
as the other backends run one inter-op thread); each operator computes with an OpenMP
team, sized from ``OMP_NUM_THREADS`` (oneDNN's kernels) and ``MXNET_OMP_MAX_THREADS``
(MXNet's own), read when the library loads. The launcher sets all of them
(``BackendInfo.thread_env``); ``set_threads`` can only report what is in force, which it
measures (``omp_threads_in_force``).
"""

from __future__ import annotations

import math
import os
import platform
import threading
import time
from collections.abc import Callable
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd
from mxnet.gluon import nn, rnn

from dlperf.backends.base import Backend, Trainer, UnsupportedError, fp32_only
from dlperf.workloads.dlbench import AlexNetConfig, FCNConfig, LSTMLMConfig, ResNetConfig

LEARNING_RATE = 0.01
BN_EPSILON = 1e-5  # PyTorch's default (Gluon's is 1e-5 too)
BN_MOMENTUM = 0.9  # running = 0.9 * running + 0.1 * batch: PyTorch's momentum=0.1

#: One neutral weight: (neutral name, Gluon parameter, to-neutral, from-neutral).
Entry = tuple[str, gluon.Parameter, Callable[[np.ndarray], np.ndarray] | None,
              Callable[[np.ndarray], np.ndarray] | None]


def _t(a: np.ndarray) -> np.ndarray:
    return a.T


def _oihw_to_hwio(a: np.ndarray) -> np.ndarray:
    return a.transpose(2, 3, 1, 0)


def _hwio_to_oihw(a: np.ndarray) -> np.ndarray:
    return a.transpose(3, 2, 0, 1)


def _uniform_fan_in(fan_in: int) -> mx.init.Initializer:
    """U(-1/sqrt(fan_in), +1/sqrt(fan_in)) as in every framework's backend; biases are zeros."""
    return mx.init.Uniform(1.0 / math.sqrt(fan_in))


# ----------------------------------------------------------------------------- models
class _Layers:
    """Builds Gluon layers and records, as it goes, the neutral name and layout of each
    trainable parameter (so no mapping depends on Gluon's generated parameter names)."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    def dense(self, n_in: int, n_out: int, name: str, activation: str | None = None,
              flatten: bool = True) -> nn.Dense:
        d = nn.Dense(n_out, activation=activation, in_units=n_in, flatten=flatten,
                     weight_initializer=_uniform_fan_in(n_in), bias_initializer="zeros",
                     prefix=f"{name}_")
        self.entries += [(f"{name}.w", d.weight, _t, _t), (f"{name}.b", d.bias, None, None)]
        return d

    def conv(self, c_in: int, c_out: int, k: int, stride: int, pad: int, name: str,
             activation: str | None = None, bias: bool = True) -> nn.Conv2D:
        c = nn.Conv2D(c_out, k, stride, pad, in_channels=c_in, activation=activation,
                      use_bias=bias, weight_initializer=_uniform_fan_in(k * k * c_in),
                      bias_initializer="zeros", prefix=f"{name}_")
        self.entries.append((f"{name}.w", c.weight, _oihw_to_hwio, _hwio_to_oihw))
        if bias:
            self.entries.append((f"{name}.b", c.bias, None, None))
        return c

    def bn(self, channels: int, name: str) -> nn.BatchNorm:
        b = nn.BatchNorm(momentum=BN_MOMENTUM, epsilon=BN_EPSILON, in_channels=channels,
                         prefix=f"{name}_")
        self.entries += [(f"{name}.gamma", b.gamma, None, None),
                         (f"{name}.beta", b.beta, None, None)]
        return b


def build_fcn(cfg: FCNConfig, L: _Layers) -> gluon.HybridBlock:
    net = nn.HybridSequential(prefix="fcn_")
    widths = (cfg.inputs, *cfg.hidden, cfg.classes)
    with net.name_scope():
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
            act = cfg.activation if i < len(widths) - 2 else None
            net.add(L.dense(a, b, f"fc{i + 1}", act))
    return net


def build_alexnet(cfg: AlexNetConfig, L: _Layers) -> gluon.HybridBlock:
    net = nn.HybridSequential(prefix="alexnet_")
    c_in = cfg.channels_in
    with net.name_scope():
        for i, c in enumerate(cfg.convs, start=1):
            net.add(L.conv(c_in, c.out, c.kernel, c.stride, c.pad, f"conv{i}", "relu"))
            if c.pool_after:
                net.add(nn.MaxPool2D(3, 2, 1))
            c_in = c.out
        side = cfg.feature_side()
        net.add(nn.Flatten())  # (C, H, W) order: the neutral order
        widths = (c_in * side * side, *cfg.fc, cfg.classes)
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
            net.add(L.dense(a, b, f"fc{i + 1}", "relu" if i < len(widths) - 2 else None))
    return net


class Bottleneck(gluon.HybridBlock):
    """torchvision's v1.5 bottleneck: the stride on the 3x3 convolution."""

    def __init__(self, L: _Layers, c_in: int, width: int, c_out: int, stride: int, name: str):
        super().__init__(prefix=f"{name}_")
        with self.name_scope():
            self.c1 = L.conv(c_in, width, 1, 1, 0, f"{name}_c1", bias=False)
            self.bn1 = L.bn(width, f"{name}_bn1")
            self.c2 = L.conv(width, width, 3, stride, 1, f"{name}_c2", bias=False)
            self.bn2 = L.bn(width, f"{name}_bn2")
            self.c3 = L.conv(width, c_out, 1, 1, 0, f"{name}_c3", bias=False)
            self.bn3 = L.bn(c_out, f"{name}_bn3")
            self.proj = self.proj_bn = None
            if stride != 1 or c_in != c_out:
                self.proj = L.conv(c_in, c_out, 1, stride, 0, f"{name}_proj", bias=False)
                self.proj_bn = L.bn(c_out, f"{name}_proj_bn")

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        y = F.relu(self.bn1(self.c1(x)))
        y = F.relu(self.bn2(self.c2(y)))
        y = self.bn3(self.c3(y))
        return F.relu(y + (x if self.proj is None else self.proj_bn(self.proj(x))))


def build_resnet(cfg: ResNetConfig, L: _Layers) -> gluon.HybridBlock:
    net = nn.HybridSequential(prefix="resnet_")
    with net.name_scope():
        net.add(L.conv(cfg.channels_in, cfg.stem, 7, 2, 3, "stem", bias=False),
                L.bn(cfg.stem, "stem_bn"), nn.Activation("relu"), nn.MaxPool2D(3, 2, 1))
        c_in = cfg.stem
        for s, (width, blocks, stride) in enumerate(cfg.stages, start=1):
            for b in range(1, blocks + 1):
                c_out = width * cfg.expansion
                net.add(Bottleneck(L, c_in, width, c_out, stride if b == 1 else 1, f"s{s}b{b}"))
                c_in = c_out
        net.add(nn.GlobalAvgPool2D(), nn.Flatten(), L.dense(c_in, cfg.classes, "fc"))
    return net


class LSTMLanguageModel(gluon.HybridBlock):
    """Embedding -> stacked LSTM (MXNet's fused RNN operator) -> vocabulary projection at
    every step. Like PyTorch's, MXNet's LSTM has an input and a hidden bias per gate; the
    neutral definition has one, so the hidden bias stays zero and is not trained
    (``grad_req='null'``). Gate order i, f, g, o, as the neutral layout."""

    def __init__(self, cfg: LSTMLMConfig, L: _Layers):
        super().__init__(prefix="lstm_lm_")
        bound = 1.0 / math.sqrt(cfg.hidden)
        with self.name_scope():
            self.embedding = nn.Embedding(cfg.vocab, cfg.embed, prefix="embedding_",
                                          weight_initializer=mx.init.Uniform(0.1))
            self.lstm = rnn.LSTM(cfg.hidden, cfg.layers_n, layout="NTC", input_size=cfg.embed,
                                 i2h_weight_initializer=mx.init.Uniform(bound),
                                 h2h_weight_initializer=mx.init.Uniform(bound),
                                 i2h_bias_initializer="zeros", h2h_bias_initializer="zeros",
                                 prefix="lstm_")
            self.softmax_proj = L.dense(cfg.hidden, cfg.vocab, "softmax_proj", flatten=False)
        L.entries.append(("embedding.w", self.embedding.weight, None, None))
        for k in range(cfg.layers_n):
            p = lambda s, k=k: getattr(self.lstm, f"l{k}_{s}")  # noqa: E731
            L.entries += [(f"lstm{k + 1}.wx", p("i2h_weight"), _t, _t),
                          (f"lstm{k + 1}.wh", p("h2h_weight"), _t, _t),
                          (f"lstm{k + 1}.b", p("i2h_bias"), None, None)]
            p("h2h_bias").grad_req = "null"

    def hybrid_forward(self, F: Any, tokens: Any) -> Any:
        return self.softmax_proj(self.lstm(self.embedding(tokens)))  # (B, T, V)


BUILDERS: dict[type, Callable[[Any, _Layers], gluon.HybridBlock]] = {
    FCNConfig: build_fcn,
    AlexNetConfig: build_alexnet,
    ResNetConfig: build_resnet,
    LSTMLMConfig: LSTMLanguageModel,
}


def build_model(cfg: Any, seed: int = 0,
                initialize: bool = True) -> tuple[gluon.HybridBlock, list[Entry]]:
    """The network on the CPU and its neutral weight entries. Every shape is given, so
    ``initialize`` allocates at once; without it the network holds shapes only (enough
    to count its parameters)."""
    try:
        builder = BUILDERS[type(cfg)]
    except KeyError:
        raise UnsupportedError(f"mxnet backend cannot build {type(cfg).__name__}") from None
    mx.random.seed(seed)
    layers = _Layers()
    net = builder(cfg, layers)
    if initialize:
        net.initialize(ctx=mx.cpu())
    return net, layers.entries


class MeanXent(gluon.HybridBlock):
    """The network and its loss, the mean softmax cross-entropy over the batch (and the
    time steps), as one block: hybridized, forward and loss are one cached graph."""

    def __init__(self, net: gluon.HybridBlock):
        super().__init__(prefix="")
        self.net = net

    def hybrid_forward(self, F: Any, x: Any, y: Any) -> Any:
        logp = F.log_softmax(self.net(x), axis=-1)
        return -F.mean(F.pick(logp, y, axis=-1))


def synthetic_batch(cfg: Any, batch: int, seed: int) -> tuple[nd.NDArray, nd.NDArray]:
    """Inputs (images NCHW) and targets, generated by MXNet. Targets and tokens are float32:
    MXNet's ``pick`` and ``Embedding`` take float indices (exact below 2**24)."""
    mx.random.seed(seed)
    if isinstance(cfg, LSTMLMConfig):
        shape = (batch, cfg.seq_len)
        x = nd.random.randint(0, cfg.vocab, shape).astype("float32")
        y = nd.random.randint(0, cfg.vocab, shape).astype("float32")
        return x, y
    x = nd.random.normal(shape=(batch, *cfg.input_shape()))
    y = nd.random.randint(0, cfg.classes, (batch,)).astype("float32")
    return x, y


def trainable_params(net: gluon.Block) -> int:
    return sum(math.prod(p.shape) for p in net.collect_params().values() if p.grad_req != "null")


# ----------------------------------------------------------------------------- trainer
class MXNetTrainer(Trainer):
    def __init__(self, net: gluon.HybridBlock, entries: list[Entry], x: nd.NDArray,
                 y: nd.NDArray, cfg: Any, variant: str):
        self.net, self._entries, self._cfg = net, entries, cfg
        self.x, self.y = x, y
        self.batch_size = int(x.shape[0])
        self.param_count = trainable_params(net)
        self._loss_net = MeanXent(net)
        if variant == "hybrid":
            # static_alloc/static_shape: the graph's buffers are planned once and reused
            self._loss_net.hybridize(static_alloc=True, static_shape=True)
        # one CPU context: no kvstore, the update runs in this process (parameters whose
        # grad_req is 'null', the LSTM's hidden biases, are skipped)
        self.opt = gluon.Trainer(net.collect_params(), "sgd",
                                 {"learning_rate": LEARNING_RATE}, kvstore=None)
        self._last_loss: nd.NDArray | None = None

    def step(self) -> nd.NDArray:
        with autograd.record():
            loss = self._loss_net(self.x, self.y)
        loss.backward()
        self.opt.step(1)  # the loss is a mean already: no rescaling by the batch size
        self._last_loss = loss
        return loss

    def sync(self) -> None:
        # MXNet's engine runs pushed operators asynchronously; wait for all of them,
        # the parameter updates included
        nd.waitall()

    def loss(self) -> float:
        return float(self._last_loss.asscalar()) if self._last_loss is not None else float("nan")

    def flops_per_step(self) -> float:
        """Matmul/conv FLOPs of one step from the neutral definition
        (``dlperf.workloads``), not counted: MXNet has no FLOP counter."""
        return float(self.batch_size * sum(layer.train_flops() for layer in self._cfg.layers()))

    def get_weights(self) -> dict[str, np.ndarray]:
        return {name: np.array(to(p.data().asnumpy()) if to else p.data().asnumpy(),
                               dtype=np.float32, copy=True)
                for name, p, to, _ in self._entries}

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        missing = {n for n, *_ in self._entries} - set(weights)
        if missing:
            raise KeyError(f"weights missing: {sorted(missing)[:5]}")
        for name, p, _, back in self._entries:
            a = np.asarray(weights[name], dtype=np.float32)
            p.set_data(nd.array((back(a) if back else a).reshape(p.shape)))

    def set_batch(self, x: Any, y: Any) -> None:
        """Numpy arrays in the neutral layout (NCHW is MXNet's own)."""
        self.x = nd.array(np.asarray(x), dtype="float32")
        self.y = nd.array(np.asarray(y), dtype="float32")
        self.batch_size = int(self.x.shape[0])


# ----------------------------------------------------------------------------- threads
def _thread_cpu_ticks() -> dict[int, int]:
    """User + system CPU time of each thread of this process, in clock ticks."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after the command name
            out[int(tid)] = int(fields[11]) + int(fields[12])  # stat fields 14, 15
        except (OSError, IndexError, ValueError):  # the thread has exited
            pass
    return out


def omp_threads_in_force(busiest_s: float = 0.2, max_s: float = 3.0) -> int:
    """How many threads MXNet really computes an operator with, measured.

    MXNet has no call that reports its OpenMP team size (its engine threads set it from
    the environment when they start), so this runs a fully connected layer (a oneDNN
    kernel, as in the networks) until the busiest thread has used ``busiest_s`` of CPU
    time (at most ``max_s`` of wall time, on a crowded machine) and counts the threads
    that did a share of the work: at least a quarter of the busiest one's CPU time. The
    caller's own thread, which only queues the operators and waits, is not counted.
    """
    x = nd.random.normal(shape=(256, 1024))
    w = nd.random.normal(shape=(1024, 1024))
    nd.FullyConnected(x, w, no_bias=True, num_hidden=1024).wait_to_read()  # teams start
    enough = busiest_s * os.sysconf("SC_CLK_TCK")
    me = threading.get_native_id()
    before = _thread_cpu_ticks()
    t0 = time.perf_counter()
    while True:
        for _ in range(4):
            out = nd.FullyConnected(x, w, no_bias=True, num_hidden=1024)
        out.wait_to_read()
        after = _thread_cpu_ticks()
        busy = [after[t] - before.get(t, 0) for t in after if t != me]
        top = max(busy, default=0)
        if top >= enough or time.perf_counter() - t0 > max_s:
            return max(1, sum(b >= max(1, top / 4) for b in busy))


class MXNetBackend(Backend):
    name = "mxnet"

    def __init__(self) -> None:
        self._omp_threads: int | None = None

    def set_threads(self, threads: int) -> int:
        # Nothing to set at run time: the launcher's environment sized MXNet's thread
        # pools when it loaded. Report what is in force, not what was asked for.
        if self._omp_threads is None:
            self._omp_threads = omp_threads_in_force()
        return self._omp_threads

    def software(self) -> dict[str, Any]:
        features = mx.runtime.Features()
        return {
            "framework": "mxnet",
            "mxnet": mx.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "mkldnn": features.is_enabled("MKLDNN"),
            "blas": next((lib for flag, lib in (("BLAS_OPEN", "openblas"), ("BLAS_MKL", "mkl"),
                                                ("BLAS_ATLAS", "atlas"), ("BLAS_APPLE", "apple"))
                          if features.is_enabled(flag)), "unknown"),
            "openmp": features.is_enabled("OPENMP"),
            "cpu_worker_threads": os.environ.get("MXNET_CPU_WORKER_NTHREADS", "1"),
            "omp_threads": self._omp_threads,
            "flops": "neutral definition (MXNet has no FLOP counter)",
            "cuda": features.is_enabled("CUDA"),
            "gpu": None,
        }

    def has_gpu(self) -> bool:
        return mx.runtime.Features().is_enabled("CUDA") and mx.context.num_gpus() > 0

    def set_precision(self, precision: str, device: str) -> dict[str, Any]:
        return fp32_only(self, precision)

    def build(self, workload: str, config: Any, batch_size: int, variant: str, device: str,
              seed: int) -> MXNetTrainer:
        if variant not in ("hybrid", "imperative"):
            raise UnsupportedError(f"mxnet backend has no variant '{variant}'")
        if device == "gpu":
            raise UnsupportedError("dlperf's MXNet environment is the CPU build of mxnet 1.9.1")
        net, entries = build_model(config, seed)
        x, y = synthetic_batch(config, batch_size, seed + 1)
        return MXNetTrainer(net, entries, x, y, config, variant)


BACKEND_CLASS = MXNetBackend
