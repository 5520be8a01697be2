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

import importlib.abc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: the packages a framework's import may try and go on without
SKIPPED = ("sklearn", "matplotlib")


class _Skip(importlib.abc.MetaPathFinder):
    """Says a skipped package is not there: an ``ImportError`` the importer expects."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in SKIPPED:
            raise ModuleNotFoundError(f"{name}: skipped while a framework imports", name=name)
        return None


@contextmanager
def skipping_extras() -> Iterator[None]:
    """Within: the SKIPPED packages cannot be imported (one already imported still is)."""
    finder = _Skip()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)

