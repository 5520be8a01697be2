"""Kind "parallel": one strategy on several workers under torchrun (``dlperf parallel``).

The options check themselves as a whole (``ParallelOptions``' validator), and the batch
against them (``check_batch``, the kind's check of a spec), so a spec built in Python is
checked as one built by ``dlperf.kinds.parallel.make.make_spec``; only the settings that
apply to the strategy are set (``groups`` only for mixed and hybrid,
``micro_batches`` only for the pipeline and hybrid, ``push_every`` and ``servers`` only for
async, the target and budget only with a data set).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import model_validator

from dlperf.core.payload import Frozen, Payload
from dlperf.kinds.peak.options import Peak

STRATEGIES = ("sync", "async", "mixed", "pipeline", "hybrid", "fsdp")
#: strategies whose workers move in lockstep (every rank runs every step)
LOCKSTEP = ("sync", "pipeline", "hybrid", "fsdp")
#: strategies whose workers exchange through the parameter server (torch.distributed.rpc;
#: every other strategy's workers move in lockstep)
THROUGH_A_SERVER = ("async", "mixed")
#: hybrid layouts: what the ranks of one group share (consecutive ranks: one machine)
HYBRID_WITHIN = ("model", "data")
DEFAULT_LR = 0.01  # torch_backend.LEARNING_RATE; repeated here to stay framework-free
DEFAULT_EVAL_EVERY = 10
#: the data sets a parallel run can train on to a target
DATASETS = ("digits", "mnist1d")


class ParallelOptions(Frozen):
    strategy: str
    workers: int
    groups: int = 1
    micro_batches: int = 1
    straggler_delay_s: float = 0.0
    nodes: int = 1
    lr: float = DEFAULT_LR
    data: str | None = None
    target_accuracy: float | None = None
    target_loss: float | None = None
    max_steps: int | None = None
    max_time_s: float | None = None
    eval_every: int = DEFAULT_EVAL_EVERY
    steps: int | None = None
    warmup_steps: int | None = None
    #: async: local steps between exchanges with the parameter server
    push_every: int = 1
    #: async: dedicated parameter-server processes (0: the server lives beside rank 0)
    servers: int = 0
    #: hybrid: 'model' (a group's consecutive ranks hold the pipeline's stages; data
    #: parallel across groups) or 'data' (consecutive ranks are replicas of one stage)
    hybrid_within: str = "model"

    @model_validator(mode="after")
    def _consistent(self) -> ParallelOptions:
        """The strategy's settings as a whole: only the settings that apply to it set, each
        in range. Said in the command line's terms, which name the same settings."""
        s, w = self.strategy, self.workers
        if s not in STRATEGIES:
            raise ValueError(f"unknown strategy '{s}' (known: {', '.join(STRATEGIES)})")
        if w < 1:
            raise ValueError(f"--workers must be at least 1, got {w}")
        if self.nodes < 1 or w % self.nodes:
            raise ValueError(f"--workers {w} cannot be spread evenly over --nnodes {self.nodes}")
        if s in ("mixed", "hybrid"):
            if self.groups < 1 or w % self.groups:
                raise ValueError(f"--groups {self.groups} does not divide --workers {w}")
        elif self.groups != 1:
            raise ValueError(f"--groups applies to the mixed and hybrid strategies only (got "
                             f"--strategy {s})")
        self._check_async()
        if s == "hybrid" and self.hybrid_within not in HYBRID_WITHIN:
            raise ValueError(f"--hybrid-within must be {' or '.join(HYBRID_WITHIN)}, got "
                             f"'{self.hybrid_within}'")
        if s != "hybrid" and self.hybrid_within != "model":
            raise ValueError("--hybrid-within applies to the hybrid strategy only")
        if s not in ("pipeline", "hybrid") and self.micro_batches != 1:
            raise ValueError("--micro-batches applies to the pipeline strategy only")
        if self.straggler_delay_s < 0 or not math.isfinite(self.straggler_delay_s):
            raise ValueError(f"--straggler-delay must be a non-negative number of seconds, "
                             f"got {self.straggler_delay_s}")
        if self.lr <= 0:
            raise ValueError(f"--lr must be positive, got {self.lr}")
        self._check_training()
        for k, least in (("steps", 1), ("warmup_steps", 0)):
            v = getattr(self, k)
            if v is not None and v < least:
                raise ValueError(f"--{k.replace('_', '-')} must be at least {least}, got {v}")
        return self

    def _check_async(self) -> None:
        """The asynchronous strategy's exchange period and dedicated servers."""
        if self.push_every < 1:
            raise ValueError(f"--push-every must be at least 1, got {self.push_every}")
        if self.servers < 0:
            raise ValueError(f"--servers must be 0 (beside rank 0) or more, got {self.servers}")
        if self.strategy != "async":
            if self.push_every != 1:
                raise ValueError("--push-every applies to the async strategy only")
            if self.servers:
                raise ValueError("--servers applies to the async strategy only")
        elif self.servers and self.nodes > 1:
            raise ValueError("dedicated --servers run on one machine only (--nnodes 1)")

    def _check_training(self) -> None:
        """A training target and its budget need a data set; each is positive."""
        if self.data is None:
            if self.has_target:
                raise ValueError("a training target needs real data: add --data digits or "
                                 "mnist1d")
            if self.max_steps is not None or self.max_time_s is not None:
                raise ValueError("--max-steps/--max-time bound a training run: add --data")
            return
        if self.data not in DATASETS:
            raise ValueError(f"unknown data set '{self.data}' (known: {', '.join(DATASETS)})")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise ValueError(f"--target-accuracy must be in (0, 1], got {self.target_accuracy}")
        if self.target_loss is not None and self.target_loss <= 0:
            raise ValueError(f"--target-loss must be positive, got {self.target_loss}")
        for k in ("max_steps", "max_time_s", "eval_every"):
            v = getattr(self, k)
            if v is not None and v <= 0:
                raise ValueError(f"--{k.replace('_s', '').replace('_', '-')} must be positive")

    @property
    def processes(self) -> int:
        """torchrun processes: the workers and the dedicated servers."""
        return self.workers + self.servers

    @property
    def server_ranks(self) -> list[int]:
        """The ranks that hold the parameter server's shards (rank 0 when co-located)."""
        return list(range(self.workers, self.processes)) if self.servers else [0]

    @property
    def stages(self) -> int:
        """Pipeline stages: every worker for the pipeline, a group's workers for hybrid."""
        return self.workers // self.groups if self.strategy == "hybrid" else self.workers

    def hybrid_place(self, rank: int) -> tuple[int, int]:
        """(replica group, stage) of a hybrid rank."""
        s, g = self.stages, self.groups
        return (rank // s, rank % s) if self.hybrid_within == "model" else (rank % g, rank // g)

    def hybrid_rank(self, group: int, stage: int) -> int:
        s, g = self.stages, self.groups
        return group * s + stage if self.hybrid_within == "model" else stage * g + group

    @property
    def straggler_rank(self) -> int | None:
        """The slowed worker: the last rank (never rank 0, which hosts the parameter server,
        unless it is the only worker)."""
        return self.workers - 1 if self.straggler_delay_s > 0 else None

    @property
    def lockstep(self) -> bool:
        return self.strategy in LOCKSTEP

    @property
    def has_target(self) -> bool:
        return self.target_accuracy is not None or self.target_loss is not None

    def group_of(self, rank: int) -> int:
        return rank // (self.workers // self.groups)

    def group_ranks(self, group: int) -> list[int]:
        size = self.workers // self.groups
        return list(range(group * size, (group + 1) * size))

    def label(self, network: str, size: str, batch_size: int, threads: int) -> str:
        """'fcn5[tiny] sync x2 b64 t1' (+ groups, micro-batches, nodes, straggler, data)."""
        parts = [network + ("" if size in ("full", "") else f"[{size}]"),
                 f"{self.strategy} x{self.workers}"]
        if self.strategy in ("mixed", "hybrid"):
            parts.append(f"g{self.groups}")
        if self.strategy == "hybrid" and self.hybrid_within != "model":
            parts.append("data-within")
        if self.strategy in ("pipeline", "hybrid"):
            parts.append(f"mb{self.micro_batches}")
        if self.push_every != 1:
            parts.append(f"k{self.push_every}")
        if self.servers:
            parts.append(f"ps{self.servers}")
        parts += [f"b{batch_size}", f"t{threads}"]
        if self.nodes > 1:
            parts.append(f"{self.nodes} nodes")
        if self.straggler_delay_s:
            parts.append(f"straggler +{self.straggler_delay_s:g}s")
        if self.data:
            parts.append(self.data)
        return " ".join(parts)


def check_batch(spec: Any) -> None:
    """The global batch against the strategy (the spec's batch and its options together):
    split evenly over the workers for data parallelism, over the groups for hybrid, and a
    pipeline's share into whole micro-batches."""
    o, batch = spec.options, spec.batch_size
    if o.strategy in ("pipeline", "hybrid"):
        if o.strategy == "hybrid" and batch % o.groups:
            raise ValueError(f"the global batch {batch} does not split evenly over "
                             f"{o.groups} groups; choose a multiple of --groups")
        share = batch // o.groups if o.strategy == "hybrid" else batch
        if o.micro_batches < 1 or share % o.micro_batches:
            raise ValueError(f"--micro-batches {o.micro_batches} does not divide the batch "
                             f"size {share}" + (" of a group" if o.strategy == "hybrid" else ""))
    elif batch % o.workers:
        raise ValueError(f"the global batch {batch} does not split evenly over {o.workers} "
                         "workers; choose a multiple of --workers")


# ----------------------------------------------------------------------------- outcome
class Parts(Payload):
    """A step split into what the worker did (seconds, or shares of the step)."""

    compute: float | None = None
    comm: float | None = None  # blocked transferring
    wait: float | None = None  # blocked until the other workers arrived
    server: float | None = None  # the parameter server applying or copying weights
    delay: float | None = None  # the straggler's injected delay (inside compute)
    inflight: float | None = None  # DDP's all-reduce in flight, overlapping backward


class Breakdown(Payload):
    shares: Parts = Parts()
    per_step_s: Parts = Parts()
    comm_by_kind_s: dict[str, float] = {}
    allreduce_inflight_s: float | None = None
    allreduce_bytes: float | None = None
    note: str = ""


class RankSummary(Payload):
    rank: int | None = None
    host: str | None = None
    pid: int | None = None
    node: int | None = None
    cpus: list[int] | None = None
    threads_in_force: int | None = None
    role: str | None = None
    steps: int = 0
    median_step_s: float | None = None
    samples_per_s: float | None = None
    compute_share: float | None = None
    comm_share: float | None = None
    wait_share: float | None = None
    server_share: float | None = None
    per_step_s: Parts = Parts()
    comm_by_kind_s: dict[str, float] = {}
    allreduce_bytes: float | None = None
    updates: int | None = None
    stage: dict[str, Any] | None = None  # the pipeline stage this rank ran


class Staleness(Payload):
    """Versions the server's weights had moved on between a worker's pull and its push."""

    count: int
    mean: float
    median: float
    p90: float
    max: int
    histogram: dict[str, int] = {}


class Drift(Payload):
    """At each exchange: the norm of the difference between the worker's weights after its
    local steps and the server's weights when its push arrived (``mean_relative``: over
    the norm of the weights the worker had pulled)."""

    count: int
    mean: float
    median: float
    p90: float
    max: float
    mean_relative: float | None = None


class ServerLoad(Payload):
    """One parameter-server process (or the co-located server) during the timed window."""

    rank: int
    shard_params: int
    busy_share: float | None = None  # time spent applying and copying weights / window
    requests: int = 0
    bytes_in: float = 0.0  # gradients received
    bytes_out: float = 0.0  # weights sent
    bytes_per_s: float | None = None  # in + out over the window
    window_s: float | None = None


class ServerCounts(Payload):
    pushes: int
    applied: int
    duplicates: int
    versions: int
    samples: int


class PipelineLayout(Payload):
    micro_batches: int
    stages: list[dict[str, Any]] | None = None
    cost_source: str | None = None
    ideal_bubble_share: float | None = None


class HostThreads(Payload):
    threads: int = 0
    physical_cores: int = 0
    workers: int = 0


class Straggler(Payload):
    rank: int | None
    delay_s: float


class EvalPoint(Payload):
    train_s: float
    steps: float
    loss: float
    accuracy: float


class Training(Payload):
    """Time to a target on real data under a strategy."""

    data: str | None = None
    target: dict[str, float | None] = {}
    budget: dict[str, float | None] = {}
    reached: bool = False
    time_to_target_s: float | None = None
    steps_to_target: float | None = None
    final: EvalPoint | None = None
    best_accuracy: float | None = None
    eval_s_total: float = 0.0
    curve: list[EvalPoint] = []
    time_axis: str = ""


class Partial(Payload):
    """What the ranks had logged when a run failed."""

    phase: str | None = None
    breakdown: Breakdown | None = None
    per_rank: list[RankSummary] = []
    per_rank_step_times_s: dict[str, list[float]] = {}
    steps_logged: dict[str, int] = {}
    evals: list[dict[str, float]] = []


class ParallelOutcome(Payload):
    strategy: str
    workers: int
    nodes: int = 1
    groups: int | None = None
    threads_per_worker: int | None = None
    total_threads: int | None = None
    physical_cores: int | None = None
    hosts: dict[str, HostThreads] = {}
    oversubscribed: bool = False
    straggler: Straggler | None = None
    phase: str | None = None
    breakdown: Breakdown | None = None
    per_rank: list[RankSummary] = []
    per_rank_step_times_s: dict[str, list[float]] = {}
    timing: dict[str, Any] | None = None  # rank 0's warm-up and timing record
    staleness: Staleness | None = None
    ps: ServerCounts | None = None
    pipeline: PipelineLayout | None = None
    push_every: int | None = None
    drift: Drift | None = None
    servers: list[ServerLoad] = []
    launcher: dict[str, Any] | None = None
    training: Training | None = None
    partial: Partial | None = None  # a failed run: what was logged before it failed
    peak: Peak | None = None  # the machine's peak at the run's total threads (its share)
