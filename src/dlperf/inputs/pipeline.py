"""What every framework's input pipeline shares; framework-free.

A ``Source`` is where samples come from (a data set in memory or on disk) and how one is
loaded: read, decode, prepare, each timed, so that a pipeline that runs Python per
sample (PyTorch's DataLoader, Grain) can say where its time went (``Prep``). A framework's
pipeline (``backends/<framework>_input.py``) subclasses ``InputPipeline``: it yields one
epoch of ``Batch``es in the framework's own tensor type, and this class runs epoch after
epoch, evicting the data set from the page cache at each epoch's start when the run asks
for cold reads.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from dlperf.inputs import cache, datasets
from dlperf.inputs.options import InputOptions, Prep

#: DLPERF_LOADER_FAULT=segfault makes a loader worker process die by SIGSEGV at its first
#: sample (tests of a crashing loader; the worker process itself is unaffected)
FAULT_ENV = "DLPERF_LOADER_FAULT"


class Batch(NamedTuple):
    x: Any  # inputs, in the framework's tensor type, on the host
    y: Any  # targets
    prep: Prep | None = None  # the loader's work for this batch, where it can time it


@dataclass
class Source:
    """The samples of one run: a data set in memory (``arrays``) or on disk (``dir``)."""

    spec: datasets.DataSpec
    options: InputOptions
    dir: Path | None = None
    arrays: tuple[np.ndarray, np.ndarray] | None = None
    channels_last: bool = False  # image layout the framework's networks take
    _reader: datasets.Reader | None = field(default=None, repr=False)

    @property
    def on_disk(self) -> bool:
        return self.dir is not None

    @property
    def labels(self) -> np.ndarray:
        return self.arrays[1] if self.arrays is not None else self.reader().labels

    def reader(self) -> datasets.Reader:
        if self._reader is None:
            assert self.dir is not None, "a data set in memory has no reader"
            self._reader = datasets.Reader(self.spec, self.dir)
        return self._reader

    def files(self) -> list[Path]:
        return datasets.files(self.spec, self.dir) if self.dir is not None else []

    def load(self, i: int) -> tuple[np.ndarray, Any, Prep]:
        """Sample ``i`` ready for the network, its target, and the time each stage took."""
        inject_fault()
        t0 = time.perf_counter()
        if self.arrays is not None:
            decoded = self.arrays[0][i]
            t1 = t2 = time.perf_counter()
        else:
            r = self.reader()
            raw = r.read(i)
            t1 = time.perf_counter()
            decoded = r.decode(raw)
            t2 = time.perf_counter()
        x = datasets.prepare(self.spec, decoded, i, self.channels_last)
        if self.options.sample_delay_s:
            time.sleep(self.options.sample_delay_s)
        t3 = time.perf_counter()
        # a raw record's 'decoding' is numpy's frombuffer: microseconds, kept as measured
        return x, self.labels[i], Prep(read_s=t1 - t0, decode_s=t2 - t1, augment_s=t3 - t2)


def inject_fault() -> None:
    if os.environ.get(FAULT_ENV) == "segfault" and os.environ.get("DLPERF_IN_LOADER") == "1":
        import signal

        os.kill(os.getpid(), signal.SIGSEGV)


def summed(preps: list[Prep], collate_s: float = 0.0) -> Prep:
    return Prep(read_s=sum(p.read_s for p in preps), decode_s=sum(p.decode_s for p in preps),
                augment_s=sum(p.augment_s for p in preps), collate_s=collate_s)


def loader_cpus() -> list[int]:
    """CPUs the loader's processes may run on: every CPU the launcher may use. The training
    process is pinned to its thread count's CPUs; its loader workers are not, so that on a
    2-core machine one training thread and one loader worker each have a core, and four
    loader workers visibly compete with the training thread for them."""
    try:
        import psutil

        return sorted(psutil.Process(os.getppid()).cpu_affinity())
    except Exception:  # no parent to ask (or no permission): every CPU of the machine
        return list(range(os.cpu_count() or 1))


class InputPipeline(ABC):
    """Endless mini-batches, epoch after epoch, from one framework's own pipeline."""

    #: the framework's prefetch setting in force (torch's minimum is one batch per worker)
    prefetch_in_force: int | None = None
    #: when a cold run's files are evicted (``cache.Eviction.describe``)
    evict_when: str = "before the run and at every epoch's start"

    def __init__(self, source: Source):
        self.source = source
        self.excluded_s = 0.0  # time spent evicting in the consumer's thread
        self.eviction: cache.Eviction | None = None

    @abstractmethod
    def epoch(self) -> Iterator[Batch]:
        """One pass over the data set, shuffled, whole batches only."""

    def close(self) -> None:  # noqa: B027 (a pipeline without workers has nothing to stop)
        """Stop the loader's workers and threads."""

    def evict(self) -> None:
        if self.source.options.cache == "cold" and self.source.on_disk:
            t0 = time.perf_counter()
            self.eviction = cache.evict(self.source.files())
            self.excluded_s += time.perf_counter() - t0

    def batches(self) -> Iterator[Batch]:
        while True:
            self.evict()
            yield from self.epoch()

    def to_device(self, b: Batch) -> Batch:
        """``b`` on the run's device, the copy finished (loader runs on a GPU time it)."""
        return b


class ThreadPrefetch:
    """Prefetching without loader processes: one thread of the training process runs the
    pipeline ``depth`` batches ahead, as tf.data's ``prefetch`` does. PyTorch's DataLoader
    prefetches only in worker processes; this is how dlperf gives it prefetching with 0
    workers. The thread shares the training process's CPUs and, for Python code, its
    interpreter lock: overlap comes only from code that releases it (file reads, Pillow's
    decoder, numpy)."""

    _END = object()

    def __init__(self, inner: InputPipeline, depth: int):
        self.inner, self.depth = inner, depth
        self.prefetch_in_force = depth
        self.excluded_s = 0.0  # evictions happen in the thread, outside the training loop
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._fill, name="dlperf-prefetch", daemon=True)
        self._thread.start()

    @property
    def eviction(self) -> cache.Eviction | None:
        return self.inner.eviction

    @property
    def evict_when(self) -> str:
        return self.inner.evict_when

    def _fill(self) -> None:
        try:
            for b in self.inner.batches():
                while not self._stop.is_set():
                    try:
                        self._q.put(b, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
        except BaseException as e:  # handed to the consumer, raised there
            self._error = e
            self._q.put(self._END)

    def batches(self) -> Iterator[Batch]:
        while True:
            b = self._q.get()
            if b is self._END:
                raise RuntimeError(f"input pipeline failed: {self._error}") from self._error
            yield b

    def to_device(self, b: Batch) -> Batch:
        return b

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.inner.close()
