"""The largest mini-batch that fits under a memory limit: a doubling then bisecting search
over batch sizes, each probe a run of its own. Pure: ``probe(batch)`` runs (or finds in the
store) one batch size and says whether it fitted; this module decides which to try.

Doubling from ``start`` finds the first batch that does not fit; bisecting between the
last that fitted and it narrows the answer to within ``tolerance`` of itself (at most
``max_probes`` runs in all), since each probe of a large network costs a worker start and
a few steps. Only an out-of-memory counts as 'does not fit'; a probe that fails for
another reason ends the search and says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

Outcome = tuple[bool, str | None]  # (fitted, failure reason when it did not)


@dataclass
class Search:
    largest_ok: int | None = None  # the largest batch that fitted
    smallest_oom: int | None = None  # the smallest batch that ran out of memory
    tried: list[tuple[int, bool, str | None]] = field(default_factory=list)
    stopped: str = ""  # why the search ended early, if it did

    @property
    def found(self) -> bool:
        return self.largest_ok is not None and not self.stopped


def search(probe: Callable[[int], Outcome], start: int = 1, max_batch: int = 4096,
           tolerance: float = 0.1, max_probes: int = 16) -> Search:
    s = Search()

    def run(b: int) -> bool | None:
        ok, reason = probe(b)
        s.tried.append((b, ok, reason))
        if ok:
            s.largest_ok = b
            return True
        if reason == "oom":
            s.smallest_oom = b
            return False
        s.stopped = f"batch {b} failed for another reason than memory ({reason})"
        return None

    b = start
    while b <= max_batch and len(s.tried) < max_probes:
        r = run(b)
        if r is None:
            return s
        if not r:
            break
        b *= 2
    if s.smallest_oom is None:
        if b > max_batch:
            s.stopped = f"every batch up to {max_batch} fitted (raise --max-batch)"
        return s
    lo, hi = s.largest_ok or 0, s.smallest_oom
    while hi - lo > max(1, int(lo * tolerance)) and len(s.tried) < max_probes:
        mid = (lo + hi) // 2
        r = run(mid)
        if r is None:
            return s
        lo, hi = (mid, hi) if r else (lo, mid)
    return s
