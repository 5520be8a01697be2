"""A framework imported without the optional extras its import pulls in and a worker never
uses.

Keras 3, which TensorFlow imports, tries scikit-learn (for its estimator wrappers) and
matplotlib's pyplot (for an image-gallery plot) and carries on without them where they are
missing. A TensorFlow worker uses neither, and they cost 1.2 to 1.5 s of its 4 to 5 s
import on a 2-core Xeon; dlperf starts one such process per measured configuration and per
calibration worker. TensorFlow's Lite converter tries JAX too (``from jax import jit``, for
converting JAX functions), 0.25-0.7 s more of a TensorFlow worker's import on a 2-vCPU AMD
EPYC. Only the import is affected: once it is done, each imports as usual (dlperf's
digits data set reads scikit-learn's).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: the packages a framework's import may try and go on without
SKIPPED = ("sklearn", "matplotlib")
#: ... and, per framework, those only that framework's import may go without (another
#: framework's own import needs them)
SKIPPED_BY = {"tensorflow": ("jax", "jaxlib")}


@contextmanager
def skipping_extras(framework: str | None = None) -> Iterator[None]:
    """Within: the SKIPPED packages, and ``framework``'s of ``SKIPPED_BY``, cannot be
    imported (one already imported still is).
    Python's own way: a ``None`` in ``sys.modules`` halts an import with
    ``ModuleNotFoundError``, and ``importlib.util.find_spec`` says None, not an error
    (PyTorch's dynamo, which Keras's PyTorch backend imports, asks it of scikit-learn)."""
    blocked = [name for name in (*SKIPPED, *SKIPPED_BY.get(framework or "", ()))
               if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
