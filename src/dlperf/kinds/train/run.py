"""Training to a quality target in one process: RunSpecs of kind "train".

The worker calls ``run_training`` in a fresh process with the thread count already in
force. It loads the family's real data set (fixed split), builds the trainer through the
backend, trains on shuffled mini-batches (order seeded by ``spec.seed``) and evaluates
on the held-out split every ``eval_every`` steps, until the quality target is reached,
or a step, epoch or time budget ends (``dlperf.core.target_rules``). A budget that ends
first is a failure with reason "budget" that still carries the whole curve.

Times: ``train_s`` is the time spent training (feeding batches, steps, DBN
pre-training), evaluation excluded; ``eval_s`` the evaluation time; the time budget
counts training time only, so how often one evaluates does not change when a run stops.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlperf import workloads
from dlperf.core.errors import UsageError, is_out_of_memory
from dlperf.core.spec import Metrics, RunResult, RunSpec
from dlperf.kinds.train.options import Quality as QualityRecord
from dlperf.kinds.train.options import TrainOutcome
from dlperf.kinds.train.quality import Evaluator, load_data, quality_of
from dlperf.kinds.train.resolve import budget_of, check_options
from dlperf.workloads import real_data as data


# ----------------------------------------------------------------------------- the loop
@dataclass
class _Clock:
    """Training and evaluation time, kept apart."""

    train_s: float = 0.0
    eval_s: float = 0.0

    def timed(self, fn: Callable[[], Any], into: str = "train_s") -> Any:
        t0 = time.perf_counter()
        out = fn()
        setattr(self, into, getattr(self, into) + time.perf_counter() - t0)
        return out


def run_training(
    spec: RunSpec, backend: Any, emit: Callable[[dict], None], base: dict[str, Any]
) -> RunResult:
    """Train ``spec`` to its target in this process; never raises for a failure."""
    from dlperf.backends.base import UnsupportedError

    try:
        opts = check_options(spec.network, spec.options)
        wl, _, cfg = workloads.resolve(spec.network, spec.size, spec.params)
        ds = load_data(cfg)
        trainer = backend.build(
            spec.network, cfg, spec.batch_size, spec.variant, spec.device, spec.seed
        )
        if not hasattr(trainer, "outputs"):
            raise UnsupportedError(f"{spec.framework} cannot train '{spec.network}' to a target")
        return _train(spec, trainer, ds, opts, emit, base)
    except UnsupportedError as e:
        return RunResult.failed(spec, "unsupported", str(e), finished_at=time.time(), **base)
    except UsageError as e:
        return RunResult.failed(spec, "error", str(e), finished_at=time.time(), **base)
    except Exception as e:
        tb = traceback.format_exc(limit=3).strip().splitlines()[-1]
        msg = f"{type(e).__name__}: {e}".strip()[:500] or tb
        return RunResult.failed(
            spec, "oom" if is_out_of_memory(e) else "error", msg, finished_at=time.time(), **base
        )


def _train(
    spec: RunSpec,
    trainer: Any,
    ds: data.Dataset,
    opts: dict[str, Any],
    emit: Callable[[dict], None],
    base: dict[str, Any],
) -> RunResult:
    quality, target = quality_of(spec.network, opts.get("measure")), opts["target"]
    goal = quality.goal(target) if target is not None else None
    budget = budget_of(opts)
    evaluate = Evaluator(spec.network, ds, opts.get("measure"))
    n_train, bs = len(ds.x_train), spec.batch_size
    if bs > n_train:
        raise UsageError(f"batch size {bs} exceeds the {n_train} training examples")
    steps_per_epoch = n_train // bs
    # a quarter epoch; an epoch for MMD^2 (the GAN's), which costs 100 times a step
    per_epoch = 1 if quality.name == "mmd2" else 4
    eval_every = opts.get("eval_every") or max(1, steps_per_epoch // per_epoch)
    if "lr" in opts:
        trainer.set_lr(opts["lr"])
    opts.setdefault("lr", trainer.default_lr)
    batches = ds.batches(bs, np.random.default_rng(spec.seed))
    clock = _Clock()
    curve: list[list[float]] = []  # [step, training time, quality]
    losses: list[list[float]] = []  # [step, loss of the last step]
    step_times: list[float] = []
    extra: dict[str, Any] = {}

    def feed() -> None:
        x, y = next(batches)
        trainer.set_batch(x, y)

    def out_of_budget(steps: int) -> str | None:
        return budget.spent(steps=steps, epochs=steps * bs / n_train, train_s=clock.train_s)

    # DBN: greedy layer-wise pre-training, timed on its own
    pretrain_steps = 0
    if hasattr(trainer, "pretrain_step"):
        opts.setdefault("pretrain_lr", trainer.pretrain_lr)
        trainer.set_pretrain_lr(opts["pretrain_lr"])
        per_layer = round(opts["pretrain_epochs"] * steps_per_epoch)
        for layer in range(trainer.pretrain_layers):
            emit({"phase": "train", "text": f"pre-training RBM {layer + 1}"})
            for _ in range(per_layer):
                clock.timed(feed)
                clock.timed(lambda layer=layer: (trainer.pretrain_step(layer), trainer.sync()))
                pretrain_steps += 1
        if per_layer:  # with no pre-training the classifier keeps its own initialisation
            clock.timed(trainer.end_pretraining)
        extra.update(
            pretrain_s=clock.train_s,
            pretrain_steps=pretrain_steps,
            pretrain_epochs_per_layer=opts["pretrain_epochs"],
        )

    def record(steps: int) -> float:
        q = clock.timed(lambda: evaluate(trainer), "eval_s")
        curve.append([steps, clock.train_s, q])
        if steps:
            losses.append([steps, trainer.loss()])
        emit({"phase": "train", "text": f"step {steps} {quality.name} {q:.4g}"})
        return q

    q = record(0)
    steps, reached_at, stop, diverged = 0, None, None, False
    while True:
        if goal is not None and goal.reached(q) and reached_at is None:
            reached_at = (steps, clock.train_s)
            if opts["stop_at_target"]:
                break
        stop = out_of_budget(steps)
        if stop:
            break
        clock.timed(feed)
        t0 = time.perf_counter()
        trainer.step()
        trainer.sync()
        dt = time.perf_counter() - t0
        clock.train_s += dt
        step_times.append(dt)
        steps += 1
        if steps % eval_every == 0 or out_of_budget(steps):
            q = record(steps)
            if not math.isfinite(trainer.loss()):
                diverged = True
                break

    epochs = steps * bs / n_train
    finetune_s = clock.train_s - extra.get("pretrain_s", 0.0)
    extra.update(
        quality=QualityRecord(name=quality.name, higher_is_better=quality.higher_is_better,
                              unit=quality.unit, description=quality.description,
                              target=target, reference=evaluate.reference),
        target_reached=reached_at is not None,
        time_to_target_s=reached_at[1] if reached_at else None,
        steps_to_target=reached_at[0] if reached_at else None,
        train_s=clock.train_s,
        eval_s=clock.eval_s,
        steps=steps,
        epochs=epochs,
        time_per_epoch_s=finetune_s / epochs if epochs else None,
        final_quality=curve[-1][2],
        best_quality=(max if quality.higher_is_better else min)(c[2] for c in curve),
        curve=curve,
        loss_curve=losses,
        dataset=ds.name,
        n_train=n_train,
        n_test=len(ds.x_test),
        options=opts,
        stopped_by=stop,
    )
    if "pretrain_s" in extra:
        extra["finetune_s"] = finetune_s
    if spec.network == "gan":
        extra["note"] = "one GAN mini-batch = one discriminator update + one generator update"
    metrics = _metrics(step_times, bs)
    common = dict(
        metrics=metrics,
        param_count=trainer.param_count,
        outcome=TrainOutcome(**extra),
        finished_at=time.time(),
        **base,
    )
    if diverged:
        return RunResult.failed(
            spec, "error", f"training diverged: loss {trainer.loss()} at step {steps}", **common
        )
    if target is not None and reached_at is None:
        return RunResult.failed(
            spec,
            "budget",
            f"{quality.name} {_fmt(q)} after {stop}, target {_fmt(target)} not reached",
            **common,
        )
    return RunResult(spec=spec, status="ok", **common)


def _fmt(q: float) -> str:
    return f"{q:.4g}"


def _metrics(step_times: list[float], batch: int) -> Metrics | None:
    """Time per training step on real data (excluding batch feeding and evaluation)."""
    if not step_times:
        return None
    from dlperf.core.stats import summarize

    s = summarize(step_times)
    return Metrics(
        steps=s.n,
        median_s=s.median,
        mean_s=s.mean,
        std_s=s.std,
        min_s=s.min,
        max_s=s.max,
        mad_s=s.mad,
        iqr_s=s.iqr,
        cv=s.cv,
        samples_per_s=batch / s.median if s.median > 0 else 0.0,
        warmup_steps=0,
    )
