"""PyTorch models and trainers for the guide's families (``dlperf.workloads.families``).

Imported on demand by ``torch_backend.build_trainer``, which looks a family's config type
up in ``TRAINER_FACTORIES``. Every trainer runs on its synthetic batch (time per
mini-batch, ``dlperf run``) or on real batches given by ``set_batch`` (``dlperf train``),
and offers, besides the ``Trainer`` interface, what the training loop of
``dlperf.kinds.train.run`` needs: ``default_lr``, ``set_lr``, ``outputs(x)`` (numpy arrays from
which ``dlperf.kinds.train.run`` computes the quality) and, for the GAN, ``generate``; the DBN
adds ``pretrain_step`` and ``end_pretraining``.

Optimisers: SGD with momentum 0.9 for the classifiers, Adam for the recursive net, the
auto-encoders, the VAE and the GAN (betas of Radford et al., 2016 for the GAN), CD-k with
SGD momentum 0.5 for RBMs (Hinton, 2010). ``init_scale`` = "default" keeps PyTorch's own initialisation;
a number s draws every weight matrix, kernel and embedding from N(0, s^2) and zeroes the
biases.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from dlperf.backends.base import Trainer, UnsupportedError
from dlperf.backends.torch_families.base import (
    ClassifierTrainer,
    FamilyTrainer,
    SequenceClassifier,
    SingleModelTrainer,
    build_cnn,
    build_ffn,
)
from dlperf.backends.torch_families.energy import (
    RBM,
    DBNTrainer,
    RBMTrainer,
    cd_gradient,
    cd_update,
)
from dlperf.backends.torch_families.generative import VAE, GANTrainer, VAETrainer, neg_elbo
from dlperf.backends.torch_families.reconstruction import (
    ReconstructionTrainer,
    build_autoencoder,
    build_deconv,
)
from dlperf.backends.torch_families.trees import TorchTrees, TreeNet, TreeTrainer
from dlperf.workloads import families as fam


def _eager(variant: str) -> None:
    if variant != "eager":
        raise UnsupportedError("the guide's families run in PyTorch eager mode only")


def _factory(make: Callable[[Any, int, torch.device], Trainer]) -> Callable[..., Trainer]:
    def factory(
        cfg: Any, batch_size: int, variant: str, device: torch.device, seed: int = 0
    ) -> Trainer:
        _eager(variant)
        torch.manual_seed(seed)
        return make(cfg, batch_size, device)

    return factory


#: config type -> (config, batch_size, variant, device, seed) -> Trainer
TRAINER_FACTORIES: dict[type, Callable[..., Trainer]] = {
        fam.FFNConfig: _factory(lambda c, b, d: ClassifierTrainer(c, build_ffn(c), b, d, lr=0.1)),
        fam.CNNConfig: _factory(lambda c, b, d: ClassifierTrainer(c, build_cnn(c), b, d, lr=0.05)),
        fam.RNNConfig: _factory(
            lambda c, b, d: ClassifierTrainer(c, SequenceClassifier(c), b, d, lr=0.05)
        ),
        # SGD stalls near 73% on the tree task where Adam passes 95% (docs/families.md)
        fam.RecursiveConfig: _factory(
            lambda c, b, d: TreeTrainer(c, TreeNet(c), b, d, lr=3e-3, adam=True)
        ),
        fam.AutoencoderConfig: _factory(
            lambda c, b, d: ReconstructionTrainer(c, build_autoencoder(c), b, d)
        ),
        fam.DeconvConfig: _factory(lambda c, b, d: ReconstructionTrainer(c, build_deconv(c), b, d)),
        fam.RBMConfig: _factory(RBMTrainer),
        fam.DBNConfig: _factory(DBNTrainer),
        fam.VAEConfig: _factory(VAETrainer),
        fam.GANConfig: _factory(GANTrainer),
}


__all__ = ["RBM", "TRAINER_FACTORIES", "VAE", "ClassifierTrainer", "DBNTrainer", "FamilyTrainer",
           "GANTrainer", "RBMTrainer", "ReconstructionTrainer", "SequenceClassifier",
           "SingleModelTrainer", "TorchTrees", "TreeNet", "TreeTrainer", "VAETrainer",
           "build_autoencoder", "build_cnn", "build_deconv", "build_ffn", "cd_gradient",
           "cd_update", "neg_elbo"]
