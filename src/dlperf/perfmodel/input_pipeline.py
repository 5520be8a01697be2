"""The input pipeline's term: how long a training step waits for its mini-batch, and how
much the loader's work on shared cores slows the step itself. Framework-free: the
loader's cost per sample comes from this machine's calibration
(``kinds.dataflow.calibration``), the step's time from the rest of the model.

The loader and the step form a producer and a consumer with a bounded queue between
them. In steady state a mini-batch takes the slower of the two (DS-Analyzer: "the
training speed is bounded by the slowest of fetch, pre-processing and GPU compute",
Mohan et al., "Analyzing and Mitigating Data Stalls in DNN Training", VLDB 2021, sec. 3),
and the step waits (stalls) for whatever the loader adds beyond the step. Where the
loader's processes or threads run on the training's cores they also stretch the step:
a parallel region runs as long as its slowest thread, so every moment a loader takes
from one of its cores delays the whole region (Petrini, Kerbyson, Pakin, "The case of
the missing supercomputer performance", SC 2003: system noise on one processor of a
bulk-synchronous computation delays them all).

Units: seconds per mini-batch unless named otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, computed_field

#: a stall share at or below this counts as stall-free: the loader keeps up (the
#: measured side of ``dlperf validate`` uses the same threshold)
STALL_FREE_SHARE = 0.05
#: loader workers ``--loader-workers auto`` considers at most
MAX_WORKERS = 64
#: frameworks whose loader with 0 workers and a prefetch depth is a thread of the
#: training process, on its cores (PyTorch: dlperf's ThreadPrefetch; JAX: Grain's
#: ReadOptions thread); tf.data's prefetch thread starts on the loader's CPUs instead
#: (docs/dataflow.md, "The settings")
THREAD_ON_TRAINING_CORES = ("torch", "jax")


class LoaderCost(BaseModel):
    """One loader's work for one sample of one data set, measured on this machine: a
    loader-alone run with no workers and no prefetch, so its wall time is its CPU time
    (``kinds.dataflow.calibration``)."""

    model_config = ConfigDict(frozen=True)

    framework: str
    data: str  # the samples' shape and where they come from: 'image 224x224x3 jpeg'
    per_sample_s: float  # read, decode, augment and its share of collating
    #: the same by stage, where the loader times its stages (PyTorch, Grain)
    stages: dict[str, float] = {}
    #: bytes a sample holds on disk (what a cold read fetches from storage; 0 in memory)
    sample_bytes: float = 0.0
    source: str  # the calibration run: batch, samples, when


class InputPrediction(BaseModel):
    """The input pipeline's part of a predicted step."""

    model_config = ConfigDict(frozen=True)

    input: str  # the settings, as a run's label names them: 'disk:jpeg w2 p2'
    placement: str  # where the loader's work runs, in words
    workers: int
    loader_cpu_s: float  # one batch's loader work (CPU)
    loader_wait_s: float  # one batch's waits that use no CPU (storage, an added delay)
    train_s: float  # the step on data already in place (the rest of the model)
    stretched_s: float  # the step as the loader's work on its cores stretches it
    stall_s: float  # the wait for the next mini-batch
    time_s: float  # stretched_s + stall_s
    #: the smallest loader-worker count at which the pipeline (stall and stretch) adds at
    #: most STALL_FREE_SHARE to the step (None: none up to MAX_WORKERS)
    stall_free_workers: int | None
    loader: LoaderCost

    @computed_field  # type: ignore[prop-decorator]
    @property
    def stall_share(self) -> float:
        return self.stall_s / self.time_s if self.time_s > 0 else 0.0


@dataclass(frozen=True)
class Placement:
    """Where a pipeline's loader runs, from the framework and its settings."""

    ahead: bool  # runs ahead of the training loop (a prefetch thread or workers)
    parallel: int  # loaders building batches at once (0 for the loop itself)
    on_training_cores: bool  # confined to the training process's cores
    words: str


def placement(framework: str, workers: int, prefetch: int, cores: int) -> Placement:
    """How ``framework``'s pipeline runs with ``workers`` and ``prefetch``
    (docs/dataflow.md): 0 and 0 loads in the training loop; 0 workers and a depth runs one
    thread ahead; N workers are N processes (PyTorch's DataLoader, Grain) or N threads of
    tf.data's parallel map, free to run on every one of the ``cores``."""
    if workers == 0 and prefetch == 0:
        return Placement(False, 0, True, "in the training loop")
    if workers == 0:
        own = framework in THREAD_ON_TRAINING_CORES
        return Placement(True, 1, own, "one thread ahead, " + (
            "on the training's cores" if own else f"on any of the {cores} cores"))
    what = "thread" if framework == "tensorflow" else "process"
    what += ("es" if what == "process" else "s") if workers > 1 else ""
    return Placement(True, workers, False, f"{workers} {what} ahead, on any of the "
                     f"{cores} cores")


def stretched(train_s: float, busy_s: float, taken_s: float) -> float:
    """The step with ``taken_s`` of its cores' time given to the loader: one for one while
    the step keeps its cores busy (``busy_s`` of its ``train_s``: all of it on a CPU, the
    launches on a GPU; the slowest thread sets a parallel region's end, Petrini et al.
    2003), at most ``busy_s`` more (the scheduler's fair share of a core between the step
    and the loader that wants it: each gets half while both run)."""
    return train_s + min(taken_s, busy_s)


def steady_state(train_s: float, threads: int, cores: int, cpu_s: float, wait_s: float,
                 where: Placement, busy_s: float | None = None, shared_s: float = 0.0
                 ) -> tuple[float, float, float]:
    """(time per mini-batch, the step as stretched, the stall) in steady state.

    ``train_s``: the step on ``threads`` of the ``cores``, keeping them busy ``busy_s`` of
    it (None: all of it, a CPU's step); ``cpu_s`` and ``wait_s``: one batch's loader work
    and its waits that take no CPU (reads from a cold storage, an added delay), done by
    ``where``; ``shared_s``: the batch's time on what every loader shares (a storage
    streaming all their reads), which no number of loaders shortens.

    In the loop the step waits for all of it. Ahead of it the time is the largest of the
    step (stretched by the loader's work that lands on its cores), one loader's batch over
    the loaders building batches at once, all the CPU work over the cores that can take
    it, and the shared storage's time (DS-Analyzer's bounds, the module's docstring). The
    loader takes first the cores the step leaves free, then the step's."""
    busy = train_s if busy_s is None else busy_s
    if not where.ahead:
        return train_s + cpu_s + wait_s, train_s, cpu_s + wait_s
    usable = threads if where.on_training_cores else max(cores, threads)
    free = 0 if where.on_training_cores else max(0, cores - threads)
    loader_s = max((cpu_s + wait_s) / where.parallel, shared_s)
    capacity_s = (busy * threads + cpu_s) / usable

    def step(time: float) -> float:
        # the loader's work beyond what the free cores do while one batch goes by
        return stretched(train_s, busy, max(0.0, cpu_s - free * time))

    time = max(train_s, loader_s, capacity_s)
    for _ in range(50):  # the stretch depends on the time, which depends on the stretch
        new = max(step(time), loader_s, capacity_s)
        if abs(new - time) <= 1e-12 * max(1.0, new):
            break
        time = new
    done = min(time, step(time))
    return time, done, time - done


def stall_free_workers(train_s: float, threads: int, cores: int, cpu_s: float,
                       wait_s: float, framework: str, prefetch: int,
                       busy_s: float | None = None, shared_s: float = 0.0) -> int | None:
    """The smallest loader-worker count at ``prefetch`` whose predicted stall share is at
    most STALL_FREE_SHARE and whose stretch of the step is too (None: none up to
    MAX_WORKERS): the count at which the input pipeline costs the step at most that."""
    for w in range(MAX_WORKERS + 1):
        time, _, stall = steady_state(train_s, threads, cores, cpu_s, wait_s,
                                      placement(framework, w, prefetch, cores), busy_s,
                                      shared_s)
        if time - train_s <= STALL_FREE_SHARE * time:
            return w
    return None


def predict_input(*, train_s: float, threads: int, cores: int, batch: int,
                  cost: LoaderCost, workers: int, prefetch: int, label: str,
                  wait_per_sample_s: float = 0.0, copy_s: float = 0.0,
                  copy_ahead: bool = False, busy_s: float | None = None,
                  shared_per_sample_s: float = 0.0) -> InputPrediction:
    """The input pipeline's part of a step of ``batch`` samples that takes ``train_s`` on
    data in place, keeping its cores busy ``busy_s`` of it (None: all of it).
    ``wait_per_sample_s``: waits without CPU per sample (an added delay, a cold read at
    the storage's rate); ``copy_s``: the batch's host-to-device copy, in the step, or
    among the loader's waits when ``copy_ahead`` (a side stream copies the next batch
    during the step); ``shared_per_sample_s``: a sample's time on what all loaders share
    (the storage's streaming, or a hard disk's seek)."""
    cpu = batch * cost.per_sample_s
    shared = batch * shared_per_sample_s
    wait = batch * wait_per_sample_s + (copy_s if copy_ahead else 0.0)
    step = train_s + (0.0 if copy_ahead else copy_s)
    where = placement(cost.framework, workers, prefetch, cores)
    time, stretched_s, stall = steady_state(step, threads, cores, cpu, wait, where, busy_s,
                                            shared)
    return InputPrediction(
        input=label, placement=where.words, workers=workers, loader_cpu_s=cpu,
        loader_wait_s=wait, train_s=step, stretched_s=stretched_s, stall_s=stall,
        time_s=time, loader=cost,
        stall_free_workers=stall_free_workers(step, threads, cores, cpu, wait,
                                              cost.framework, prefetch, busy_s, shared))
