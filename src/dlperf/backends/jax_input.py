"""JAX's input pipeline: Grain (``grain.python.DataLoader``), the loader the JAX
ecosystem uses, over a random-access data source.

The data source loads one sample with the framework-free ``Source.load`` (read, decode
with Pillow, flip and normalise with numpy, channels last as the Flax networks take
them, each stage timed); Grain's ``Batch`` stacks samples into numpy batches, which the
trainer puts on the device (``jax.device_put``, JAX's own way in).

Settings: ``loader_workers`` is Grain's ``worker_count`` (processes); ``prefetch`` its
``worker_buffer_size`` (batches per worker, at least 1, as PyTorch's prefetch_factor);
with 0 workers, a prefetch depth makes Grain read ahead that many batches of records in
one thread (``ReadOptions``), and 0 reads in the training loop. Grain's iterator runs
across epochs (its sampler reshuffles each one), so with a cold cache each file is
dropped from the page cache right after it is read: every read is cold.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import psutil

from dlperf.backends.base import UnsupportedError
from dlperf.inputs import cache
from dlperf.inputs.options import Prep
from dlperf.inputs.pipeline import Batch, InputPipeline, Source, loader_cpus

try:
    import grain.python as grain
    from absl import flags
except ImportError:  # the jax extra without Grain
    grain = None


class GrainSource:
    """Grain's random-access data source over a ``Source`` (picklable: Grain sends it to
    its worker processes, which then run on every CPU the launcher may use)."""

    def __init__(self, source: Source, cpus: list[int]):
        self.source, self.cpus = source, cpus
        self._ready = os.getpid()  # a pickled copy in a Grain worker sees another pid

    def __len__(self) -> int:
        return self.source.spec.samples

    def __getitem__(self, i: int) -> tuple[np.ndarray, Any, np.ndarray]:
        if self._ready != os.getpid():  # first sample in a loader process
            os.sched_setaffinity(0, self.cpus)
            os.environ["DLPERF_IN_LOADER"] = "1"
            self._ready = os.getpid()
        x, y, p = self.source.load(int(i))
        if self.source.options.cache == "cold" and self.source.on_disk:
            self._evict(int(i))
        return x, np.asarray(y), np.array([p.read_s, p.decode_s, p.augment_s])

    def _evict(self, i: int) -> None:
        from dlperf.inputs import datasets

        spec = self.source.spec
        name = (f"shard-{i // datasets.SHARD:05d}.bin" if spec.format == "raw"
                else datasets.file_name(spec, i))
        cache.evict([self.source.dir / name])


class GrainPipeline(InputPipeline):
    evict_when = "before the run and after every read"

    def __init__(self, source: Source, batch_size: int, seed: int):
        if grain is None:
            raise UnsupportedError("Grain is not installed: pip install 'dlperf[jax]'")
        super().__init__(source)
        if not flags.FLAGS.is_parsed():  # Grain reads absl flags; dlperf has none to parse
            flags.FLAGS.mark_as_parsed()
        o = source.options
        source.channels_last = True
        self.cpus = loader_cpus()
        sampler = grain.IndexSampler(source.spec.samples, shard_options=grain.NoSharding(),
                                     shuffle=True, num_epochs=None, seed=seed)
        if o.loader_workers:
            read = grain.ReadOptions(num_threads=1, prefetch_buffer_size=0)
            self.prefetch_in_force = max(1, o.prefetch)
        else:
            read = grain.ReadOptions(num_threads=1 if o.prefetch else 0,
                                     prefetch_buffer_size=o.prefetch * batch_size)
            self.prefetch_in_force = o.prefetch
        self.loader = grain.DataLoader(
            data_source=GrainSource(source, self.cpus), sampler=sampler,
            operations=[grain.Batch(batch_size, drop_remainder=True)],
            worker_count=o.loader_workers, worker_buffer_size=max(1, o.prefetch),
            read_options=read)
        self._it = None

    def epoch(self) -> Iterator[Batch]:
        # one endless iterator: Grain's sampler runs epoch after epoch itself
        self._it = iter(self.loader)
        for x, y, prep in self._it:
            p = prep.sum(axis=0)
            yield Batch(x, y, Prep(read_s=float(p[0]), decode_s=float(p[1]),
                                   augment_s=float(p[2])))

    def close(self) -> None:
        self._it = None
        for child in psutil.Process().children(recursive=True):  # Grain's workers
            try:
                child.kill()
            except psutil.Error:
                pass


def build_pipeline(source: Source, batch_size: int, seed: int, device: str) -> GrainPipeline:
    o = source.options
    if o.autotune:
        raise UnsupportedError("dlperf's Grain pipeline has no autotuning: give "
                               "--loader-workers and --prefetch")
    if o.pin_memory or o.device_memory_bytes:
        raise UnsupportedError("pinned memory and a device memory cap are built for "
                               "PyTorch only")
    return GrainPipeline(source, batch_size, seed)
