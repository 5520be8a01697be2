"""The frameworks dlperf knows, as data: names, variants, packages, threading
environment and interpreter. Reading it imports no framework; loading a framework's
backend is ``dlperf.backends.load``, on the worker side only."""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass, field

from dlperf.core import separate_envs as envs
from dlperf.core.errors import MissingExtraError, UsageError


@dataclass(frozen=True)
class BackendInfo:
    """What the registry knows about a backend without importing it."""

    name: str
    module: str
    extra: str
    variants: tuple[str, ...]
    default_variant: str
    distributions: tuple[str, ...]  # pip distributions whose presence means 'installed'
    aliases: tuple[str, ...] = ()
    #: interpreter for this backend's workers (None: the current one). A framework whose
    #: dependencies conflict with the others lives in an environment of its own.
    python: str | None = None
    description: str = ""
    labels: dict[str, str] = field(default_factory=dict)

    def thread_env(self, threads: int, variant: str | None = None) -> dict[str, str]:
        """Environment variables that must be set before the framework loads.

        For Keras the variant names the Keras backend, which Keras reads from
        KERAS_BACKEND once, at import; that framework's own settings follow it.
        """
        n = str(threads)
        env = {
            "OMP_NUM_THREADS": n,
            "MKL_NUM_THREADS": n,
            "OPENBLAS_NUM_THREADS": n,
            "TF_NUM_INTRAOP_THREADS": n,
            "TF_NUM_INTEROP_THREADS": "1",
        }
        engine = self.name
        if self.name == "keras":
            engine = variant if variant in self.variants else self.default_variant
            env["KERAS_BACKEND"] = engine
        if engine == "jax":
            # XLA:CPU sizes its thread pool once, at start-up, from NPROC (else from the
            # CPU affinity); it has no flag for it (measured: docs/frameworks.md)
            env["NPROC"] = n
        if engine == "tensorflow":
            env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        if self.name == "mxnet":
            # oneDNN's kernels take their OpenMP teams from OMP_NUM_THREADS, MXNet's own
            # operators from MXNET_OMP_MAX_THREADS; one engine thread runs CPU operators
            # (one inter-op thread, as in the others). Read when libmxnet loads.
            env.update(MXNET_OMP_MAX_THREADS=n, MXNET_CPU_WORKER_NTHREADS="1",
                       MXNET_CPU_PRIORITY_NTHREADS="1")
        return env



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
