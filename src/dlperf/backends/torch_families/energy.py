"""RBM trained by contrastive divergence, and the DBN: greedy RBM pre-training, then
backpropagation fine-tuning."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dlperf.backends.torch_families.base import FamilyTrainer, apply_init, mlp, sgd_over
from dlperf.workloads import families as fam


class RBM(nn.Module):
    """Binary RBM: E(v, h) = -b.v - c.h - v.W.h (Hinton, 2010, eq. 1)."""

    def __init__(self, visible: int, hidden: int, init_scale: float | str | None):
        super().__init__()
        s = fam.init_scale_value(init_scale)
        self.W = nn.Parameter(torch.randn(visible, hidden) * (0.01 if s is None else s))
        self.b = nn.Parameter(torch.zeros(visible))  # visible biases
        self.c = nn.Parameter(torch.zeros(hidden))  # hidden biases

    def up(self, v: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(v @ self.W + self.c)  # p(h = 1 | v)

    def down(self, h: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(h @ self.W.T + self.b)  # p(v = 1 | h)


@torch.no_grad()
def cd_gradient(rbm: RBM, v0: torch.Tensor, k: int):
    """CD-k estimate of the log-likelihood gradient (Hinton, 2002):
    dW = <v h>_data - <v h>_k, with hidden probabilities for h and sampled binary
    visibles along the chain. Returns (dW, db, dc, p(v | h0)), the last for the
    reconstruction error."""
    ph0 = rbm.up(v0)
    h = torch.bernoulli(ph0)
    pv1 = None
    for _ in range(k):
        pv = rbm.down(h)
        pv1 = pv if pv1 is None else pv1
        v = torch.bernoulli(pv)
        ph = rbm.up(v)
        h = torch.bernoulli(ph)
    n = v0.shape[0]
    dW = (v0.T @ ph0 - v.T @ ph) / n
    return dW, (v0 - v).mean(0), (ph0 - ph).mean(0), pv1


def cd_update(rbm: RBM, opt: torch.optim.Optimizer, v0: torch.Tensor, k: int) -> torch.Tensor:
    """One CD-k step: the estimate goes into .grad (negated: the optimiser descends) and
    the optimiser applies it; no autograd. Returns the reconstruction error."""
    dW, db, dc, pv1 = cd_gradient(rbm, v0, k)
    for p, g in ((rbm.W, dW), (rbm.b, db), (rbm.c, dc)):
        p.grad = -g
    opt.step()
    return F.mse_loss(pv1, v0)


class RBMTrainer(FamilyTrainer):
    default_lr = 0.05

    def __init__(self, cfg: fam.RBMConfig, batch_size: int, device: torch.device):
        self.rbm = RBM(cfg.visible, cfg.hidden, cfg.init_scale).to(device)
        self.opt = sgd_over([self.rbm], self.default_lr, momentum=0.5)
        self.param_count = self._count_params([self.rbm])
        super().__init__(cfg, batch_size, device)

    def modules(self) -> list[nn.Module]:
        return [self.rbm]

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.opt]

    def step(self) -> torch.Tensor:
        self._last = cd_update(self.rbm, self.opt, self.x.flatten(1), self.cfg.k)
        return self._last

    @torch.no_grad()
    def outputs(self, x: Any) -> dict[str, np.ndarray]:
        v = self._input(x).flatten(1)
        return {"recon": self.rbm.down(self.rbm.up(v)).reshape(len(v), *x.shape[1:]).cpu().numpy()}


class DBNTrainer(FamilyTrainer):
    """Greedy layer-wise RBM pre-training (each RBM on the mean-field activations of the
    ones below), then the weights unrolled into a sigmoid classifier and fine-tuned by
    backpropagation (Hinton, Osindero, Teh, 2006; Hinton & Salakhutdinov, 2006)."""

    default_lr = 0.02  # gentle: a fifth of the 0.1 a sigmoid net trains at from random init
    pretrain_lr = 0.1  # Hinton (2010), sec. 4

    def __init__(self, cfg: fam.DBNConfig, batch_size: int, device: torch.device):
        w = cfg.widths()
        self.rbms = nn.ModuleList(
            RBM(a, b, cfg.init_scale) for a, b in zip(w[:-1], w[1:], strict=True)
        ).to(device)
        self.model = nn.Sequential(nn.Flatten(), *mlp((*w, fam.CLASSES), "sigmoid")).to(device)
        apply_init(self.model, cfg.init_scale)
        self.pretrain_layers = cfg.depth
        self.rbm_opts = [sgd_over([r], self.pretrain_lr, momentum=0.5) for r in self.rbms]
        self.opt = sgd_over([self.model], self.default_lr)
        pretrain = cfg.phase == "pretrain"
        self.param_count = self._count_params([self.rbms] if pretrain else [self.model])
        super().__init__(cfg, batch_size, device)

    def modules(self) -> list[nn.Module]:
        return [self.rbms, self.model]

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [*self.rbm_opts, self.opt]

    def set_lr(self, lr: float) -> None:
        for g in self.opt.param_groups:
            g["lr"] = lr

    def set_pretrain_lr(self, lr: float) -> None:
        for opt in self.rbm_opts:
            for g in opt.param_groups:
                g["lr"] = lr

    def pretrain_step(self, layer: int) -> torch.Tensor:
        """One CD-k update of RBM ``layer`` on the current batch."""
        with torch.no_grad():
            v = self.x.flatten(1)
            for r in self.rbms[:layer]:
                v = r.up(v)
        self._last = cd_update(self.rbms[layer], self.rbm_opts[layer], v, self.cfg.k)
        return self._last

    @torch.no_grad()
    def end_pretraining(self) -> None:
        """Unroll: each RBM's W and hidden biases become a sigmoid layer's weights."""
        linears = [m for m in self.model if isinstance(m, nn.Linear)]
        for r, lin in zip(self.rbms, linears, strict=False):
            lin.weight.copy_(r.W.T)
            lin.bias.copy_(r.c)

    def step(self) -> torch.Tensor:
        if self.cfg.phase == "pretrain":
            for i in range(len(self.rbms)):
                self.pretrain_step(i)
            return self._last
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()
        self._last = loss.detach()
        return self._last

    @torch.no_grad()
    def outputs(self, x: Any) -> dict[str, np.ndarray]:
        x = self._input(x)
        return {"logits": self.model(x).cpu().numpy()}
