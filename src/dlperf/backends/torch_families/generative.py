"""The VAE (encoder, sampler, decoder) and the GAN (generator and discriminator in
turn)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dlperf.backends.torch_families.base import (
    EVAL_SEED,
    FamilyTrainer,
    SingleModelTrainer,
    adam_over,
    apply_init,
    mlp,
)
from dlperf.workloads import families as fam


class VAE(nn.Module):
    def __init__(self, cfg: fam.VAEConfig):
        super().__init__()
        n, h, z = math.prod(cfg.input_shape()), cfg.hidden, cfg.latent
        self.enc = nn.Sequential(
            nn.Flatten(), *mlp((n, *(h,) * cfg.depth), "relu", True), nn.Linear(h, 2 * z)
        )
        self.dec = nn.Sequential(*mlp((z, *(h,) * cfg.depth), "relu", True), nn.Linear(h, n))

    def forward(self, x: torch.Tensor, eps: torch.Tensor):
        mu, logvar = self.enc(x).chunk(2, dim=1)
        z = mu + torch.exp(0.5 * logvar) * eps  # reparameterisation (Kingma & Welling, 2014)
        return self.dec(z), mu, logvar


def neg_elbo(
    logits: torch.Tensor, x: torch.Tensor, mu: torch.Tensor, logvar: torch.Tensor
) -> torch.Tensor:
    """Per-example negative ELBO in nats: Bernoulli reconstruction term plus
    KL(N(mu, sigma^2) || N(0, I)) = -1/2 sum(1 + log sigma^2 - mu^2 - sigma^2)
    (Kingma & Welling, 2014, appendix B)."""
    rec = F.binary_cross_entropy_with_logits(logits, x.flatten(1), reduction="none").sum(1)
    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1)
    return rec + kl


class VAETrainer(SingleModelTrainer):
    def __init__(self, cfg: fam.VAEConfig, batch_size: int, device: torch.device):
        super().__init__(cfg, VAE(cfg), batch_size, device, lr=1e-3, adam=True)

    def compute_loss(self) -> torch.Tensor:
        eps = torch.randn(len(self.x), self.cfg.latent, device=self.device)
        logits, mu, logvar = self.model(self.x, eps)
        return neg_elbo(logits, self.x, mu, logvar).mean()

    @torch.no_grad()
    def outputs(self, x: Any) -> dict[str, np.ndarray]:
        """Logits from one sample z per example with fixed noise, and q's parameters."""
        x = self._input(x)
        gen = torch.Generator().manual_seed(EVAL_SEED)
        eps = torch.randn(len(x), self.cfg.latent, generator=gen).to(self.device)
        logits, mu, logvar = self.model(x, eps)
        return {
            "logits": logits.cpu().numpy(),
            "mu": mu.cpu().numpy(),
            "logvar": logvar.cpu().numpy(),
        }


    @torch.no_grad()
    def generate(self, n: int, seed: int = EVAL_SEED) -> np.ndarray:
        """Digits decoded from z ~ N(0, I) (fixed noise): the Bernoulli means, for MMD^2."""
        gen = torch.Generator().manual_seed(seed)
        z = torch.randn(n, self.cfg.latent, generator=gen).to(self.device)
        p = torch.sigmoid(self.model.dec(z))
        return p.reshape(n, *self.cfg.input_shape()).cpu().numpy()


class GANTrainer(FamilyTrainer):
    """One step: the generator's batch, one discriminator update on it (detached) and a
    real batch, then one generator update through the updated, frozen discriminator
    (non-saturating loss, Goodfellow et al., 2014, sec. 3)."""

    default_lr = 1e-3

    def __init__(self, cfg: fam.GANConfig, batch_size: int, device: torch.device):
        h, n = (cfg.hidden,) * cfg.depth, math.prod(cfg.input_shape())
        self.G = nn.Sequential(
            *mlp((cfg.latent, *h, n), "relu"), nn.Sigmoid(), nn.Unflatten(1, cfg.input_shape())
        ).to(device)
        self.D = nn.Sequential(nn.Flatten(), *mlp((n, *h, 1), "lrelu")).to(device)
        for m in (self.G, self.D):
            apply_init(m, cfg.init_scale)
        self.opt_g = adam_over([self.G], self.default_lr, betas=(0.5, 0.999))
        self.opt_d = adam_over([self.D], self.default_lr, betas=(0.5, 0.999))
        self.param_count = self._count_params([self.G, self.D])
        self.d_loss = self.g_loss = None
        super().__init__(cfg, batch_size, device)

    def modules(self) -> list[nn.Module]:
        return [self.G, self.D]

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.opt_g, self.opt_d]

    def d_loss_of(self, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
        lr, lf = self.D(real), self.D(fake)
        return F.binary_cross_entropy_with_logits(
            lr, torch.ones_like(lr)
        ) + F.binary_cross_entropy_with_logits(lf, torch.zeros_like(lf))

    def g_loss_of(self, fake: torch.Tensor) -> torch.Tensor:
        lf = self.D(fake)
        return F.binary_cross_entropy_with_logits(lf, torch.ones_like(lf))

    def d_update(self, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
        self.opt_d.zero_grad(set_to_none=True)
        loss = self.d_loss_of(real, fake.detach())
        loss.backward()
        self.opt_d.step()
        return loss.detach()

    def g_update(self, fake: torch.Tensor) -> torch.Tensor:
        self.opt_g.zero_grad(set_to_none=True)
        self.D.requires_grad_(False)  # the G step moves G only: no weight gradients for D
        try:
            loss = self.g_loss_of(fake)
            loss.backward()
        finally:
            self.D.requires_grad_(True)
        self.opt_g.step()
        return loss.detach()

    def step(self) -> torch.Tensor:
        z = torch.randn(len(self.x), self.cfg.latent, device=self.device)
        fake = self.G(z)  # one generator pass serves both updates
        self.d_loss = self.d_update(self.x, fake)
        self.g_loss = self.g_update(fake)
        self._last = self.d_loss + self.g_loss
        return self._last

    @torch.no_grad()
    def generate(self, n: int, seed: int = EVAL_SEED) -> np.ndarray:
        gen = torch.Generator().manual_seed(seed)
        z = torch.randn(n, self.cfg.latent, generator=gen).to(self.device)
        return self.G(z).cpu().numpy()

    def outputs(self, x: Any) -> dict[str, np.ndarray]:
        return {"samples": self.generate(len(x))}
