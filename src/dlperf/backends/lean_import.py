"""A framework imported without the optional extras its import pulls in and a worker never
uses.

Keras 3, which TensorFlow imports, tries scikit-learn (for its estimator wrappers) and
matplotlib's pyplot (for an image-gallery plot) and carries on without them where they are
missing. A TensorFlow worker uses neither, and they cost 1.2 to 1.5 s of its 4 to 5 s
import on a 2-core Xeon; dlperf starts one such process per measured configuration and per
calibration worker. Only the import is affected: once it is done, both import as usual
(dlperf's digits data set reads scikit-learn's).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: the packages a framework's import may try and go on without
SKIPPED = ("sklearn", "matplotlib")


@contextmanager
def skipping_extras() -> Iterator[None]:
    """Within: the SKIPPED packages cannot be imported (one already imported still is).
    Python's own way: a ``None`` in ``sys.modules`` halts an import with
    ``ModuleNotFoundError``, and ``importlib.util.find_spec`` says None, not an error
    (PyTorch's dynamo, which Keras's PyTorch backend imports, asks it of scikit-learn)."""
    blocked = [name for name in SKIPPED if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
