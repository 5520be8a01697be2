"""Registry of frameworks. Importing this module imports no framework."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os

from dlperf import envs
from dlperf.backends.base import Backend, BackendInfo, Trainer, UnsupportedError
from dlperf.errors import MissingExtraError, UsageError

BACKENDS: dict[str, BackendInfo] = {
    b.name: b
    for b in (
        BackendInfo(
            name="torch",
            module="dlperf.backends.torch_backend",
            extra="torch",
            variants=("eager", "compile"),
            default_variant="eager",
            distributions=("torch",),
            aliases=("pytorch",),
            description="PyTorch eager; 'compile' wraps the step in torch.compile",
        ),
        BackendInfo(
            name="tensorflow",
            module="dlperf.backends.tf_backend",
            extra="tf",
            variants=("graph", "xla"),
            default_variant="graph",
            distributions=("tensorflow-cpu", "tensorflow"),
            aliases=("tf",),
            description="TensorFlow 2 / Keras 3 layers, step under tf.function; 'xla' adds jit_compile",
        ),
        BackendInfo(
            name="jax",
            module="dlperf.backends.jax_backend",
            extra="jax",
            variants=("jit",),
            default_variant="jit",
            distributions=("jax", "flax", "optax"),
            aliases=("flax",),
            description="JAX with Flax modules and Optax SGD, step under jax.jit",
        ),
        BackendInfo(
            name="mxnet",
            module="dlperf.backends.mxnet_backend",
            extra="mxnet",
            variants=("hybrid", "imperative"),
            default_variant="hybrid",
            distributions=("mxnet",),
            python=envs.python("mxnet"),  # needs numpy<1.24: an environment of its own
            description="MXNet 1.9.1 Gluon, hybridize()d into one cached graph; "
            "'imperative' runs op by op (its own environment: dlperf setup mxnet)",
        ),
        BackendInfo(
            name="keras",
            module="dlperf.backends.keras_backend",
            extra="keras",
            # the variant is the Keras backend; each also needs that framework's own dlperf
            # extra (torch is always installed, hence the default), checked by the worker
            variants=("torch", "jax", "tensorflow"),
            default_variant="torch",
            distributions=("keras",),
            description="Keras 3 layers and model.train_on_batch on the Keras backend the "
                        "variant names",
        ),
    )
}

_ALIASES = {a: b.name for b in BACKENDS.values() for a in (b.name, *b.aliases)}


def info(name: str) -> BackendInfo:
    try:
        return BACKENDS[_ALIASES[name.lower()]]
    except KeyError:
        raise UsageError(
            f"unknown framework '{name}' (known: {', '.join(BACKENDS)})"
        ) from None


def resolve_variant(framework: str, variant: str | None) -> str:
    b = info(framework)
    if variant in (None, "", "default"):
        return b.default_variant
    if variant not in b.variants:
        raise UsageError(
            f"framework '{b.name}' has no variant '{variant}' (variants: {', '.join(b.variants)})"
        )
    return variant


def installed(name: str) -> bool:
    """True when every distribution the backend needs is installed (checked without import)."""
    b = info(name)
    if b.python:  # lives in an environment of its own: is its interpreter there?
        return os.path.isfile(b.python) and os.access(b.python, os.X_OK)
    if b.name == "tensorflow":
        return any(_has_dist(d) for d in b.distributions)
    return all(_has_dist(d) for d in b.distributions)


def _has_dist(dist: str) -> bool:
    try:
        importlib.metadata.version(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def require(name: str) -> BackendInfo:
    b = info(name)
    if not installed(b.name):
        how = None
        if b.name in envs.SEPARATE:  # an environment of its own, not an extra
            how = (f"run 'dlperf setup {b.name}' (or set ${envs.SEPARATE[b.name].python_var} "
                   "to an interpreter that has it)")
        raise MissingExtraError(b.name, b.extra, how)
    return b


def load(name: str) -> Backend:
    """Import and instantiate a backend (worker side only)."""
    b = require(name)
    module = importlib.import_module(b.module)
    return module.BACKEND_CLASS()


__all__ = [
    "BACKENDS",
    "Backend",
    "BackendInfo",
    "Trainer",
    "UnsupportedError",
    "info",
    "installed",
    "load",
    "require",
    "resolve_variant",
]
