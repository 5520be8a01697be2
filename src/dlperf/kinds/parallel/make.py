"""Making a parallel run: ``make_spec`` checks a strategy's settings as a whole and builds
the RunSpec, whose options are ``dlperf.kinds.ParallelOptions``.

Framework-free: the CLI, the launcher and the report read these without importing torch.
Only the settings that apply to a strategy are set (``groups`` only for mixed and hybrid,
``micro_batches`` only for pipeline and hybrid, ``push_every`` and ``servers`` only for
async, the training target only with a data set).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from dlperf import workloads
from dlperf.core.errors import UsageError, validation_message
from dlperf.core.spec import Measurement, RunSpec
from dlperf.kinds.parallel.options import (
    DATASETS,
    DEFAULT_EVAL_EVERY,
    DEFAULT_LR,
    LOCKSTEP,
    STRATEGIES,
    ParallelOptions,
)
from dlperf.perfmodel.formulas import default_micro_batches

__all__ = ["DATASETS", "DEFAULT_EVAL_EVERY", "DEFAULT_LR", "LOCKSTEP", "STRATEGIES", "Options",
           "default_groups", "default_threads", "describe", "local_batch", "make_spec"]

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
    """A validated ``kind="parallel"`` RunSpec, the command line's flags in, each default
    the strategy takes filled in. Bad input raises UsageError (one line): the rules are the
    options' own (``ParallelOptions``) and the kind's check of the batch.

    ``batch_size`` is the global mini-batch: split across the workers for data parallelism,
    into ``micro_batches`` for the pipeline. ``threads`` is per worker.
    """
    if threads < 1:
        raise UsageError(f"--threads must be at least 1, got {threads}")
    wl, size, _ = workloads.resolve(network, size, params)
    batch = batch_size or wl.default_batch
    if batch < 1:
        raise UsageError(f"--batch-size must be at least 1, got {batch}")
    opts: dict[str, Any] = {"strategy": strategy, "workers": workers, "push_every": push_every,
                            "servers": servers, "hybrid_within": hybrid_within,
                            "straggler_delay_s": float(straggler_delay_s), "nodes": nodes,
                            "lr": float(lr if lr is not None else DEFAULT_LR)}
    if groups is not None:
        opts["groups"] = groups
    elif strategy in ("mixed", "hybrid") and workers >= 1:
        opts["groups"] = default_groups(workers)
    if micro_batches is not None:
        opts["micro_batches"] = micro_batches
    elif strategy in ("pipeline", "hybrid") and opts.get("groups", 1) >= 1 and workers >= 1:
        groups_ = opts.get("groups", 1) if strategy == "hybrid" else 1
        opts["micro_batches"] = default_micro_batches(batch // groups_, workers // groups_)
    if data is not None:
        opts.update(data=data, eval_every=eval_every or DEFAULT_EVAL_EVERY,
                    # a bound, so that a target never reached cannot run forever
                    max_steps=2000 if max_steps is None and max_time_s is None else max_steps)
    else:
        opts["max_steps"] = max_steps
    opts.update(target_accuracy=target_accuracy, target_loss=target_loss,
                max_time_s=max_time_s, steps=steps, warmup_steps=warmup_steps)
    try:
        return RunSpec(kind="parallel", network=wl.name, size=size, framework="torch",
                       variant="eager", device=device, threads=threads, batch_size=batch,
                       params=dict(params or {}), seed=seed, repeat=repeat,
                       measurement=measurement or Measurement(),
                       options={k: v for k, v in opts.items() if v is not None})
    except ValidationError as e:
        raise UsageError(validation_message(e)) from None


def describe(spec: RunSpec) -> str:
    """Short label: 'fcn5[tiny] sync x2 b64 t1' (+ groups, micro-batches, straggler, data)."""
    return spec.label()
