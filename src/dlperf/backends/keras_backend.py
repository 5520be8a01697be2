"""Keras 3 backend: the DLBench networks written once in Keras layers (``keras_models``),
trained with ``model.train_on_batch`` on the Keras backend that the variant names.

The variant is the Keras backend: ``torch``, ``jax`` or ``tensorflow``. Keras reads
``KERAS_BACKEND`` once, when it is imported, so the launcher sets it in the worker's
environment (``BackendInfo.thread_env``) and one process runs one Keras backend. The step
is what a Keras user gets: ``model.compile`` with plain SGD and sparse softmax
cross-entropy (fp32, Keras' default ``jit_compile="auto"``), then ``train_on_batch`` on a
batch already on the device. Its overhead over the framework's own fast path (dlperf's
torch, jax and tensorflow backends) is the cost of the Keras layer.

Threads, FLOPs and software versions come from that framework's dlperf backend, so each
is measured the same way as for the framework alone.
"""

from __future__ import annotations

import os
import random
import sys
from typing import Any

from dlperf import backends
from dlperf.core.errors import MissingExtraError

_wanted = os.environ.get("KERAS_BACKEND", "")
if "keras" not in sys.modules and _wanted in backends.BACKENDS and not backends.installed(_wanted):
    # before Keras tries to import it: name the extra that installs it
    raise MissingExtraError(_wanted, backends.info(_wanted).extra)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from dlperf.backends.base import (  # noqa: E402
    Backend,
    ForwardOnly,
    Inference,
    PeakMatmul,
    Timed,
    Trainer,
    UnsupportedError,
    capability,
    fp32_only,
)
from dlperf.backends.keras_models import (  # noqa: E402
    FlatRows,
    build_model,
    export_weights,
    import_weights,
    synthetic_batch,
    trainable_params,
)
from dlperf.workloads.dlbench import LSTMLMConfig  # noqa: E402

LEARNING_RATE = 0.01

#: the Keras backend this process loaded; it cannot change after import
ENGINE: str = keras.backend.backend()


def compile_model(model: keras.Model) -> None:
    """The compile call of a Keras user: plain SGD, mean sparse softmax cross-entropy over
    the batch (and time steps) on the logits, no metrics, Keras' default jit_compile."""
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=LEARNING_RATE),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )


class KerasTrainer(Trainer):
    def __init__(self, model: keras.Model, flat: FlatRows, x: np.ndarray, y: np.ndarray,
                 cfg: Any, device: str):
        self.model, self._flat, self._cfg, self.device = model, flat, cfg, device
        self.param_count = trainable_params(model)
        compile_model(model)
        self.set_batch(x, y, layout="keras")
        self._last_loss: float | None = None

    def step(self) -> float:
        # the device scope keeps Keras' ops on the chosen device where Keras' default
        # (a visible GPU) would differ; train_on_batch returns the loss as a Python
        # float, so when it returns the device has finished the step
        with keras.device(self.device):
            self._last_loss = self.model.train_on_batch(self.x, self.y)
        return self._last_loss

    def sync(self) -> None:
        """Nothing to wait for: ``train_on_batch`` fetched the loss of the step, which
        needs the whole step (weight updates included) to have run."""

    def loss(self) -> float:
        return float(self._last_loss) if self._last_loss is not None else float("nan")

    def flops_per_step(self) -> float | None:
        """Matmul/conv FLOPs of one step, from the counter of the framework underneath
        (see ``_torch_flops``, ``_jax_flops``, ``_tf_flops``)."""
        count = {"torch": _torch_flops, "jax": _jax_flops, "tensorflow": _tf_flops}[ENGINE]
        with keras.device(self.device):
            return count(self)

    def get_weights(self) -> dict[str, np.ndarray]:
        return export_weights(self.model, self._flat)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        import_weights(self.model, self._flat, weights)

    def set_batch(self, x: Any, y: Any, layout: str = "neutral") -> None:
        """Put a batch on the device; images come NCHW in the neutral layout, NHWC
        (Keras' channels_last) from ``synthetic_batch``."""
        x = np.asarray(x)
        if x.ndim == 4 and layout == "neutral":
            x = x.transpose(0, 2, 3, 1)
        dtype = "int32" if np.issubdtype(x.dtype, np.integer) else "float32"
        with keras.device(self.device):
            self.x = keras.ops.convert_to_tensor(np.ascontiguousarray(x), dtype=dtype)
            self.y = keras.ops.convert_to_tensor(np.asarray(y), dtype="int32")
        self.batch_size = int(x.shape[0])


class KerasInference(ForwardOnly):
    """One query as a Keras user serves it: ``predict_on_batch`` (Keras' predict step,
    ``training=False``, no gradient), which returns the output as a NumPy array, so when
    it returns the device has finished."""

    mode = "model.predict_on_batch (training=False)"

    def __init__(self, tr: KerasTrainer):
        self.model, self.x, self.device = tr.model, tr.x, tr.device
        self.batch_size, self.param_count = tr.batch_size, tr.param_count

    def step(self) -> Any:
        with keras.device(self.device):
            return self.model.predict_on_batch(self.x)

    def sync(self) -> None:
        """Nothing to wait for: the output is already on the host."""

    def grad_free(self) -> bool | None:
        """On Keras' torch backend: no variable's torch tensor holds a gradient (the
        other Keras backends keep no gradient on their variables to look at)."""
        if ENGINE != "torch":
            return None
        return all(getattr(v.value, "grad", None) is None for v in self.model.variables)


# ----------------------------------------------------------------------------- flops
def _torch_flops(tr: KerasTrainer) -> float:
    """PyTorch's FlopCounterMode over the forward pass, loss and backward pass of one
    ``train_on_batch`` step (the SGD update has no matmuls), written out with Keras'
    public calls: the counter cannot wrap a first ``train_on_batch``, which also runs
    Keras' symbolic build. oneDNN is off while counting, as in ``torch_backend._count``."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    m = tr.model
    with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as c:
        loss = m.compute_loss(tr.x, tr.y, m(tr.x, training=True))
        loss.backward()
    m.zero_grad(set_to_none=True)
    return float(c.get_total_flops())


def _jax_flops(tr: KerasTrainer) -> float | None:
    """The jaxpr of Keras' JAX ``train_step`` (what its jit compiles), traced on the
    model's state and never run, counted by ``jax_backend.jaxpr_matmul_flops``."""
    import jax

    from dlperf.backends.jax_backend import jaxpr_matmul_flops

    m = tr.model
    _build_for_tracing(tr)
    state = tuple([v.value for v in vs] for vs in (
        m.trainable_variables, m.non_trainable_variables, m.optimizer.variables,
        m.metrics_variables))
    try:
        return float(jaxpr_matmul_flops(jax.make_jaxpr(m.train_step)(state, (tr.x, tr.y))))
    except ValueError:  # matmuls in a loop without a static trip count
        return None


def _tf_flops(tr: KerasTrainer) -> float:
    """TensorFlow's graph profiler over Keras' ``train_step`` traced as a tf.function
    (never run), with ``tf_backend.profile_flops``'s adjustments. The profiler does not
    enter the LSTM's While loop, so the language model is counted on a twin with its
    LSTMs unrolled, as the tensorflow backend does."""
    import tensorflow as tf

    from dlperf.backends.tf_backend import profile_flops

    if isinstance(tr._cfg, LSTMLMConfig):
        twin, _ = build_model(tr._cfg, unroll=True)
        tr = KerasTrainer(twin, {}, keras.ops.convert_to_numpy(tr.x),
                          keras.ops.convert_to_numpy(tr.y), tr._cfg, tr.device)
    _build_for_tracing(tr)
    graph = tf.function(tr.model.train_step).get_concrete_function((tr.x, tr.y)).graph
    return float(sum(profile_flops(graph).values()))


def _build_for_tracing(tr: KerasTrainer) -> None:
    """Create the optimizer's and the loss's state, which ``train_on_batch`` creates on
    its first call, so that a traced ``train_step`` creates none."""
    tr.model.optimizer.build(tr.model.trainable_variables)


# ----------------------------------------------------------------------------- backend
class KerasBackend(Backend, Inference, PeakMatmul):
    """Threads, devices and versions are the framework's own: its dlperf backend is asked."""

    name = "keras"

    def __init__(self) -> None:
        self._engine = backends.load(ENGINE)

    def set_threads(self, threads: int) -> int:
        return self._engine.set_threads(threads)

    def software(self) -> dict[str, Any]:
        return {**self._engine.software(), "framework": "keras", "keras": keras.__version__,
                "keras_backend": ENGINE}

    def has_gpu(self) -> bool:
        return self._engine.has_gpu()

    def set_precision(self, precision: str, device: str) -> dict[str, Any]:
        return fp32_only(self, precision)

    def build(self, workload: str, config: Any, batch_size: int, variant: str, device: str,
              seed: int) -> KerasTrainer:
        if variant != ENGINE:
            raise UnsupportedError(
                f"Keras was loaded with the '{ENGINE}' backend, not '{variant}' (it reads "
                "KERAS_BACKEND once, at import)"
            )
        if device == "gpu" and not self.has_gpu():
            raise UnsupportedError(f"no GPU visible to Keras' {ENGINE} backend")
        dev = "gpu" if device == "gpu" else "cpu"  # not "cpu:0": Keras 3.15 on torch then builds variables that get no gradients
        # Keras draws the seed of every unseeded initializer from Python's ``random``.
        # keras.utils.set_random_seed would seed it too, but it also imports TensorFlow
        # whenever that is installed, under any Keras backend: seconds and hundreds of MB
        # that are not the network's.
        random.seed(seed)
        with keras.device(dev):
            model, flat = build_model(config)
        x, y = synthetic_batch(config, batch_size, seed + 1)
        return KerasTrainer(model, flat, x, y, config, dev)

    def build_inference(self, workload: str, config: Any, batch_size: int, variant: str,
                        device: str, seed: int) -> KerasInference:
        return KerasInference(self.build(workload, config, batch_size, variant, device, seed))

    def matmul(self, n: int, device: str) -> Timed:
        """The framework's own matmul probe (Keras adds nothing to one product)."""
        return capability(self._engine, PeakMatmul).matmul(n, device)


BACKEND_CLASS = KerasBackend
