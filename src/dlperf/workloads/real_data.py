"""Real data that works offline, with fixed seeds and a held-out split. Framework-free
(numpy arrays in the neutral layout of ``dlperf.backends.base.WEIGHT_LAYOUT``).

- ``digits``: scikit-learn's bundled 8x8 handwritten digits (1797 images, 10 classes),
  scaled to [0, 1], shaped (N, 1, 8, 8).
- ``mnist1d``: the MNIST-1D generator (Greydanus, 2020): 40-sample 1-D signals of the
  digits 0-9, 4000 training and 1000 test examples, made locally and cached on disk.
  Shaped (N, 40, 1): a sequence of 40 scalar steps for the recurrent networks.
- ``digits-seq``: the digits read row by row, a sequence of 8 steps of 8 values.
- ``cancer``: scikit-learn's bundled Wisconsin breast-cancer table (569 rows, 30 numeric
  features, 2 classes): the guide's "simple tabular data". Each feature is scaled to
  [0, 1] by the training split's minimum and maximum (so that an RBM's visible units can
  take it), shaped (N, 30).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlperf.core.errors import UsageError


@dataclass(frozen=True)
class Dataset:
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    def batches(self, batch_size: int, rng: np.random.Generator):
        """Endless shuffled mini-batches of the training split (epoch after epoch)."""
        n = len(self.x_train)
        while True:
            order = rng.permutation(n)
            for i in range(0, n - batch_size + 1, batch_size):
                idx = order[i : i + batch_size]
                yield self.x_train[idx], self.y_train[idx]


def _split(x: np.ndarray, y: np.ndarray, seed: int, test_fraction: float):
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def digits(seed: int = 0, test_fraction: float = 0.25) -> Dataset:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0)[:, None, :, :]  # (N, 1, 8, 8) in [0, 1]
    y = d.target.astype(np.int64)
    return Dataset("digits", *_split(x, y, seed, test_fraction), classes=10)


def digits_seq(seed: int = 0, test_fraction: float = 0.25) -> Dataset:
    d = digits(seed, test_fraction)
    return Dataset("digits-seq", d.x_train[:, 0], d.y_train, d.x_test[:, 0], d.y_test, 10)


def cancer(seed: int = 0, test_fraction: float = 0.25) -> Dataset:
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    x_tr, y_tr, x_te, y_te = _split(d.data.astype(np.float32), d.target.astype(np.int64),
                                    seed, test_fraction)
    lo, hi = x_tr.min(0), x_tr.max(0)
    scale = np.where(hi > lo, hi - lo, 1.0).astype(np.float32)
    x_tr, x_te = ((a - lo) / scale for a in (x_tr, x_te))
    return Dataset("cancer", x_tr, y_tr, np.clip(x_te, 0.0, 1.0).astype(np.float32), y_te,
                   classes=2)


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dlperf"


def mnist1d(seed: int = 0) -> Dataset:
    """MNIST-1D with the generator's default arguments (its own fixed seed makes the data
    identical everywhere); our ``seed`` is unused for the split, which the generator fixes."""
    path = _cache_dir() / "mnist1d.npz"
    if path.exists():
        z = np.load(path)
        x, y, xt, yt = z["x"], z["y"], z["x_test"], z["y_test"]
    else:
        from mnist1d.data import get_dataset_args, make_dataset

        d = make_dataset(get_dataset_args())
        x, y, xt, yt = d["x"], d["y"], d["x_test"], d["y_test"]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp.npz")
            np.savez(tmp, x=x, y=y, x_test=xt, y_test=yt)
            tmp.replace(path)
        except OSError:
            pass
    x, xt = (a.astype(np.float32)[:, :, None] for a in (x, xt))  # (N, 40, 1)
    return Dataset("mnist1d", x, y.astype(np.int64), xt, yt.astype(np.int64), classes=10)


LOADERS = {"digits": digits, "digits-seq": digits_seq, "mnist1d": mnist1d, "cancer": cancer}


def load(name: str, seed: int = 0) -> Dataset:
    try:
        loader = LOADERS[name]
    except KeyError:
        raise UsageError(f"unknown data set '{name}' (known: {', '.join(LOADERS)})") from None
    return loader(seed)
