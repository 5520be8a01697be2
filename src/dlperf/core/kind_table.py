"""The kinds of run as core sees them: each kind's options and outcome types and its label.

Core is below the kinds (``dlperf.kinds`` imports core, never the other way), yet a
stored spec must come back with its kind's typed options. So the table is handed to core
once, by dlperf's composition root (``dlperf/__init__.py`` calls ``install`` with
``dlperf.kinds.KINDS``), which Python runs before any module of dlperf is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True)
class KindTypes:
    #: what a run of this kind is asked to do (part of its identity)
    options: type[BaseModel]
    #: what it found besides the metrics (None: the metrics say everything)
    outcome: type[BaseModel] | None = None
    #: (spec, the plain label) -> the label tables show, where the kind says more
    label: Callable[[Any, str], str] | None = None
    #: spec -> None: the kind's rules across the spec's fields and its options (a
    #: ValueError says which was broken), so a spec built anywhere is checked alike
    check: Callable[[Any], None] | None = None


_TABLE: dict[str, KindTypes] = {}


def install(table: Mapping[str, KindTypes]) -> None:
    """Make ``table`` the kinds core knows (dlperf's root does it once, at import)."""
    _TABLE.clear()
    _TABLE.update(table)


def lookup(kind: str) -> KindTypes | None:
    return _TABLE.get(kind)


def names() -> list[str]:
    return list(_TABLE)
