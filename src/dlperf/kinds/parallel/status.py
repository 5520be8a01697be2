"""Each rank's current phase, in a small memory-mapped file the launcher can read at any time.

When a run stops making progress, the ranks' step logs alone cannot say who is at fault:
the hung rank and the ranks blocked waiting for it all stop logging. The phase board can:
a rank stuck in compute while the others sit in communication is the culprit. Writing is a
memory copy (no system call), cheap enough to do several times per step.

Framework-free: the worker writes it before torch loads, the launcher reads it.
"""

from __future__ import annotations

import json
import mmap
import os
import time
from dataclasses import dataclass
from pathlib import Path

SIZE = 256

#: phase kinds: starting up (until the first step: imports, rendezvous, building; a
#: stall here is left to the run's timeout, as a busy machine can make it slow),
#: computing, communicating or waiting for others, finished
PHASES = ("starting", "compute", "communication", "done")


class StatusBoard:
    """The writer side: one per rank."""

    def __init__(self, path: str | os.PathLike):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, SIZE)
            self._mm = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)

    def set(self, kind: str, text: str) -> None:
        if kind not in PHASES:
            raise ValueError(f"unknown phase kind '{kind}' (known: {', '.join(PHASES)})")
        blob = json.dumps([kind, time.time(), text[:160]]).encode()[: SIZE - 1]
        self._mm[:SIZE] = blob.ljust(SIZE, b"\0")

    def close(self) -> None:
        self._mm.close()


@dataclass(frozen=True)
class Status:
    rank: int
    kind: str
    since: float
    text: str

    def age(self, now: float | None = None) -> float:
        return (now or time.time()) - self.since


def read(path: Path, rank: int) -> Status | None:
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    for _ in range(3):
        try:
            kind, since, text = json.loads(raw.rstrip(b"\0").decode())
            return Status(rank, kind, float(since), str(text))
        except (ValueError, TypeError):
            time.sleep(0.001)  # caught mid-write; read again
            try:
                raw = path.read_bytes()
            except OSError:
                return None
    return None


def read_all(outdir: Path) -> dict[int, Status]:
    out: dict[int, Status] = {}
    for p in outdir.glob("status_rank*.bin"):
        try:
            rank = int(p.stem.removeprefix("status_rank"))
        except ValueError:
            continue
        s = read(p, rank)
        if s is not None:
            out[rank] = s
    return out


def culprits(statuses: dict[int, Status], expected: list[int] | None = None,
             now: float | None = None) -> str:
    """One line naming the rank(s) most likely at fault for a run that stopped moving.

    A rank still computing while the others wait in communication holds them up; a rank
    with no status never started; otherwise every rank is listed with its phase.
    """
    now = now or time.time()
    missing = [r for r in (expected or []) if r not in statuses]
    if missing:
        return "; ".join(f"rank {r}: never started" for r in missing)
    active = [s for s in statuses.values() if s.kind != "done"]
    computing = [s for s in active if s.kind in ("compute", "starting")]
    waiting = [s for s in active if s.kind == "communication"]
    if computing and waiting:
        who = "; ".join(f"rank {s.rank}: stuck in {s.text} for {s.age(now):.0f} s"
                        for s in sorted(computing, key=lambda s: s.rank))
        others = ", ".join(str(s.rank) for s in sorted(waiting, key=lambda s: s.rank))
        return f"{who} (rank{'s' if len(waiting) > 1 else ''} {others} waiting for it)"
    shown = active or list(statuses.values())
    return "; ".join(f"rank {s.rank}: {s.kind} in {s.text} for "
                     f"{s.age(now):.0f} s" for s in sorted(shown, key=lambda s: s.rank))
