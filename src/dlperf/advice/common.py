"""Small pieces every kind of advice shares: names, commands, time to train, memory search,
the bytes of a sample and the storage verdict."""

from __future__ import annotations

import math
from collections.abc import Callable

from dlperf import workloads
from dlperf.perfmodel import catalogue

#: the largest batch the memory search tries (2**16 samples)
MAX_BATCH = 2**16


def name(network: str, size: str | None) -> str:
    return network if size in (None, "", "full") else f"{network} [{size}]"


def sizes(network: str) -> list[str]:
    """The sizes worth comparing: the real one of a DLBench network; small and large of a
    guide family (tiny is a smoke-test size)."""
    wl = workloads.get(network)
    real = [s for s in wl.sizes if s != "tiny"]
    return real or [wl.default_size]


def _size_flag(network: str, size: str | None) -> str:
    wl = workloads.get(network)
    return f" --size {size}" if size and size != wl.default_size else ""


def run_command(network: str, size: str | None, threads: int) -> str:
    return f"dlperf run --network {network}{_size_flag(network, size)} --threads {threads}"


def sweep_command(network: str, size: str | None, frameworks: str, threads: list[int],
                  batch: int | None = None) -> str:
    b = f" --batch-size {batch}" if batch else ""
    return (f"dlperf sweep --networks {network}{_size_flag(network, size)} --frameworks "
            f"{frameworks} --threads {','.join(map(str, sorted(set(threads))))}{b}")


def parallel_command(network: str, cores: int) -> str:
    workers = ",".join(str(w) for w in sorted({1, 2, max(2, cores)}))
    return (f"dlperf parallel --network {network} --strategy sync,async,mixed "
            f"--workers {workers}")


def hours(samples: int, epochs: float, samples_per_s: float) -> float:
    """Time to train in hours: samples x epochs / (samples per second)."""
    return samples * epochs / samples_per_s / 3600


def duration(h: float) -> str:
    if h < 1 / 60:
        return f"{h * 3600:.3g} s"
    if h < 1:
        return f"{h * 60:.3g} min"
    if h < 48:
        return f"{h:.3g} h"
    return f"{h / 24:.3g} days"


def largest_fitting(memory_of: Callable[[int], float], limit_bytes: float,
                    margin: float | None = None) -> int:
    """The largest power-of-two batch whose memory is within the limit (0: not even 1);
    with ``margin`` (the memory model's validated relative error), the memory grown by it
    must be."""
    grow = 1 + (margin or 0.0)
    best, b = 0, 1
    while b <= MAX_BATCH and memory_of(b) * grow <= limit_bytes:
        best, b = b, b * 2
    return best


def sample_bytes(network: str, size: str | None) -> int:
    """Bytes of one input sample as the synthetic data holds it: the input's elements in
    fp32 (4 bytes each; token ids are counted the same)."""
    _, _, cfg = workloads.resolve(network, size, None)
    return 4 * math.prod(cfg.input_shape())


def storage_verdict(need_bytes_per_s: float) -> str:
    """Which catalogued storage reads fast enough for a training rate's input."""
    stores = sorted(catalogue.storage().values(), key=lambda s: s.read_gbps)
    fast = [s for s in stores if s.read_gbps * 1e9 >= need_bytes_per_s]
    need = f"the input needs {need_bytes_per_s / 1e6:.3g} MB/s"
    if len(fast) == len(stores):
        return (f"storage will not be the bottleneck: {need}, and even {stores[0].description} "
                f"reads {stores[0].read_gbps * 1e3:g} MB/s")
    if not fast:
        return (f"storage will be the bottleneck: {need}, more than "
                f"{stores[-1].description} reads ({stores[-1].read_gbps:g} GB/s); keep the "
                "data in memory")
    slow = [s for s in stores if s not in fast]
    return (f"{need}: {', '.join(s.description for s in slow)} would be the bottleneck; "
            f"{fast[0].description} ({fast[0].read_gbps:g} GB/s) keeps up")
