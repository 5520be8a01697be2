"""Loading a framework's backend (worker side only). The table of frameworks is
``dlperf.core.framework_table``; importing this module imports no framework."""

from __future__ import annotations

import importlib

from dlperf.backends.base import Backend, Trainer, UnsupportedError
from dlperf.core.framework_table import (
    BACKENDS,
    BackendInfo,
    info,
    installed,
    require,
    resolve_variant,
)


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
