"""Auto-encoder and deconvolutional net: trained to reconstruct their input."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dlperf.backends.torch_families.base import SingleModelTrainer, mlp
from dlperf.workloads import families as fam


class ReconstructionTrainer(SingleModelTrainer):
    """Auto-encoder and deconvolutional net: mean squared reconstruction error, Adam."""

    def __init__(self, cfg: Any, model: nn.Module, batch_size: int, device: torch.device):
        super().__init__(cfg, model, batch_size, device, lr=1e-3, adam=True)

    def compute_loss(self) -> torch.Tensor:
        return F.mse_loss(self.model(self.x), self.x)

    @torch.no_grad()
    def outputs(self, x: Any) -> dict[str, np.ndarray]:
        return {"recon": self.model(self._input(x)).cpu().numpy()}


def build_autoencoder(cfg: fam.AutoencoderConfig) -> nn.Module:
    shape = cfg.input_shape()
    return nn.Sequential(
        nn.Flatten(), *mlp(cfg.widths(), cfg.activation), nn.Sigmoid(), nn.Unflatten(1, shape)
    )


def build_deconv(cfg: fam.DeconvConfig) -> nn.Module:
    w, c = cfg.width, cfg.input_shape()[0]
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(math.prod(cfg.input_shape()), cfg.code),
        nn.ReLU(),
        nn.Linear(cfg.code, w * 4),
        nn.ReLU(),
        nn.Unflatten(1, (w, 2, 2)),
        nn.ConvTranspose2d(w, w // 2, 4, 2, 1),
        nn.ReLU(),  # 2x2 -> 4x4
        nn.ConvTranspose2d(w // 2, c, 4, 2, 1),
        nn.Sigmoid(),  # 4x4 -> 8x8
    )
