"""Inside a kernel worker: the framework's runtime memory when it trains, per network.

A process that trains holds more than the framework's libraries: the modules of its
optimizer and autograd, the traced or compiled step (TensorFlow's graph, XLA's executable
and what its compiler left in the C library's heaps), the kernels' own code and buffers.
Measured here (2-vCPU AMD EPYC, one thread, fresh processes), training the tiny size of a
DLBench network for two steps took beyond the imported framework: PyTorch 85-101 MiB,
TensorFlow 17-43 MiB, JAX 99-266 MiB (FCN-5 the least, ResNet-50 the most: XLA's compile
of a deeper step). The memory model's baseline (``perfmodel.memory``) is that runtime.

Before its kernels, a one-thread CPU worker at fp32 trains the tiny size of each network
of its calibration and reads its peak resident memory; less the memory model's count of
that tiny step's tensors (at most a few MiB), it is the network's runtime baseline. The
networks follow one another in the one process, each from a fresh peak
(``environment.restart_peak_resident``: the heaps' free memory, an earlier compile's,
returned to the system first). What an earlier network left alive still counts in a
later one's peak: here JAX's FCN-5 after AlexNet read 298 MiB against 283 alone (flax's
and optax's modules, XLA's caches), PyTorch's and TensorFlow's networks within 20 MiB of
alone.
"""

from __future__ import annotations

from dlperf import workloads
from dlperf.backends.base import Backend
from dlperf.core import environment
from dlperf.core.framework_table import resolve_variant
from dlperf.core.spec import RunSpec
from dlperf.perfmodel.kernels import KernelOptions
from dlperf.perfmodel.memory import step_memory

#: the networks whose runtime a calibration of the whole grid measures (a scoped one, its
#: scope's)
GRID_NETWORKS = ("fcn5", "alexnet", "resnet50", "lstm32")
#: training steps of each tiny network: the first traces or compiles, the second runs as
#: every later step does
STEPS = 2


def measures(spec: RunSpec) -> bool:
    """Whether ``spec``'s worker measures the training runtimes: a CPU grid's at one thread
    and fp32 (its runtime is the one a step's process holds beside its tensors; a GPU's
    baseline is none, the allocator's peak holding tensors alone)."""
    o = spec.options
    return (isinstance(o, KernelOptions) and spec.network == "kernels"
            and spec.device == "cpu" and spec.threads == 1 and spec.precision == "fp32")


def networks(o: KernelOptions) -> tuple[str, ...]:
    """The networks of a calibration's scope ('alexnet@16' -> 'alexnet'), else the grid's."""
    if not o.scope:
        return GRID_NETWORKS
    return tuple(dict.fromkeys(label.split("@")[0] for label in o.scope))


def train_runtimes(o: KernelOptions, backend: Backend, failures: dict[str, str]
                   ) -> tuple[dict[str, int], dict[str, int]]:
    """Per network of ``o``: (the worker's peak resident memory after training its tiny size,
    that peak less the memory model's tensors of the step). A network that fails is
    recorded in ``failures`` ('runtime alexnet') and left out."""
    peaks: dict[str, int] = {}
    runtimes: dict[str, int] = {}
    for net in networks(o):
        environment.restart_peak_resident()
        try:
            _, _, cfg = workloads.resolve(net, "tiny", {})
            batch = workloads.get(net).default_batch
            trainer = backend.build(net, cfg, batch, resolve_variant(backend.name, ""),
                                    "cpu", 0)
            for _ in range(STEPS):
                trainer.step()
                trainer.sync()
            del trainer
        except Exception as e:
            failures[f"runtime {net}"] = f"{type(e).__name__}: {e}"[:300]
            continue
        peaks[net] = environment.peak_resident_bytes()
        tensors = step_memory(cfg.layers(), batch, "fp32", framework=backend.name).total
        runtimes[net] = int(peaks[net] - tensors)
    return peaks, runtimes
