"""The machine's peak kernel rates, kept once for every store on this machine.

The peak a run's share is taken of is a fact of the machine and its libraries, not of a
study: measuring it again for each new store (``--db`` per experiment, a fresh report)
costs a worker per kernel per thread count, about 15 s at one thread on 2 cores. So each
kernel rate measured into any store is also kept in one store of its own
(``$DLPERF_PEAKS``, else ``peaks.db`` beside the default store), and a store that lacks a
rate takes it from there, with the row as it was measured (its machine, versions, times),
so each store still holds every row its shares were taken of. The freshness rule is the
store's own (``kinds.peak.rates.lookup``: same machine, kernel, shape, size, threads,
device and library versions). Only rates are shared: a kernel that failed, and a raised
peak, stay with the store where that happened.

The shared store is a convenience: where it cannot be opened or written, the runs go on
and measure what their own store lacks, as they would without it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path

from dlperf.core.errors import StoreWriteError, UsageError
from dlperf.core.spec import RunResult, RunSpec
from dlperf.core.store import Store, default_path
from dlperf.kinds.peak import rates as peak


def path() -> Path:
    """``$DLPERF_PEAKS``, else ``peaks.db`` beside the default store."""
    if os.environ.get("DLPERF_PEAKS"):
        return Path(os.environ["DLPERF_PEAKS"]).expanduser()
    return default_path().with_name("peaks.db")


def _shareable(row: RunResult) -> bool:
    """A kernel's rate: not a failure, not a raised peak (those stay with their store)."""
    return row.ok and row.spec.network != peak.RAISED


def _shared(store: Store) -> Store | None:
    """The machine's peak store, opened; None where it is ``store`` itself or cannot be
    opened."""
    if path().resolve() == store.path.resolve():
        return None
    try:
        return Store(path())
    except (UsageError, OSError, sqlite3.Error):
        return None


def borrow(store: Store, wanted: Sequence[RunSpec], threads: int, device: str,
           packages: Mapping[str, str]) -> list[RunResult]:
    """The fresh kernel rates of ``wanted`` that the machine's peak store has, copied into
    ``store`` (empty when it has none, or is ``store`` itself, or cannot be read)."""
    shared = _shared(store) if wanted else None
    if shared is None:
        return []
    try:
        with shared:
            found, _ = peak.lookup(shared.peak_results(threads, device), wanted, packages)
    except (OSError, sqlite3.Error):
        return []
    # the environment id is the shared store's: the copy records its own from the row's
    # software
    return [store.add(r.model_copy(update={"env_id": None}))
            for r in found if _shareable(r)]


def keep(store: Store, measured: Sequence[RunResult]) -> None:
    """Keep newly measured kernel rates in the machine's peak store too."""
    rows = [r for r in measured if _shareable(r)]
    shared = _shared(store) if rows else None
    if shared is None:
        return
    try:
        with shared:
            for r in rows:
                shared.add(r.model_copy(update={"env_id": None}))
    except (OSError, sqlite3.Error, StoreWriteError):
        pass  # a convenience: the run's own store has the rows
