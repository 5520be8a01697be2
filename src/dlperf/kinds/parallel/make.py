"""Making a parallel run: ``make_spec`` checks a strategy's settings as a whole and builds
the RunSpec, whose options are ``dlperf.kinds.ParallelOptions``.

Framework-free: the CLI, the launcher and the report read these without importing torch.
Only the settings that apply to a strategy are set (``groups`` only for mixed and hybrid,
``micro_batches`` only for pipeline and hybrid, ``push_every`` and ``servers`` only for
async, the training target only with a data set).
"""

from __future__ import annotations

import math
from typing import Any

from dlperf import workloads
from dlperf.core.errors import UsageError
from dlperf.core.spec import Measurement, RunSpec
from dlperf.kinds.parallel.options import (
    DEFAULT_EVAL_EVERY,
    DEFAULT_LR,
    HYBRID_WITHIN,
    LOCKSTEP,
    STRATEGIES,
    ParallelOptions,
)

__all__ = ["DATASETS", "DEFAULT_EVAL_EVERY", "DEFAULT_LR", "LOCKSTEP", "STRATEGIES", "Options",
           "default_groups", "default_threads", "describe", "local_batch", "make_spec"]

DATASETS = ("digits", "mnist1d")

#: the options of a parallel run (kept under their earlier name for the torch wing)
Options = ParallelOptions


def default_groups(workers: int) -> int:
    """Mixed-asynchronous default: groups of two workers (one group when there are two)."""
    if workers == 1:
        return 1
    if workers % 2:
        raise UsageError(f"--workers {workers} is odd: give --groups for the mixed strategy")
    return workers // 2


def default_threads(workers_on_node: int, physical_cores: int) -> int:
    """Threads per worker so that the workers of one node do not fight for cores."""
    return max(1, physical_cores // max(1, workers_on_node))


def local_batch(batch_size: int, o: Options) -> int:
    """Samples one worker processes per step."""
    if o.strategy == "pipeline":
        return batch_size  # every stage sees the whole batch, in micro-batches
    if o.strategy == "hybrid":
        return batch_size // o.groups  # a group's stages see the group's share
    return batch_size // o.workers


def make_spec(
    network: str,
    *,
    strategy: str,
    workers: int,
    size: str | None = None,
    batch_size: int | None = None,
    threads: int = 1,
    groups: int | None = None,
    micro_batches: int | None = None,
    straggler_delay_s: float = 0.0,
    nodes: int = 1,
    lr: float | None = None,
    data: str | None = None,
    target_accuracy: float | None = None,
    target_loss: float | None = None,
    max_steps: int | None = None,
    max_time_s: float | None = None,
    eval_every: int | None = None,
    steps: int | None = None,
    warmup_steps: int | None = None,
    push_every: int = 1,
    servers: int = 0,
    hybrid_within: str = "model",
    params: dict[str, Any] | None = None,
    device: str = "cpu",
    seed: int = 0,
    repeat: int = 0,
    measurement: Measurement | None = None,
) -> RunSpec:
    """A validated ``kind="parallel"`` RunSpec. Bad input raises UsageError (one line).

    ``batch_size`` is the global mini-batch: split across the workers for data parallelism,
    into ``micro_batches`` for the pipeline. ``threads`` is per worker.
    """
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy '{strategy}' (known: {', '.join(STRATEGIES)})")
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    if nodes < 1 or workers % nodes:
        raise UsageError(f"--workers {workers} cannot be spread evenly over --nnodes {nodes}")
    if threads < 1:
        raise UsageError(f"--threads must be at least 1, got {threads}")
    wl, size, _ = workloads.resolve(network, size, params)
    batch = batch_size or wl.default_batch
    if batch < 1:
        raise UsageError(f"--batch-size must be at least 1, got {batch}")
    opts: dict[str, Any] = {"strategy": strategy, "workers": workers}
    if strategy in ("mixed", "hybrid"):
        g = groups if groups is not None else default_groups(workers)
        if g < 1 or workers % g:
            raise UsageError(f"--groups {g} does not divide --workers {workers}")
        opts["groups"] = g
    elif groups not in (None, 1):
        raise UsageError(f"--groups applies to the mixed and hybrid strategies only (got "
                         f"--strategy {strategy})")
    _period_and_servers(strategy, push_every, servers, nodes, opts)
    if strategy == "hybrid":
        if hybrid_within not in HYBRID_WITHIN:
            raise UsageError(f"--hybrid-within must be {' or '.join(HYBRID_WITHIN)}, got "
                             f"'{hybrid_within}'")
        if hybrid_within != "model":
            opts["hybrid_within"] = hybrid_within
    elif hybrid_within != "model":
        raise UsageError("--hybrid-within applies to the hybrid strategy only")
    if strategy in ("pipeline", "hybrid"):
        share = batch // opts.get("groups", 1)  # what one pipeline sees per step
        if strategy == "hybrid" and batch % opts["groups"]:
            raise UsageError(f"the global batch {batch} does not split evenly over "
                             f"{opts['groups']} groups; choose a multiple of --groups")
        stages = workers // opts.get("groups", 1)
        m = micro_batches if micro_batches is not None else min(share, 4 * stages)
        if m < 1 or share % m:
            raise UsageError(f"--micro-batches {m} does not divide the batch size {share}"
                             + (" of a group" if strategy == "hybrid" else ""))
        opts["micro_batches"] = m
    else:
        if micro_batches not in (None, 1):
            raise UsageError("--micro-batches applies to the pipeline strategy only")
        if batch % workers:
            raise UsageError(f"the global batch {batch} does not split evenly over {workers} "
                             "workers; choose a multiple of --workers")
    if straggler_delay_s < 0 or not math.isfinite(straggler_delay_s):
        raise UsageError(f"--straggler-delay must be a non-negative number of seconds, "
                         f"got {straggler_delay_s}")
    if straggler_delay_s:
        opts["straggler_delay_s"] = float(straggler_delay_s)
    if nodes > 1:
        opts["nodes"] = nodes
    opts["lr"] = float(lr if lr is not None else DEFAULT_LR)
    if opts["lr"] <= 0:
        raise UsageError(f"--lr must be positive, got {lr}")
    if data is None:
        if target_accuracy is not None or target_loss is not None:
            raise UsageError("a training target needs real data: add --data digits or mnist1d")
        if max_steps is not None or max_time_s is not None:
            raise UsageError("--max-steps/--max-time bound a training run: add --data")
    else:
        if data not in DATASETS:
            raise UsageError(f"unknown data set '{data}' (known: {', '.join(DATASETS)})")
        if target_accuracy is not None and not 0 < target_accuracy <= 1:
            raise UsageError(f"--target-accuracy must be in (0, 1], got {target_accuracy}")
        if target_loss is not None and target_loss <= 0:
            raise UsageError(f"--target-loss must be positive, got {target_loss}")
        if max_steps is None and max_time_s is None:
            max_steps = 2000  # a bound, so that a target never reached cannot run forever
        opts["data"] = data
        for k, v in (("target_accuracy", target_accuracy), ("target_loss", target_loss),
                     ("max_steps", max_steps), ("max_time_s", max_time_s)):
            if v is not None:
                if v <= 0:
                    raise UsageError(f"--{k.replace('_s', '').replace('_', '-')} must be positive")
                opts[k] = v
        opts["eval_every"] = eval_every or DEFAULT_EVAL_EVERY
    for k, v in (("steps", steps), ("warmup_steps", warmup_steps)):
        if v is not None:
            if v < (1 if k == "steps" else 0):
                raise UsageError(f"--{k.replace('_', '-')} must be at least "
                                 f"{1 if k == 'steps' else 0}, got {v}")
            opts[k] = v
    return RunSpec(kind="parallel", network=wl.name, size=size, framework="torch",
                   variant="eager", device=device, threads=threads, batch_size=batch,
                   params=dict(params or {}), seed=seed, repeat=repeat,
                   measurement=measurement or Measurement(), options=ParallelOptions(**opts))


def _period_and_servers(strategy: str, push_every: int, servers: int, nodes: int,
                        opts: dict[str, Any]) -> None:
    """The asynchronous strategy's exchange period and dedicated servers."""
    if push_every < 1:
        raise UsageError(f"--push-every must be at least 1, got {push_every}")
    if servers < 0:
        raise UsageError(f"--servers must be 0 (beside rank 0) or more, got {servers}")
    if strategy != "async":
        if push_every != 1:
            raise UsageError("--push-every applies to the async strategy only")
        if servers:
            raise UsageError("--servers applies to the async strategy only")
        return
    if servers and nodes > 1:
        raise UsageError("dedicated --servers run on one machine only (--nnodes 1)")
    if push_every != 1:
        opts["push_every"] = push_every
    if servers:
        opts["servers"] = servers


def describe(spec: RunSpec) -> str:
    """Short label: 'fcn5[tiny] sync x2 b64 t1' (+ groups, micro-batches, straggler, data)."""
    return spec.label()
