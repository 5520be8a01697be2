"""TensorFlow 2 backend: Keras 3 layers, the training step under tf.function ('graph'), and
under tf.function(jit_compile=True) ('xla').

Networks are built from the framework-neutral configs of ``dlperf.workloads`` and mirror
``torch_backend`` layer for layer: the same shapes (explicit symmetric padding where
TensorFlow's 'SAME' would pad asymmetrically), the same initialisation, the same loss and
plain SGD. Images live in NHWC inside TensorFlow; the neutral exchange layout is NCHW.
FLOPs come from TensorFlow's graph profiler (``tf.compat.v1.profiler``), see
``TFTrainer.flops_per_step``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

if "keras" not in sys.modules:
    # Keras 3 picks its backend at import; this module needs the TensorFlow one.
    os.environ["KERAS_BACKEND"] = "tensorflow"

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.util import deprecation

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
from dlperf.backends.keras_models import (
    build_model,
    export_weights,
    import_weights,
    trainable_params,
)
from dlperf.workloads.dlbench import LSTMLMConfig

LEARNING_RATE = 0.01

#: Keras mixed-precision policies: fp32 weights, bf16/fp16 compute
POLICIES = {"fp32": "float32", "tf32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}

#: op types whose FLOPs are matrix products or convolutions: what the analytic count counts
MATMUL_CONV_OPS = frozenset({
    "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3",
    "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter",
})


# ----------------------------------------------------------------------------- models
# The networks are the Keras models of ``keras_models`` (written once for every Keras
# backend), on Keras' TensorFlow backend; only the synthetic batch is TensorFlow's own,
# generated on the device.
def synthetic_batch(cfg: Any, batch: int, seed: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Inputs (images NHWC) and integer targets, generated on the current device."""
    gen = tf.random.Generator.from_seed(seed)
    if isinstance(cfg, LSTMLMConfig):
        shape = (batch, cfg.seq_len)
        x = gen.uniform(shape, 0, cfg.vocab, dtype=tf.int32)
        y = gen.uniform(shape, 0, cfg.vocab, dtype=tf.int32)
        return x, y
    c, *spatial = cfg.input_shape()
    shape = (batch, *spatial, c) if spatial else (batch, c)
    x = gen.normal(shape, dtype=tf.float32)
    y = gen.uniform((batch,), 0, cfg.classes, dtype=tf.int32)
    return x, y


# ----------------------------------------------------------------------------- flops
def _reachable_ops(graph: tf.Graph) -> set[str]:
    """Names of the ops a call of the function runs: those its outputs and its side effects
    (the variable updates) depend on. TensorFlow prunes the rest when it instantiates the
    function, e.g. the input gradient the Conv2D gradient builds for the first layer."""
    targets = [t.op for t in graph.outputs] + list(getattr(graph, "control_outputs", []))
    seen: set[str] = set()
    stack = list(targets)
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen


def _conv_backprop_flops(op: tf.Operation) -> int:
    """Exact FLOPs of a Conv2DBackpropInput/Filter op: 2 x (elements of the gradient it
    propagates, one per output position and filter) x (kernel height x width x input
    channels), the formula TensorFlow's Conv2D statistic uses for the forward product."""
    out_grad = op.inputs[2].shape
    kernel = op.inputs[1].shape if op.type == "Conv2DBackpropInput" else op.outputs[0].shape
    return 2 * out_grad.num_elements() * kernel[0] * kernel[1] * kernel[2]


def profile_flops(graph: tf.Graph) -> dict[str, int]:
    """Matmul/conv FLOPs per op type over the ops a call of ``graph`` runs, as TensorFlow's
    profiler counts them; see ``TFTrainer.flops_per_step`` for the adjustments."""
    opts = (
        tf.compat.v1.profiler.ProfileOptionBuilder(
            tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
        )
        .with_empty_output()
        .build()
    )
    with deprecation.silence():  # the v1 API's notice; the profiler has no v2 graph API
        root = tf.compat.v1.profiler.profile(graph, cmd="scope", options=opts)
    live = _reachable_ops(graph)
    by_type: dict[str, int] = {}
    stack = list(root.children)
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if not node.float_ops or node.name not in live:
            continue
        op = graph.get_operation_by_name(node.name)
        if op.type not in MATMUL_CONV_OPS:
            continue
        flops = int(node.float_ops)
        if op.type in ("Conv2DBackpropInput", "Conv2DBackpropFilter"):
            flops = _conv_backprop_flops(op)
        by_type[op.type] = by_type.get(op.type, 0) + flops
    return by_type


# ----------------------------------------------------------------------------- trainer
def _xent(logits: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    """Mean softmax cross-entropy over the batch (and time steps), in fp32 whatever the
    compute dtype (the mixed-precision guide's advice for the softmax)."""
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=tf.cast(logits, tf.float32))
    )


def make_train_step(model: keras.Model, opt: keras.optimizers.Optimizer, jit: bool) -> Any:
    """One forward + backward + SGD update as a tf.function (XLA-compiled if ``jit``).
    The gradient is taken of ``opt.scale_loss(loss)``: the loss itself, except under a
    LossScaleOptimizer (fp16), whose apply_gradients unscales it again."""
    variables = model.trainable_variables

    def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = _xent(model(x, training=True), y)
            scaled = opt.scale_loss(loss)  # inside the tape, which must record the scaling
        grads = tape.gradient(scaled, variables)
        opt.apply_gradients(zip(grads, variables, strict=True))
        return loss

    return tf.function(train_step, jit_compile=jit)


class TFTrainer(PipelineTrainer):
    def __init__(self, model: keras.Model, flat: dict[str, tuple[int, int, int]],
                 x: tf.Tensor, y: tf.Tensor, cfg: Any, variant: str, device: str):
        self.model, self._flat, self._cfg = model, flat, cfg
        self.x, self.y = x, y
        self.device = device
        self.batch_size = int(x.shape[0])
        self.param_count = trainable_params(model)
        self.opt = keras.optimizers.SGD(learning_rate=LEARNING_RATE)
        if keras.mixed_precision.global_policy().name == "mixed_float16":
            self.opt = keras.mixed_precision.LossScaleOptimizer(self.opt)
        self.opt.build(model.trainable_variables)  # its state exists before tracing
        self._jit = variant == "xla"
        self._step = make_train_step(model, self.opt, self._jit)
        self._last_loss: tf.Tensor | None = None

    def step(self) -> tf.Tensor:
        self._last_loss = self._step(self.x, self.y)
        return self._last_loss

    def sync(self) -> None:
        # Fetching the loss waits for the step that produced it.
        if self._last_loss is not None:
            self._last_loss.numpy()

    def loss(self) -> float:
        return float(self._last_loss) if self._last_loss is not None else float("nan")

    def flops_per_step(self) -> float | None:
        """Matmul/conv FLOPs of one step, from TensorFlow's graph profiler.

        ``tf.compat.v1.profiler.profile`` (``float_operation()`` options) reads the traced
        graph of the training step and applies each op type's registered FLOP statistic.
        Three adjustments make its count comparable with dlperf's convention:

        - only MatMul/BatchMatMul*/Conv2D/Conv2DBackprop* ops are summed: the profiler
          also counts elementwise ops (BiasAdd, activation gradients, the SGD update's Mul,
          softmax, batch-norm arithmetic, ...) at about one FLOP per element;
        - only ops a call really runs are summed: TensorFlow's Conv2D gradient always
          builds the input gradient, which for the first layer feeds nothing and is
          pruned when the function is instantiated, but stays in the traced graph;
        - the profiler's Conv2DBackpropInput/Filter statistic estimates the output
          positions as input positions / stride^2, which overcounts where the input is
          padded explicitly (ZeroPadding2D + 'valid'): conv1 of AlexNet, the ResNet stem,
          strided 3x3 convolutions. Those two op types are recomputed from the op's own
          shapes with the formula of TensorFlow's Conv2D statistic (see
          ``_conv_backprop_flops``). MatMul and Conv2D counts are the profiler's as is.

        The LSTM layers loop with a ``While`` op, whose body the profiler does not enter;
        for the language model the count is taken on the same step traced (never run)
        with the LSTMs unrolled: the same matrix products, one set per time step.
        """
        if isinstance(self._cfg, LSTMLMConfig):
            twin, _ = build_model(self._cfg, unroll=True)
            opt = keras.optimizers.SGD(learning_rate=LEARNING_RATE)
            opt.build(twin.trainable_variables)
            fn = make_train_step(twin, opt, False)
        else:
            fn = self._step
        graph = fn.get_concrete_function(self.x, self.y).graph
        return float(sum(profile_flops(graph).values()))

    def get_weights(self) -> dict[str, np.ndarray]:
        return export_weights(self.model, self._flat)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        import_weights(self.model, self._flat, weights)

    def set_batch(self, x: Any, y: Any) -> None:
        x = np.asarray(x)
        if x.ndim == 4:  # neutral NCHW -> NHWC
            x = x.transpose(0, 2, 3, 1)
        with tf.device(self.device):
            dtype = tf.int32 if np.issubdtype(x.dtype, np.integer) else tf.float32
            self.x = tf.identity(tf.constant(np.ascontiguousarray(x), dtype=dtype))
            self.y = tf.identity(tf.constant(np.asarray(y), dtype=tf.int32))
        self.batch_size = int(self.x.shape[0])

    def train_on(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        # tf.data's tensors straight into the tf.function (traced once for their shapes)
        self._last_loss = self._step(x, y)
        return self._last_loss

    def device_peak_bytes(self) -> int | None:
        if self.device.startswith("/GPU"):
            return int(tf.config.experimental.get_memory_info(self.device[1:])["peak"])
        return None


class TFInference(ForwardOnly):
    """One forward pass: ``model(x, training=False)`` (batch normalisation on its moving
    averages) in a tf.function, XLA-compiled for the 'xla' variant; no GradientTape, so
    TensorFlow records no gradient."""

    mode = "model(x, training=False) in a tf.function"

    def __init__(self, model: keras.Model, x: tf.Tensor, variant: str, device: str):
        self.model, self.x, self.device = model, x, device
        self.batch_size = int(x.shape[0])
        self.param_count = trainable_params(model)
        self._fn = tf.function(lambda x: model(x, training=False),
                               jit_compile=variant == "xla")
        self._out: tf.Tensor | None = None

    def step(self) -> tf.Tensor:
        self._out = self._fn(self.x)
        return self._out

    def sync(self) -> None:
        # fetching one element waits for the call that produced the output
        if self._out is not None:
            tf.reshape(self._out, [-1])[0].numpy()

    def grad_free(self) -> bool:
        """The traced call holds no gradient op."""
        graph = self._fn.get_concrete_function(self.x).graph
        return not any("Grad" in op.type for op in graph.get_operations())


class TensorFlowBackend(Backend, Inference, InputPipelines, PeakMatmul, CalibrationKernels,
                        Profiling):
    name = "tensorflow"

    def set_threads(self, threads: int) -> int:
        """Size TensorFlow's pools (one inter-op thread, as the other backends) and read
        the intra-op count back; 0 there means TensorFlow's own default."""
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:  # the runtime has started: the pools are fixed now
            pass
        n = tf.config.threading.get_intra_op_parallelism_threads()
        return n or _default_intra_threads()

    def software(self) -> dict[str, Any]:
        gpus = tf.config.list_physical_devices("GPU")
        gpu_name = None
        if gpus:
            details = tf.config.experimental.get_device_details(gpus[0])
            gpu_name = details.get("device_name", gpus[0].name)
        build = tf.sysconfig.get_build_info()
        return {
            "framework": "tensorflow",
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "keras_backend": keras.backend.backend(),
            "onednn": _onednn_enabled(),
            "xla": _xla_built(),
            "cuda": build.get("cuda_version"),
            "devices": [d.name for d in tf.config.list_physical_devices()],
            "gpu": gpu_name,
        }

    def has_gpu(self) -> bool:
        return bool(tf.config.list_physical_devices("GPU"))

    def set_precision(self, precision: str, device: str) -> dict[str, Any]:
        """fp32: TensorFloat-32 execution off (TensorFlow turns it on by default on Ampere
        and later GPUs); tf32: on. bf16/fp16: the Keras mixed-precision policy
        (mixed_bfloat16, mixed_float16: fp32 weights, reduced-precision compute), fp16 with
        a LossScaleOptimizer; TF32 off. The CPU has no TF32."""
        if precision == "tf32" and device == "cpu":
            raise UnsupportedError(NO_TF32_ON_CPU)
        tf.config.experimental.enable_tensor_float_32_execution(precision == "tf32")
        keras.mixed_precision.set_global_policy(POLICIES[precision])
        self.precision = precision
        return {
            "tensor_float_32_execution":
                tf.config.experimental.tensor_float_32_execution_enabled(),
            "keras_policy": keras.mixed_precision.global_policy().name,
            "loss_scale": precision == "fp16",
        }

    def build(self, workload: str, config: Any, batch_size: int, variant: str, device: str,
              seed: int) -> TFTrainer:
        if variant not in ("graph", "xla"):
            raise UnsupportedError(f"tensorflow backend has no variant '{variant}'")
        if device == "gpu" and not self.has_gpu():
            raise UnsupportedError("no GPU visible to TensorFlow")
        if keras.backend.backend() != "tensorflow":
            raise UnsupportedError(
                f"Keras was loaded with the '{keras.backend.backend()}' backend"
            )
        dev = "/GPU:0" if device == "gpu" else "/CPU:0"
        keras.utils.set_random_seed(seed)
        with tf.device(dev):
            model, flat = build_model(config)
            x, y = synthetic_batch(config, batch_size, seed + 1)
        return TFTrainer(model, flat, x, y, config, variant, dev)

    def input_pipeline(self, source, batch_size: int, seed: int, device: str):
        from dlperf.backends.tf_input import build_pipeline

        return build_pipeline(source, batch_size, seed, device)

    def build_inference(self, workload: str, config: Any, batch_size: int, variant: str,
                        device: str, seed: int) -> TFInference:
        tr = self.build(workload, config, batch_size, variant, device, seed)
        return TFInference(tr.model, tr.x, variant, tr.device)

    def matmul(self, n: int, device: str) -> Timed:
        if device == "gpu" and not self.has_gpu():
            raise UnsupportedError("no GPU visible to TensorFlow")
        return MatmulProbe(n, "/GPU:0" if device == "gpu" else "/CPU:0")

    def kernel(self, op: str, shape: tuple[int, ...], device: str) -> Timed:
        from dlperf.backends.tf_kernels import kernel

        if self.precision in MIXED:
            raise UnsupportedError(MIXED_KERNELS)
        if device == "gpu" and not self.has_gpu():
            raise UnsupportedError("no GPU visible to TensorFlow")
        return kernel(op, shape, "/GPU:0" if device == "gpu" else "/CPU:0")

    def profile(self, trainer: Trainer, steps: int, device: str) -> tuple[list[dict], float]:
        from dlperf.backends.tf_profile import profile

        if not isinstance(trainer, TFTrainer):
            raise UnsupportedError("dlperf explain profiles TensorFlow training steps only")
        return profile(trainer, steps, device)


class MatmulProbe(Timed):
    """An n x n fp32 matmul as a 'step': the peak that achieved FLOP/s is compared with."""

    def __init__(self, n: int, device: str):
        self.device = device
        # an fp32 peak: TensorFlow would run fp32 matmuls as TF32 on a recent GPU
        tf.config.experimental.enable_tensor_float_32_execution(False)
        with tf.device(device):
            gen = tf.random.Generator.from_seed(0)
            self.a = gen.normal((n, n))
            self.b = gen.normal((n, n))
        self._mm = tf.function(tf.linalg.matmul)
        self._out: tf.Tensor | None = None
        self.batch_size = n
        self.param_count = 0
        self.n = n

    def step(self) -> None:
        self._out = self._mm(self.a, self.b)

    def sync(self) -> None:
        if self._out is not None:
            self._out[0, 0].numpy()

    def flops_per_step(self) -> float:
        return 2.0 * self.n**3


def _default_intra_threads() -> int:
    """What TensorFlow uses when no count was configured: $TF_NUM_INTRAOP_THREADS, else
    the CPUs this process may run on."""
    env = os.environ.get("TF_NUM_INTRAOP_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0))


def _onednn_enabled() -> bool:
    try:
        from tensorflow.python.util import _pywrap_util_port

        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0"


def _xla_built() -> bool:
    try:
        from tensorflow.python.util import _pywrap_util_port

        return bool(_pywrap_util_port.IsBuiltWithXLA())
    except (ImportError, AttributeError):
        return False


BACKEND_CLASS = TensorFlowBackend
