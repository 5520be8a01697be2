"""PyTorch's input pipeline: ``torch.utils.data.DataLoader`` over a generated data set.

The Dataset loads one sample with the framework-free ``Source.load`` (read, decode with
Pillow, flip and normalise with numpy, each timed); the collate function stacks a batch
and sums the loader's work into the batch's ``Prep``. The DataLoader supplies the rest,
as people use it: ``num_workers`` loader processes (persistent across epochs), their
``prefetch_factor``, ``pin_memory``, a seeded shuffle and whole batches only.

With 0 workers the DataLoader loads in the training loop and cannot prefetch; a prefetch
depth then runs it in one background thread (``ThreadPrefetch``). With workers, PyTorch
keeps at least one batch per worker in flight (``prefetch_factor`` >= 1): prefetch 0
runs at that minimum, and the result records the setting in force.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from dlperf.backends.base import UnsupportedError
from dlperf.inputs.pipeline import (
    Batch,
    InputPipeline,
    Source,
    ThreadPrefetch,
    loader_cpus,
    summed,
)


class SampleDataset(Dataset):
    def __init__(self, source: Source):
        self.source = source

    def __len__(self) -> int:
        return self.source.spec.samples

    def __getitem__(self, i: int):
        x, y, prep = self.source.load(int(i))
        return torch.from_numpy(x), y, prep


def collate(items: list) -> Batch:
    t0 = time.perf_counter()
    x = torch.stack([it[0] for it in items])
    y = torch.as_tensor(np.stack([np.asarray(it[1]) for it in items]), dtype=torch.long)
    return Batch(x, y, summed([it[2] for it in items], time.perf_counter() - t0))


def _init_worker(cpus: list[int], worker_id: int) -> None:
    # a loader process may run on every CPU the launcher may use (the training process is
    # pinned to its own threads' CPUs, and a forked child inherits that pinning)
    os.sched_setaffinity(0, cpus)
    os.environ["DLPERF_IN_LOADER"] = "1"


class TorchPipeline(InputPipeline):
    def __init__(self, source: Source, batch_size: int, seed: int, pin_memory: bool):
        super().__init__(source)
        o = source.options
        self.cpus = loader_cpus()
        kw: dict = dict(batch_size=batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(seed), collate_fn=collate,
                        num_workers=o.loader_workers, pin_memory=pin_memory)
        if o.loader_workers:
            kw.update(prefetch_factor=max(1, o.prefetch), persistent_workers=True,
                      worker_init_fn=functools.partial(_init_worker, self.cpus))
        self.prefetch_in_force = max(1, o.prefetch) if o.loader_workers else 0
        self.loader = DataLoader(SampleDataset(source), **kw)

    def epoch(self) -> Iterator[Batch]:
        yield from self.loader

    def close(self) -> None:
        it = getattr(self.loader, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()  # persistent workers end with their iterator


class CudaPrefetch:
    """Prefetching to the GPU: the next ``depth`` batches are copied on a side CUDA stream
    (non_blocking, so a copy from pinned memory overlaps the step on the default stream);
    the training stream waits for a batch's copy before using it."""

    def __init__(self, inner, device: torch.device, depth: int):
        self.inner, self.device, self.depth = inner, device, depth
        self.prefetch_in_force = inner.prefetch_in_force
        self.stream = torch.cuda.Stream(device)

    def __getattr__(self, name: str):  # excluded_s, eviction, cpus: the inner pipeline's
        return getattr(self.inner, name)

    def batches(self) -> Iterator[Batch]:
        src, queue = self.inner.batches(), []

        def load() -> None:
            b = next(src)
            with torch.cuda.stream(self.stream):
                x = b.x.to(self.device, non_blocking=True)
                y = b.y.to(self.device, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
            queue.append((Batch(x, y, b.prep), done))

        for _ in range(self.depth):
            load()
        while True:
            b, done = queue.pop(0)
            torch.cuda.current_stream(self.device).wait_event(done)
            b.x.record_stream(torch.cuda.current_stream(self.device))  # not freed under it
            b.y.record_stream(torch.cuda.current_stream(self.device))
            load()
            yield b

    def to_device(self, b: Batch) -> Batch:
        return b

    def close(self) -> None:
        self.inner.close()


def to_device(b: Batch, device: torch.device) -> Batch:
    """A host batch on the GPU, the copy finished (a loader run's host-to-device time)."""
    x = b.x.to(device, non_blocking=True)
    y = b.y.to(device, non_blocking=True)
    torch.cuda.synchronize(device)
    return Batch(x, y, b.prep)


def cap_device_memory(nbytes: int, device: torch.device) -> float:
    """Let this process allocate at most ``nbytes`` of the GPU (the caching allocator
    raises out-of-memory past it), so a large GPU stands in for a smaller one."""
    # the cap takes a device index ('cuda' alone names none: the current device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    total = torch.cuda.get_device_properties(index).total_memory
    fraction = min(1.0, nbytes / total)
    torch.cuda.set_per_process_memory_fraction(fraction, index)
    return fraction


def build_pipeline(source: Source, batch_size: int, seed: int, device: torch.device):
    """The DataLoader pipeline for ``source``; with 0 workers and a prefetch depth, run in
    a background thread; on a GPU with a prefetch depth, batches are also copied ahead."""
    o = source.options
    if o.autotune:
        raise UnsupportedError("PyTorch's DataLoader has no autotuning: give --loader-workers "
                               "and --prefetch")
    cuda = device.type == "cuda"
    if o.device_memory_bytes is not None:
        if not cuda:
            raise UnsupportedError("a device memory cap needs a GPU (--device gpu)")
        cap_device_memory(o.device_memory_bytes, device)
    p = TorchPipeline(source, batch_size, seed, o.pin_memory and cuda)
    if o.loader_workers == 0 and o.prefetch > 0:
        p = ThreadPrefetch(p, o.prefetch)
    if cuda:
        p.to_device = functools.partial(to_device, device=device)
        if o.prefetch > 0:
            p = CudaPrefetch(p, device, o.prefetch)
    return p
