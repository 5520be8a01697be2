"""Registry of every workload dlperf knows, by name. Framework-free."""

from __future__ import annotations

from typing import Any

from dlperf.core.errors import UsageError
from dlperf.workloads.base import Layer, Workload
from dlperf.workloads.dlbench import DLBENCH
from dlperf.workloads.families import FAMILIES
from dlperf.workloads.transformer import MODERN

WORKLOADS: dict[str, Workload] = {**DLBENCH, **FAMILIES, **MODERN}


def register(workload: Workload) -> None:
    WORKLOADS[workload.name] = workload


def get(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UsageError(
            f"unknown network '{name}' (known: {', '.join(WORKLOADS)})"
        ) from None


def as_defined(name: str, size: str, params: dict[str, Any] | None = None) -> bool:
    """Whether (size, params) run the network as defined: its default size, no parameter
    changed (the only shapes a calibration scoped to networks times)."""
    return not params and size == get(name).default_size


def resolve(name: str, size: str | None, params: dict[str, Any] | None = None):
    """Validate (name, size, params) and return (workload, size, config)."""
    wl = get(name)
    size = size or wl.default_size
    if size not in wl.sizes:
        raise UsageError(
            f"network '{name}' has no size '{size}' (sizes: {', '.join(wl.sizes)})"
        )
    for key in params or {}:
        if key not in wl.tunable:
            allowed = ", ".join(wl.tunable) or "none"
            raise UsageError(f"network '{name}' has no parameter '{key}' (tunable: {allowed})")
    try:
        cfg = wl.config(size, params)
        cfg.layers()
    except (TypeError, ValueError) as e:
        raise UsageError(f"network '{name}': bad parameters {params}: {e}") from None
    return wl, size, cfg


__all__ = ["WORKLOADS", "Layer", "Workload", "get", "register", "resolve"]
