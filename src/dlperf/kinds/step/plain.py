"""The plain measurement of a configuration: what a table of published numbers sets beside
them (the guide's thread table, DLBench's Table 4)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

from dlperf.core import framework_table
from dlperf.core.aggregate import ConfigResult
from dlperf.core.settings import settings_rank

K = TypeVar("K", bound=Hashable)


def plain(row: ConfigResult) -> bool:
    """Measured, at the full size, fp32, the framework's default variant, no network
    parameters, in dlperf's own environment."""
    s = row.spec
    info = framework_table.BACKENDS.get(s.framework)
    return (row.measured and s.size in ("full", "") and s.precision == "fp32"
            and not s.params and not s.env
            and not (info and s.variant != info.default_variant))


def fullest(rows: Iterable[ConfigResult], key: Callable[[ConfigResult], K]
            ) -> dict[K, dict[int, ConfigResult]]:
    """key -> threads -> the plain row measured with the fullest settings."""
    best: dict[K, dict[int, ConfigResult]] = {}
    for r in rows:
        if not plain(r):
            continue
        slot = best.setdefault(key(r), {})
        have = slot.get(r.spec.threads)
        if have is None or settings_rank(r.spec.measurement) < settings_rank(
                have.spec.measurement):
            slot[r.spec.threads] = r
    return best
