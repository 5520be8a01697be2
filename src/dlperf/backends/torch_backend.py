"""PyTorch backend: eager mode, and torch.compile as the 'compile' variant.

Networks are built from the framework-neutral configs of ``dlperf.workloads``; the
initialisation is the same in every framework (weights U(-1/sqrt(fan_in), +1/sqrt(fan_in)),
biases 0), so that every framework starts from the same distribution. FLOPs come from ``torch.utils.flop_counter.FlopCounterMode``.
"""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from dlperf.backends.base import (
    NO_TF32_ON_CPU,
    AllReduce,
    Backend,
    CalibrationKernels,
    ForwardOnly,
    Inference,
    InputPipelines,
    PeakConv,
    PeakMatmul,
    PipelineTrainer,
    Profiling,
    Timed,
    Trainer,
    UnsupportedError,
    WorkerRuntime,
    conv_probe_flops,
    conv_probe_shape,
)
from dlperf.backends.torch_amp import AUTOCAST, autocast_context
from dlperf.backends.torch_transformer import GPT
from dlperf.workloads.dlbench import AlexNetConfig, FCNConfig, LSTMLMConfig, ResNetConfig
from dlperf.workloads.transformer import TransformerConfig

LEARNING_RATE = 0.01


# ----------------------------------------------------------------------------- init
def init_uniform_fan_in(module: nn.Module) -> None:
    """Weights ~ U(-1/sqrt(fan_in), +1/sqrt(fan_in)), biases 0, as in every framework's backend."""
    for m in module.modules():
        if isinstance(m, nn.Linear | nn.Conv2d | nn.ConvTranspose2d):
            fan_in = m.weight[0].numel() if not isinstance(m, nn.ConvTranspose2d) else (
                m.weight.shape[0] * m.weight[0, 0].numel()
            )
            bound = 1.0 / math.sqrt(fan_in)
            nn.init.uniform_(m.weight, -bound, bound)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
            m.reset_running_stats()
        elif isinstance(m, nn.Embedding):
            nn.init.uniform_(m.weight, -0.1, 0.1)
        elif isinstance(m, nn.LSTM | nn.RNN):
            bound = 1.0 / math.sqrt(m.hidden_size)
            for name, p in m.named_parameters():
                if name.startswith("weight"):
                    nn.init.uniform_(p, -bound, bound)
                else:
                    nn.init.zeros_(p)


# ----------------------------------------------------------------------------- models
def _act(name: str) -> nn.Module:
    return {"sigmoid": nn.Sigmoid, "relu": nn.ReLU, "tanh": nn.Tanh}[name]()


def build_fcn(cfg: FCNConfig) -> nn.Module:
    widths = (cfg.inputs, *cfg.hidden, cfg.classes)
    layers: dict[str, nn.Module] = {}
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers[f"fc{i + 1}"] = nn.Linear(a, b)
        if i < len(widths) - 2:
            layers[f"{cfg.activation}{i + 1}"] = _act(cfg.activation)
    return nn.Sequential(OrderedDict(layers))


def build_alexnet(cfg: AlexNetConfig) -> nn.Module:
    layers: dict[str, nn.Module] = {}
    c_in = cfg.channels_in
    for i, c in enumerate(cfg.convs, start=1):
        layers[f"conv{i}"] = nn.Conv2d(c_in, c.out, c.kernel, c.stride, c.pad)
        layers[f"relu{i}"] = nn.ReLU(inplace=True)
        if c.pool_after:
            layers[f"pool{i}"] = nn.MaxPool2d(3, 2, 1)
        c_in = c.out
    side = cfg.feature_side()
    layers["flatten"] = nn.Flatten()  # (C, H, W) order: the neutral order
    widths = (c_in * side * side, *cfg.fc, cfg.classes)
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers[f"fc{i + 1}"] = nn.Linear(a, b)
        if i < len(widths) - 2:
            layers[f"fc_relu{i + 1}"] = nn.ReLU(inplace=True)
    return nn.Sequential(OrderedDict(layers))


class Bottleneck(nn.Module):
    def __init__(self, c_in: int, width: int, c_out: int, stride: int):
        super().__init__()
        self.c1 = nn.Conv2d(c_in, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.c2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.c3 = nn.Conv2d(width, c_out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)
        self.proj = self.proj_bn = None
        if stride != 1 or c_in != c_out:
            self.proj = nn.Conv2d(c_in, c_out, 1, stride, bias=False)
            self.proj_bn = nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.c1(x)))
        y = F.relu(self.bn2(self.c2(y)))
        y = self.bn3(self.c3(y))
        return F.relu(y + (x if self.proj is None else self.proj_bn(self.proj(x))))


def build_resnet(cfg: ResNetConfig) -> nn.Module:
    layers: dict[str, nn.Module] = {
        "stem": nn.Conv2d(cfg.channels_in, cfg.stem, 7, 2, 3, bias=False),
        "stem_bn": nn.BatchNorm2d(cfg.stem),
        "stem_relu": nn.ReLU(inplace=True),
        "stem_pool": nn.MaxPool2d(3, 2, 1),
    }
    c_in = cfg.stem
    for s, (width, blocks, stride) in enumerate(cfg.stages, start=1):
        for b in range(1, blocks + 1):
            c_out = width * cfg.expansion
            layers[f"s{s}b{b}"] = Bottleneck(c_in, width, c_out, stride if b == 1 else 1)
            c_in = c_out
    layers["avgpool"] = nn.AdaptiveAvgPool2d(1)
    layers["flatten"] = nn.Flatten()
    layers["fc"] = nn.Linear(c_in, cfg.classes)
    return nn.Sequential(OrderedDict(layers))


class LSTMLanguageModel(nn.Module):
    """Embedding -> stacked LSTM -> vocabulary projection at every step.

    PyTorch's LSTM carries two bias vectors per gate (input and hidden); the neutral
    definition has one, as Keras and Flax do. The hidden bias is held at zero and frozen,
    so all frameworks train the same parameters.
    """

    def __init__(self, cfg: LSTMLMConfig):
        super().__init__()
        self.embedding = nn.Embedding(cfg.vocab, cfg.embed)
        self.lstm = nn.LSTM(cfg.embed, cfg.hidden, cfg.layers_n, batch_first=True)
        self.softmax_proj = nn.Linear(cfg.hidden, cfg.vocab)

    def freeze_hidden_bias(self) -> None:
        for name, p in self.lstm.named_parameters():
            if name.startswith("bias_hh"):
                nn.init.zeros_(p)
                p.requires_grad_(False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(self.embedding(tokens))  # (B, T, H)
        return self.softmax_proj(h)  # (B, T, V)


BUILDERS: dict[type, Callable[[Any], nn.Module]] = {
    FCNConfig: build_fcn,
    AlexNetConfig: build_alexnet,
    ResNetConfig: build_resnet,
    LSTMLMConfig: LSTMLanguageModel,
    TransformerConfig: GPT,
}


def build_model(cfg: Any) -> nn.Module:
    """The network on the current default device (``with device:``), initialised once."""
    try:
        builder = BUILDERS[type(cfg)]
    except KeyError:
        raise UnsupportedError(f"torch backend cannot build {type(cfg).__name__}") from None
    with torch.device("meta"):  # shapes only: skip PyTorch's own initialisation pass
        model = builder(cfg)
    # Module.to_empty with torch.empty for its empty_like: on meta tensors empty_like runs
    # through PyTorch's Python references, whose import took 0.4-0.9 s of every worker
    device = torch.get_default_device()
    model = model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))
    init_uniform_fan_in(model)  # sets every parameter and buffer
    if isinstance(model, LSTMLanguageModel):
        model.freeze_hidden_bias()
    return model


def synthetic_batch(cfg: Any, batch: int, device: torch.device, gen: torch.Generator):
    """Inputs and integer targets, generated on the host by a seeded CPU generator (the
    same batch on every device) and copied to the device before timing. Language models
    get random token ids as inputs and as next-token targets at every position."""
    if isinstance(cfg, LSTMLMConfig | TransformerConfig):
        x = torch.randint(0, cfg.vocab, (batch, cfg.seq_len), generator=gen).to(device)
        y = torch.randint(0, cfg.vocab, (batch, cfg.seq_len), generator=gen).to(device)
        return x, y
    x = torch.randn((batch, *cfg.input_shape()), generator=gen).to(device)
    y = torch.randint(0, cfg.classes, (batch,), generator=gen).to(device)
    return x, y


def trainable_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# ----------------------------------------------------------------------------- weights
def _neutral_params(model: nn.Module):
    """(neutral name, torch tensor, to-neutral fn, from-neutral fn) for every parameter."""
    out = []
    for path, m in model.named_modules():
        name = path.replace(".", "_")
        if isinstance(m, nn.Linear):
            out.append((f"{name}.w", m.weight, lambda t: t.T, lambda a: a.T))
        elif isinstance(m, nn.Conv2d):
            out.append((f"{name}.w", m.weight, lambda t: t.permute(2, 3, 1, 0),
                        lambda a: a.permute(3, 2, 0, 1)))
        elif isinstance(m, nn.BatchNorm2d | nn.LayerNorm):
            out.append((f"{name}.gamma", m.weight, None, None))
            out.append((f"{name}.beta", m.bias, None, None))
            continue
        elif isinstance(m, nn.Embedding):
            out.append((f"{name}.w", m.weight, None, None))
            continue
        elif isinstance(m, nn.LSTM):
            for k in range(m.num_layers):
                ln = f"{name}{k + 1}"
                out.append((f"{ln}.wx", getattr(m, f"weight_ih_l{k}"), lambda t: t.T, lambda a: a.T))
                out.append((f"{ln}.wh", getattr(m, f"weight_hh_l{k}"), lambda t: t.T, lambda a: a.T))
                out.append((f"{ln}.b", getattr(m, f"bias_ih_l{k}"), None, None))
            continue
        else:
            continue
        if m.bias is not None:
            out.append((f"{name}.b", m.bias, None, None))
    return out


def export_weights(model: nn.Module) -> dict[str, np.ndarray]:
    return {
        name: (to(t) if to else t).detach().cpu().numpy().copy()
        for name, t, to, _ in _neutral_params(model)
    }


def import_weights(model: nn.Module, weights: dict[str, np.ndarray]) -> None:
    params = _neutral_params(model)
    missing = {n for n, *_ in params} - set(weights)
    if missing:
        raise KeyError(f"weights missing: {sorted(missing)[:5]}")
    with torch.no_grad():
        for name, t, _, back in params:
            a = torch.as_tensor(np.asarray(weights[name], dtype=np.float32))
            t.copy_((back(a) if back else a).reshape(t.shape).to(t.device))


# ----------------------------------------------------------------------------- trainer


class TorchTrainer(PipelineTrainer):
    def __init__(self, model: nn.Module, x, y, variant: str, device: torch.device,
                 config: Any = None, precision: str = "fp32"):
        self.model = model
        self.config = config
        self.x, self.y = x, y
        self.device = device
        self.batch_size = x.shape[0]
        self.param_count = trainable_params(model)
        self.opt = torch.optim.SGD(
            [p for p in model.parameters() if p.requires_grad], lr=LEARNING_RATE
        )
        self._forward = torch.compile(model) if variant == "compile" else model
        self._last_loss: torch.Tensor | None = None
        self._autocast = autocast_context(device, AUTOCAST.get(precision))
        self._scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None

    def _loss(self, forward: Callable) -> torch.Tensor:
        with self._autocast():  # forward and loss only, as torch.autocast documents
            out = forward(self.x)
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), self.y.reshape(-1))

    def step(self) -> torch.Tensor:
        self.opt.zero_grad(set_to_none=True)
        loss = self._loss(self._forward)
        if self._scaler is None:
            loss.backward()
            self.opt.step()
        else:
            self._scaler.scale(loss).backward()
            self._scaler.step(self.opt)  # unscales; skips the update on inf/nan gradients
            self._scaler.update()
        self._last_loss = loss
        return loss

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def loss(self) -> float:
        return float(self._last_loss.detach()) if self._last_loss is not None else float("nan")

    def flops_per_step(self) -> float:
        """FlopCounterMode over one forward + backward of the same network on the meta
        device (shapes only: no compute, no change to the weights)."""
        if self.config is not None and self.device.type != "meta":
            return count_flops(self.config, self.batch_size)
        return _count(self.model, self.x, self.y)

    def get_weights(self) -> dict[str, np.ndarray]:
        return export_weights(self.model)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        import_weights(self.model, weights)

    def set_batch(self, x, y) -> None:
        self.x = torch.as_tensor(np.asarray(x)).to(self.device)
        self.y = torch.as_tensor(np.asarray(y), dtype=torch.long).to(self.device)
        self.batch_size = self.x.shape[0]

    def device_peak_bytes(self) -> int | None:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        return None

    def train_on(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # non_blocking: a copy from pinned memory overlaps the step it feeds
        cuda = self.device.type == "cuda"
        self.x = x.to(self.device, non_blocking=cuda)
        self.y = y.to(self.device, non_blocking=cuda)
        return self.step()


def _torch_device(device: str) -> torch.device:
    """The torch device of dlperf's 'cpu' or 'gpu'; UnsupportedError where no GPU is seen."""
    if device == "gpu" and not torch.cuda.is_available():
        raise UnsupportedError("no CUDA GPU visible to torch")
    return torch.device("cuda" if device == "gpu" else "cpu")


def _model_device(device: str) -> torch.device:
    """The device a network is built on: a GPU's allocator capped at the run's memory
    limit first (``cap_device_memory``)."""
    dev = _torch_device(device)
    if dev.type == "cuda":
        cap_device_memory(dev)
    return dev


def cap_device_memory(device: torch.device) -> None:
    """Cap the caching allocator at the run's ``--memory-limit`` (``device_memory``): an
    allocation past it raises CUDA's out-of-memory error, as on a card of that size (the
    allocator's reserve counts, so fragmentation does too)."""
    from dlperf.backends import device_memory

    if (cap := device_memory.limit()) is not None:
        index = torch.cuda.current_device() if device.index is None else device.index
        total = torch.cuda.get_device_properties(index).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), index)


def build_trainer(config: Any, batch_size: int, variant: str, device: torch.device,
                  seed: int = 0, precision: str = "fp32") -> Trainer:
    if type(config) not in BUILDERS:
        # the guide's families (RBM, VAE, GAN, ...): their own models and training steps
        from dlperf.backends.torch_families import TRAINER_FACTORIES

        if type(config) in TRAINER_FACTORIES:
            if precision in AUTOCAST:
                raise UnsupportedError(f"{precision} mixed precision is built for the DLBench "
                                       "networks only; the guide's families run fp32 or tf32")
            return TRAINER_FACTORIES[type(config)](config, batch_size, variant, device, seed)
    model, x, y = build_parts(config, batch_size, device, seed)
    return TorchTrainer(model, x, y, variant, device, config, precision)


def build_parts(config: Any, batch_size: int, device: torch.device, seed: int = 0):
    """The seeded model and synthetic batch of a classifier config, without an optimizer
    (whose first use imports torch._dynamo: seconds that a pipeline stage does not need)."""
    torch.manual_seed(seed)
    with device:  # parameters are created on the device (no copy; 'meta' allocates nothing)
        model = build_model(config)
    gen = torch.Generator().manual_seed(seed + 1)
    x, y = synthetic_batch(config, batch_size, device, gen)
    return model, x, y


def build_classifier(config: Any, batch_size: int, device: torch.device, seed: int = 0):
    """(model, x, y) of a network that trains as ``cross_entropy(model(x), y)`` on tensors,
    seeded as a single-process run of it: the DLBench networks, and the guide's families
    whose step is a classifier's. What the parallel strategies train (they apply their own
    SGD, not the family's optimiser). Raises UnsupportedError for the others (a tree batch,
    a reconstruction, a sampler)."""
    if type(config) in BUILDERS:
        return build_parts(config, batch_size, device, seed)
    from dlperf.backends.torch_families import ClassifierTrainer

    trainer = build_trainer(config, batch_size, "eager", device, seed)
    if not (isinstance(trainer, ClassifierTrainer) and isinstance(trainer.x, torch.Tensor)
            and isinstance(trainer.model, nn.Module)):
        raise UnsupportedError(f"{type(config).__name__} trains with its own step, not as a "
                               "classifier with cross-entropy on tensors; the parallel "
                               "strategies split that step")
    return trainer.model, trainer.x, trainer.y


class TorchInference(ForwardOnly):
    """One forward pass in PyTorch's inference mode: ``model.eval()`` (batch normalisation
    on its running statistics) under ``torch.inference_mode()``, which records no autograd
    graph and skips the version counters autograd would need (stronger than no_grad)."""

    mode = "model.eval() + torch.inference_mode()"

    def __init__(self, model: nn.Module, x: torch.Tensor, variant: str, device: torch.device,
                 precision: str = "fp32"):
        self.model = model.eval()
        self.x, self.device = x, device
        self.batch_size = x.shape[0]
        self.param_count = trainable_params(model)
        self._forward = torch.compile(model) if variant == "compile" else model
        self._autocast = autocast_context(device, AUTOCAST.get(precision))
        self.out: torch.Tensor | None = None

    def step(self) -> torch.Tensor:
        with torch.inference_mode(), self._autocast():
            self.out = self._forward(self.x)
        return self.out

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def grad_free(self) -> bool:
        """The last output is an inference tensor with no autograd history, and no
        parameter holds a gradient: no backward pass ran."""
        out = self.out
        return (out is not None and torch.is_inference(out) and out.grad_fn is None
                and all(p.grad is None for p in self.model.parameters()))

    def device_peak_bytes(self) -> int | None:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        return None


def build_inference(config: Any, batch_size: int, variant: str, device: torch.device,
                    seed: int = 0, precision: str = "fp32") -> TorchInference:
    """The network of ``build_trainer`` (the same seed, weights and synthetic batch) in
    inference mode. Networks whose step is not one forward pass of a classifier on
    tensors (an RBM's Gibbs chain, a GAN's pair, a tree batch) have no query to time."""
    if type(config) in BUILDERS:
        model, x, _ = build_parts(config, batch_size, device, seed)
    else:
        try:
            model, x, _ = build_classifier(config, batch_size, device, seed)
        except UnsupportedError:
            raise UnsupportedError(f"{type(config).__name__} answers no query with one "
                                   "forward pass of a classifier; inference mode times "
                                   "classifiers and the DLBench networks") from None
    return TorchInference(model, x, variant, device, precision)


def count_flops(config: Any, batch_size: int) -> float:
    """Training-step FLOPs from PyTorch's counter, on the meta device: shapes only, so a
    full-size network costs no memory and almost no time."""
    return build_trainer(config, batch_size, "eager", torch.device("meta")).flops_per_step()


def _count(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """FLOPs of cross_entropy(model(x), y).backward() by PyTorch's FlopCounterMode.

    oneDNN's fused LSTM kernel is opaque to the counter, so the count runs with oneDNN
    off: the same matrix products, expressed as the mm calls the counter sees.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # oneDNN's TF32 notice when toggling the flag
        with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as c:
            out = model(x)
            F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
    model.zero_grad(set_to_none=True)
    return float(c.get_total_flops())


class TorchBackend(Backend, Inference, InputPipelines, PeakMatmul, PeakConv,
                   CalibrationKernels, Profiling, AllReduce):
    name = "torch"

    def set_threads(self, threads: int) -> int:
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set once parallel work has started
            pass
        return torch.get_num_threads()

    def software(self) -> dict[str, Any]:
        cfg = torch.__config__.show()
        blas = next((ln.split("=", 1)[1].split(",")[0] for ln in cfg.split() if "BLAS_INFO=" in ln), "")
        return {
            "framework": "torch",
            "torch": torch.__version__,
            "blas": blas or "unknown",
            "mkl": torch.backends.mkl.is_available(),
            "mkldnn": torch.backends.mkldnn.is_available(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        }

    def has_gpu(self) -> bool:
        return torch.cuda.is_available()

    def set_precision(self, precision: str, device: str) -> dict[str, Any]:
        """fp32: TF32 off for matrix products and cuDNN convolutions, no reduced-precision
        reductions in fp16/bf16 products, float32 matmul precision 'highest'. tf32: TF32
        on. bf16/fp16: fp32 weights, torch.autocast over forward and loss (fp16 with a
        GradScaler); TF32 stays off for what autocast leaves in fp32. The CPU has no TF32;
        bf16 and fp16 run there through CPU autocast."""
        if precision == "tf32" and device == "cpu":
            raise UnsupportedError(NO_TF32_ON_CPU)
        tf32, reduced = precision == "tf32", precision != "fp32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = reduced
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = reduced
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        self.precision = precision
        return {
            "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
            "cuda.matmul.allow_fp16_reduced_precision_reduction":
                torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
            "cuda.matmul.allow_bf16_reduced_precision_reduction":
                torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "autocast": str(AUTOCAST[precision]) if precision in AUTOCAST else None,
            "grad_scaler": precision == "fp16",
        }

    def build(self, workload, config, batch_size, variant, device, seed) -> Trainer:
        return build_trainer(config, batch_size, variant, _model_device(device), seed,
                             self.precision)

    def input_pipeline(self, source, batch_size: int, seed: int, device: str):
        from dlperf.backends.torch_input import build_pipeline

        return build_pipeline(source, batch_size, seed, _torch_device(device))

    def build_inference(self, workload, config, batch_size, variant, device, seed) -> ForwardOnly:
        return build_inference(config, batch_size, variant, _model_device(device), seed,
                               self.precision)

    def matmul(self, n: int, device: str) -> Timed:
        return MatmulProbe(n, _torch_device(device))

    def conv(self, n: int, device: str) -> Timed:
        return ConvProbe(n, _torch_device(device))

    def kernel(self, op: str, shape: tuple[int, ...], device: str) -> Timed:
        from dlperf.backends.torch_kernels import kernel

        return kernel(op, shape, device, AUTOCAST.get(self.precision))

    def profile(self, trainer: Trainer, steps: int, device: str) -> tuple[list[dict], float]:
        from dlperf.backends.torch_profile import profile

        return profile(trainer, steps, device)

    def allreduce(self, sizes: list[int], world: int, repeats: int, warmup: int,
                  op: str = "allreduce") -> tuple[list[list[float]], WorkerRuntime | None]:
        times, runtime = self.collectives([(op, sizes)], world, repeats, warmup)
        return times[0], runtime

    def collectives(self, parts: list[tuple[str, list[int]]], world: int, repeats: int,
                    warmup: int) -> tuple[list[list[list[float]]], WorkerRuntime | None]:
        from dlperf.backends.torch_kernels import collectives
        from dlperf.backends.torch_rpc_runtime import rpc_runtimes

        times, (gloo, backward, ddp) = collectives(parts, world, repeats, warmup)
        rpc = rpc_runtimes(world)  # in processes of its own, after the timings
        return times, WorkerRuntime(gloo_bytes=int(gloo), ddp_bytes=int(ddp),
                                    backward_bytes=int(backward),
                                    rpc_bytes=int(rpc[0]) if rpc else None,
                                    ddp_rpc_bytes=int(rpc[1]) if rpc else None)

    def core_sharing(self, seconds: float, batch: int | None = None
                     ) -> tuple[list[float], list[float]]:
        from dlperf.backends.torch_kernels import SHARE_BATCH, core_sharing

        return core_sharing(seconds, batch or SHARE_BATCH)


class MatmulProbe(Timed):
    """An n x n fp32 matmul as a 'step': the peak that achieved FLOP/s is compared with."""

    def __init__(self, n: int, device: torch.device):
        self.device = device
        torch.backends.cuda.matmul.allow_tf32 = False  # an fp32 peak, not a TF32 one
        self.a = torch.randn(n, n, device=device)
        self.b = torch.randn(n, n, device=device)
        self.out = torch.empty(n, n, device=device)  # reused: no page faults in the loop
        self.batch_size = n
        self.param_count = 0
        self.n = n

    def step(self) -> None:
        torch.mm(self.a, self.b, out=self.out)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def flops_per_step(self) -> float:
        return 2.0 * self.n**3


class ConvProbe(Timed):
    """The conv probe (``conv_probe_shape``) as a 'step': a forward 3x3 convolution,
    through oneDNN on the CPU. Channels-last, because oneDNN's direct convolution works in
    NHWC: in NCHW torch reorders the tensors around every call (measured here: 30-60%
    slower)."""

    def __init__(self, n: int, device: torch.device):
        self.device = device
        torch.backends.cudnn.allow_tf32 = False  # cuDNN's default would be TF32 on a GPU
        b, c, hw = conv_probe_shape(n)
        self.x = torch.randn(b, c, hw, hw, device=device).contiguous(
            memory_format=torch.channels_last)
        self.w = torch.randn(c, c, 3, 3, device=device).contiguous(
            memory_format=torch.channels_last)
        self.batch_size = b
        self.param_count = 0
        self.n = n

    def step(self) -> None:
        with torch.no_grad():
            F.conv2d(self.x, self.w, padding=1)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def flops_per_step(self) -> float:
        return conv_probe_flops(self.n)


BACKEND_CLASS = TorchBackend
