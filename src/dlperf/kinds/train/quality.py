"""The quality measures of training to a target, on the held-out split of real data.

- accuracy (classifiers): share of examples whose largest logit is the true class.
- reconstruction error (auto-encoder, deconvolutional net, RBM): mean squared error per
  pixel, intensities in [0, 1]; for the RBM the mean-field reconstruction
  p(v | p(h | v)).
- negative ELBO (VAE), nats per image, one reparameterised sample per example drawn from
  fixed noise, so the measure is deterministic.
- MMD^2 (GAN): the unbiased squared maximum mean discrepancy (Gretton et al., 2012,
  eq. 3) between as many generated digits (fixed latent noise) as there are held-out
  digits and the held-out digits, Gaussian kernels at 1/2, 1 and 2 times the median
  distance between held-out digits. 0 means indistinguishable by this test; the same
  statistic for real training digits against the held-out ones is recorded beside it
  as the floor a perfect generator would reach.

Nothing here imports a framework: a trainer supplies numpy outputs (``outputs(x)``,
``generate(n)`` for the GAN) and the measures are computed here, the same for every
backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dlperf.core.target_rules import Goal
from dlperf.workloads import real_data as data

DATA_SEED = 0  # the train/held-out split is fixed; spec.seed varies init and batch order
TREES_TRAIN, TREES_TEST = 4000, 1000


@dataclass(frozen=True)
class Quality:
    name: str
    higher_is_better: bool
    unit: str
    default_target: float
    description: str

    def goal(self, target: float) -> Goal:
        return Goal(self.name, target, self.higher_is_better)


_ACC = "held-out accuracy"
_MSE = "held-out reconstruction error (mean squared error per pixel)"

#: Quality measure and default target per family. The targets are round numbers that the
#: small size reaches within a minute on one CPU thread (docs/families.md).
QUALITY: dict[str, Quality] = {
    "ffn": Quality("accuracy", True, "", 0.95, _ACC),
    "dbn": Quality("accuracy", True, "", 0.9, _ACC),
    "cnn": Quality("accuracy", True, "", 0.95, _ACC),
    "rnn": Quality("accuracy", True, "", 0.9, _ACC),
    "lstm": Quality("accuracy", True, "", 0.9, _ACC),
    "recursive": Quality("accuracy", True, "", 0.9, _ACC),
    "autoencoder": Quality("recon_mse", False, "", 0.02, _MSE),
    "deconv": Quality("recon_mse", False, "", 0.02, _MSE),
    "rbm": Quality("recon_mse", False, "", 0.03, _MSE),
    "vae": Quality("neg_elbo", False, "nats", 27.0, "held-out negative ELBO per image"),
    "gan": Quality(
        "mmd2", False, "", 0.1, "MMD^2 between generated and held-out digits (Gaussian kernels)"
    ),
}

#: Measures a run may ask for instead of its family's (``TrainOptions.measure``): MMD^2 of
#: generated digits for every generator, so that the VAE and the GAN compare on one scale.
MMD2 = QUALITY["gan"]
GENERATORS = ("vae", "gan")


def quality_of(family: str, measure: str | None = None) -> Quality:
    """The family's quality measure, or ``measure`` where it applies (ValueError if not)."""
    own = QUALITY[family]
    if measure is None or measure == own.name:
        return own
    if measure == MMD2.name and family in GENERATORS:
        return MMD2
    raise ValueError(f"measure '{measure}' does not apply to {family} (its own: {own.name}"
                     f"{'; mmd2 for the generators ' + ', '.join(GENERATORS) if family in GENERATORS else ''})")


# ----------------------------------------------------------------------------- data
def load_data(cfg: Any) -> data.Dataset:
    """The family's real data set, split once with a fixed seed."""
    if cfg.dataset == "trees":
        from dlperf.workloads.families import expression_trees

        xs, ys = expression_trees(TREES_TRAIN, cfg.leaves, cfg.ops, seed=DATA_SEED)
        xt, yt = expression_trees(TREES_TEST, cfg.leaves, cfg.ops, seed=DATA_SEED + 1)
        return data.Dataset("trees", xs, ys, xt, yt, classes=10)
    return data.load(cfg.dataset, DATA_SEED)


# ----------------------------------------------------------------------------- measures
def accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    return float((logits.argmax(1) == y).mean())


def recon_mse(recon: np.ndarray, x: np.ndarray) -> float:
    return float(np.mean((recon.reshape(x.shape) - x) ** 2))


def neg_elbo(logits: np.ndarray, x: np.ndarray, mu: np.ndarray, logvar: np.ndarray) -> float:
    """Mean over examples of -ELBO = BCE(logits, x) summed over pixels + KL(q || N(0, I)),
    KL = -1/2 sum(1 + log sigma^2 - mu^2 - sigma^2) (Kingma & Welling, 2014, app. B)."""
    x = x.reshape(len(x), -1)
    # stable BCE with logits: max(l, 0) - l x + log(1 + exp(-|l|))
    bce = np.maximum(logits, 0) - logits * x + np.log1p(np.exp(-np.abs(logits)))
    kl = -0.5 * (1 + logvar - mu**2 - np.exp(logvar)).sum(1)
    return float(np.mean(bce.sum(1) + kl))


def _sq_dists(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
    return np.maximum(d, 0)


def median_distance(y: np.ndarray) -> float:
    d = _sq_dists(y, y)
    return float(np.sqrt(np.median(d[np.triu_indices(len(y), 1)])))


def mmd2(x: np.ndarray, y: np.ndarray, scale: float) -> float:
    """Unbiased MMD^2 (Gretton et al., 2012, eq. 3) with the sum of Gaussian kernels of
    widths scale/2, scale, 2 scale: mean k(x, x') + mean k(y, y') (i != j) - 2 mean k(x, y)."""
    x, y = x.reshape(len(x), -1).astype(np.float64), y.reshape(len(y), -1).astype(np.float64)

    def k(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        d = _sq_dists(a, b)
        return sum(np.exp(-d / (2 * (f * scale) ** 2)) for f in (0.5, 1.0, 2.0))

    m, n = len(x), len(y)
    kxx, kyy = k(x, x), k(y, y)
    xx = (kxx.sum() - np.trace(kxx)) / (m * (m - 1))
    yy = (kyy.sum() - np.trace(kyy)) / (n * (n - 1))
    return float(xx + yy - 2 * k(x, y).mean())


class Evaluator:
    """The family's quality on the held-out split, from the trainer's numpy outputs."""

    def __init__(self, family: str, ds: data.Dataset, measure: str | None = None):
        self.family, self.ds = family, ds
        self.quality = quality_of(family, measure)
        self.reference: float | None = None
        if self.quality.name == "mmd2":
            self.scale = median_distance(ds.x_test.reshape(len(ds.x_test), -1))
            # the floor: real training digits, as many as generated ones
            self.reference = mmd2(ds.x_train[: len(ds.x_test)], ds.x_test, self.scale)

    def __call__(self, trainer: Any) -> float:
        ds, name = self.ds, self.quality.name
        if name == "mmd2":
            return mmd2(trainer.generate(len(ds.x_test)), ds.x_test, self.scale)
        out = trainer.outputs(ds.x_test)
        if name == "accuracy":
            return accuracy(out["logits"], ds.y_test)
        if name == "recon_mse":
            return recon_mse(out["recon"], ds.x_test)
        return neg_elbo(out["logits"], ds.x_test, out["mu"], out["logvar"])


