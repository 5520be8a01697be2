"""What every family trainer shares: initialisation, dense stacks, the optimisers, one
model trained by backpropagation, and the classifiers (feed-forward, convolutional,
recurrent)."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from dlperf.backends.base import Trainer
from dlperf.workloads import families as fam

EVAL_SEED = 12345  # fixed noise for evaluating the VAE and the GAN: a deterministic measure


def apply_init(model: nn.Module, init_scale: float | str | None) -> None:
    """init_scale s: weights ~ N(0, s^2), biases 0; 'default' leaves PyTorch's init."""
    s = fam.init_scale_value(init_scale)
    if s is None:
        return
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, s)
            else:
                p.zero_()


def _act(name: str) -> nn.Module:
    return {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}[name]()


def mlp(widths: tuple[int, ...], act: str, last_act: bool = False) -> list[nn.Module]:
    out: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        out.append(nn.Linear(a, b))
        if last_act or i < len(widths) - 2:
            out.append(_act(act) if act != "lrelu" else nn.LeakyReLU(0.2))
    return out


class FamilyTrainer(Trainer):
    """Shared plumbing: synthetic batch, optimisers, FLOP counting without side effects."""

    default_lr: float = 0.05

    def __init__(self, cfg: Any, batch_size: int, device: torch.device):
        self.cfg, self.device, self.batch_size = cfg, device, batch_size
        self._last: torch.Tensor | None = None
        self.x, self.y = self.synthetic(batch_size)

    # --- to be filled in by each family
    def modules(self) -> list[nn.Module]:
        raise NotImplementedError

    def optimizers(self) -> list[torch.optim.Optimizer]:
        raise NotImplementedError

    def synthetic(self, n: int):
        """Random inputs of the data's shape and range, random labels."""
        x = torch.rand((n, *self.cfg.input_shape()), device=self.device)
        return x, torch.randint(0, fam.CLASSES, (n,), device=self.device)

    def outputs(self, x: Any) -> dict[str, np.ndarray]:
        raise NotImplementedError

    # --- the Trainer interface
    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def loss(self) -> float:
        return float(self._last) if self._last is not None else float("nan")

    def set_batch(self, x: Any, y: Any) -> None:
        self.x = self._input(x)
        self.y = torch.as_tensor(np.asarray(y), dtype=torch.long, device=self.device)
        self.batch_size = len(self.y)

    def _input(self, x: Any) -> Any:
        """Host data (numpy arrays) as this family's input on the device."""
        return torch.as_tensor(np.asarray(x, dtype=np.float32), device=self.device)

    def set_lr(self, lr: float) -> None:
        for opt in self.optimizers():
            for g in opt.param_groups:
                g["lr"] = lr

    def _count_params(self, mods: list[nn.Module]) -> int:
        return sum(p.numel() for m in mods for p in m.parameters() if p.requires_grad)

    def flops_per_step(self) -> float:
        """FlopCounterMode over one real step, then weights, optimiser state and random
        state put back, so counting changes nothing. oneDNN is off while counting: its
        fused RNN kernels are opaque to the counter."""
        saved = copy.deepcopy(
            ([m.state_dict() for m in self.modules()], [o.state_dict() for o in self.optimizers()])
        )
        last = self._last
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as c:
                self.step()
        for m, s in zip(self.modules(), saved[0], strict=True):
            m.load_state_dict(s)
        for o, s in zip(self.optimizers(), saved[1], strict=True):
            o.load_state_dict(s)
        self._last = last
        return float(c.get_total_flops())


def sgd_over(mods: list[nn.Module], lr: float, momentum: float = 0.9) -> torch.optim.SGD:
    return torch.optim.SGD([p for m in mods for p in m.parameters()], lr=lr, momentum=momentum)


def adam_over(mods: list[nn.Module], lr: float, betas=(0.9, 0.999)) -> torch.optim.Adam:
    return torch.optim.Adam([p for m in mods for p in m.parameters()], lr=lr, betas=betas)


# ----------------------------------------------------------------------------- one network
class SingleModelTrainer(FamilyTrainer):
    """One network and one optimiser, updated by one backward pass of ``compute_loss``."""

    def __init__(
        self,
        cfg: Any,
        model: nn.Module,
        batch_size: int,
        device: torch.device,
        lr: float = 0.05,
        adam: bool = False,
    ):
        self.model = model.to(device)
        apply_init(self.model, cfg.init_scale)
        self.default_lr = lr
        self.opt = adam_over([self.model], lr) if adam else sgd_over([self.model], lr)
        self.param_count = self._count_params([self.model])
        super().__init__(cfg, batch_size, device)

    def modules(self) -> list[nn.Module]:
        return [self.model]

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.opt]

    def compute_loss(self) -> torch.Tensor:
        raise NotImplementedError

    def step(self) -> torch.Tensor:
        self.opt.zero_grad(set_to_none=True)
        loss = self.compute_loss()
        loss.backward()
        self.opt.step()
        self._last = loss.detach()
        return self._last


class ClassifierTrainer(SingleModelTrainer):
    """Any classifier: softmax cross-entropy; SGD with momentum (or Adam)."""

    def compute_loss(self) -> torch.Tensor:
        return F.cross_entropy(self.model(self.x), self.y)

    @torch.no_grad()
    def outputs(self, x: Any) -> dict[str, np.ndarray]:
        return {"logits": self.model(self._input(x)).cpu().numpy()}


def build_ffn(cfg: fam.FFNConfig) -> nn.Module:
    widths = (cfg.inputs, *cfg.hidden_widths(), fam.CLASSES)
    return nn.Sequential(nn.Flatten(), *mlp(widths, cfg.activation))


def build_cnn(cfg: fam.CNNConfig) -> nn.Module:
    layers: list[nn.Module] = []
    c_in, side = cfg.input_shape()[0], 0
    for c, side, pool in cfg.plan():
        layers += [nn.Conv2d(c_in, c, 3, 1, 1), nn.ReLU()]
        if pool:
            layers.append(nn.MaxPool2d(2))
            side //= 2
        c_in = c
    return nn.Sequential(
        *layers,
        nn.Flatten(),
        nn.Linear(c_in * side * side, cfg.hidden),
        nn.ReLU(),
        nn.Linear(cfg.hidden, fam.CLASSES),
    )


class SequenceClassifier(nn.Module):
    """(B, T, F) -> stacked RNN/LSTM -> the last step's hidden state -> class logits."""

    def __init__(self, cfg: fam.RNNConfig):
        super().__init__()
        cell = nn.LSTM if cfg.cell == "lstm" else nn.RNN
        self.rnn = cell(cfg.input_shape()[1], cfg.hidden, cfg.depth, batch_first=True)
        self.fc = nn.Linear(cfg.hidden, fam.CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(x)  # (B, T, H)
        return self.fc(h[:, -1])
