"""Cold reads: evict files from the operating system's page cache.

``posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)`` asks the kernel to drop a file's cached
pages (Linux drops the clean ones; the data sets are fsync'ed when written, so all of
theirs are clean). It needs no privileges, unlike writing to /proc/sys/vm/drop_caches,
and touches only the files named. Where the platform has no posix_fadvise, or the file
system refuses it, the result says so and the run reads whatever the cache holds.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Eviction:
    files: int  # files whose pages were dropped
    nbytes: int
    refused: str = ""  # why nothing (or not everything) was evicted

    @property
    def ok(self) -> bool:
        return not self.refused

    def describe(self, when: str = "before the run and at every epoch's start") -> str:
        if self.refused:
            return f"page cache not evicted: {self.refused}"
        return (f"posix_fadvise DONTNEED on {self.files} files ({self.nbytes / 2**20:.1f} MiB) "
                f"{when}")


def evict(paths: Iterable[Path]) -> Eviction:
    """Drop ``paths`` from the page cache; never raises for a refusal."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return Eviction(0, 0, "this platform has no posix_fadvise")
    done = nbytes = 0
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError as e:
            return Eviction(done, nbytes, f"cannot open {p}: {e.strerror}")
        try:
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            nbytes += os.fstat(fd).st_size
            done += 1
        except OSError as e:
            return Eviction(done, nbytes, f"posix_fadvise refused on {p}: {e.strerror}")
        finally:
            os.close(fd)
    return Eviction(done, nbytes)
