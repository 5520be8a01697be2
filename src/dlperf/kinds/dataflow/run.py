"""Inside a worker: train on a real input pipeline ("step" runs with input options), or
run the pipeline alone ("loader" runs). Called by ``dlperf.engine.worker.execute``.

Each timed step is split where the training loop waits: the time blocked in the
pipeline's ``next()`` is the stall, the rest (the training step up to the device's sync)
the compute. Warm-up, settling and the number of timed steps follow the same rule as
every other run (``measure.timing.measure`` over the whole step), so ``Metrics.median_s``
stays the time per mini-batch, comparable with the synthetic-data time; the stall of each
step, the loader's own work per batch and the share of the time spent waiting go into
the result's outcome (``DataflowOutcome``: ``StepOutcome.dataflow`` of a step run, the
whole outcome of a loader run).

A loader run times ``next()`` alone, in a process that trains nothing, a round of one
batch per loader worker at a time: its throughput is samples over the wall time of the
timed rounds (workers deliver in bursts, so a median batch time would overstate it).
"""

from __future__ import annotations

import os
import statistics
import time
import traceback
from collections.abc import Callable
from typing import Any

from dlperf import workloads
from dlperf.core import environment
from dlperf.core.errors import UsageError, is_out_of_memory
from dlperf.core.spec import Metrics, RunResult, RunSpec
from dlperf.inputs import datasets
from dlperf.inputs.options import InputOptions, Prep
from dlperf.inputs.pipeline import Source
from dlperf.kinds.dataflow.options import DataflowOutcome
from dlperf.kinds.step.options import StepOutcome


def source_for(config: Any, opts: InputOptions) -> Source:
    """The run's samples: generated in memory, or the data set on disk (made once)."""
    if opts.input == "memory":
        spec = datasets.for_network(config, opts.samples, "raw")
        return Source(spec, opts, arrays=datasets.arrays(spec))
    spec = datasets.for_network(config, opts.samples, opts.data_format)
    return Source(spec, opts, dir=datasets.ensure(spec))



def run_dataflow(spec: RunSpec, backend: Any, emit: Callable[[dict], None],
                 base: dict[str, Any]) -> RunResult:
    """Measure a step or loader run on a real input pipeline; never raises for a failure
    of the measured code (a crashed loader worker is an 'error' with its reason)."""
    from dlperf.backends.base import (
        InputPipelines,
        UnsupportedError,
        capability,
        pipeline_trainer,
    )

    pipeline = None
    try:
        opts = spec.options
        if not isinstance(opts, InputOptions) or opts.synthetic:
            raise UsageError(f"a {spec.kind} run on an input pipeline needs input memory or disk")
        wl, _, cfg = workloads.resolve(spec.network, spec.size, spec.params)
        if wl.group != "dlbench":
            raise UnsupportedError("input pipelines are built for the DLBench networks")
        if spec.batch_size > opts.samples:
            raise UsageError(f"batch size {spec.batch_size} is larger than the data set "
                             f"({opts.samples} samples)")
        source = source_for(cfg, opts)
        rss_before = environment.resident_bytes()
        trainer = None
        if spec.kind == "step":
            trainer = backend.build(spec.network, cfg, spec.batch_size, spec.variant,
                                    spec.device, spec.seed)
        pipeline = capability(backend, InputPipelines).input_pipeline(
            source, spec.batch_size, spec.seed, spec.device)
        if trainer is not None:
            trainer = pipeline_trainer(trainer)
        emit({"phase": "built", "param_count": trainer.param_count if trainer else 0})
        return _measure(spec, opts, source, trainer, pipeline, emit, base, rss_before)
    except UnsupportedError as e:
        return RunResult.failed(spec, "unsupported", str(e), finished_at=time.time(), **base)
    except Exception as e:
        tb = traceback.format_exc(limit=3).strip().splitlines()[-1]
        msg = f"{type(e).__name__}: {e}".strip()[:500] or tb
        return RunResult.failed(spec, "oom" if is_out_of_memory(e) else "error", msg,
                                finished_at=time.time(), **base)
    finally:
        if pipeline is not None:
            pipeline.close()


def _measure(spec: RunSpec, opts: InputOptions, source: Source, trainer: Any, pipeline: Any,
             emit: Callable[[dict], None], base: dict[str, Any], rss_before: int) -> RunResult:
    from dlperf.core.stats import instability_warning, summarize
    from dlperf.core.timing import measure

    stalls: list[float] = []
    preps: list[Prep | None] = []
    h2d: list[float] = []
    h2d_bytes: list[int] = []
    batches = pipeline.batches()

    # a loader run's timed unit is one round of its workers, a batch from each: batches
    # from several workers arrive in bursts, and single-batch times alternating between
    # a wait and nothing would fool the settling and step-count rules
    per = max(1, opts.loader_workers) if trainer is None else 1

    def one() -> None:
        excluded = pipeline.excluded_s
        t0 = time.perf_counter()
        for _ in range(per):
            b = next(batches)
            preps.append(b.prep)
        # evicting the page cache at an epoch's start is the experiment's, not the loader's
        stalls.append(time.perf_counter() - t0 - (pipeline.excluded_s - excluded))
        if trainer is not None:
            trainer.train_on(b.x, b.y)
        elif spec.device == "gpu":  # the loader alone delivers onto the device: time the copy
            t1 = time.perf_counter()
            pipeline.to_device(b)
            h2d.append(time.perf_counter() - t1)
            h2d_bytes.append(int(getattr(b.x, "nbytes", 0)) + int(getattr(b.y, "nbytes", 0)))

    sync = trainer.sync if trainer is not None else (lambda: None)
    timing = measure(one, sync, spec.measurement,
                     on_step=lambda phase, s: emit({"phase": phase, "s": s,
                                                    "stall_s": stalls[-1]}))
    steps = timing.steps_s
    n_warm = len(timing.warmup_s)
    stall = stalls[n_warm:]
    s = summarize(steps)
    wall = sum(steps)
    flops = trainer.flops_per_step() if trainer is not None else None
    if spec.kind == "loader":
        rate = spec.batch_size * per * len(steps) / wall if wall > 0 else 0.0
    else:
        rate = spec.batch_size / s.median
    peak_rss = environment.peak_resident_bytes()
    own = sorted(os.sched_getaffinity(0))  # the training process's CPUs
    metrics = Metrics(
        steps=s.n, median_s=s.median, mean_s=s.mean, std_s=s.std, min_s=s.min, max_s=s.max,
        mad_s=s.mad, iqr_s=s.iqr, cv=s.cv, samples_per_s=rate, flops_per_step=flops,
        achieved_flops=flops / s.median if flops else None, peak_rss_bytes=peak_rss,
        model_rss_bytes=max(0, peak_rss - rss_before),
        device_peak_bytes=trainer.device_peak_bytes() if trainer is not None else None,
        cpu_util=timing.cpu_util, warmup_steps=n_warm, warmup_settled=timing.settled,
        # the training process's own (a loader worker's pages are its process's)
        minor_faults_per_step=timing.minor_faults_per_step,
        system_s_per_step=timing.system_s_per_step,
    )
    outcome = DataflowOutcome(
        kind="loader" if spec.kind == "loader" else "step",
        stall_s=stall, stall_median_s=statistics.median(stall),
        stall_mean_s=statistics.fmean(stall),
        stall_share=sum(stall) / wall if wall > 0 else 0.0,
        compute_median_s=(statistics.median(t - w for t, w in zip(steps, stall, strict=True))
                          if trainer is not None else None),
        prep=median_prep([p for p in preps[n_warm * per:] if p is not None]),
        batches_per_step=per,
        loader_samples_per_s=rate if spec.kind == "loader" else None,
        prefetch_in_force=pipeline.prefetch_in_force,
        loader_cpus=getattr(pipeline, "cpus", own) if opts.loader_workers else own,
        data_set=source.spec.name if source.on_disk else "",
        data_set_bytes=(datasets.size_on_disk(source.spec, source.dir) if source.on_disk
                        else source.spec.in_memory_bytes()),
        eviction=(pipeline.eviction.describe(pipeline.evict_when)
                  if pipeline.eviction is not None else ""),
        h2d_s=statistics.median(h2d[n_warm:]) if h2d[n_warm:] else None,
        h2d_bytes=h2d_bytes[-1] if h2d_bytes else None,
        notes=_notes(spec, opts),
    )
    warnings = [w for w in (instability_warning(s.robust_cv),) if w]
    if not timing.settled:
        warnings.append(f"warm-up did not settle within {n_warm} steps; raise the warm-up "
                        "budget (--warmup-time) or check for a busy machine")
    if pipeline.eviction is not None and not pipeline.eviction.ok:
        warnings.append(pipeline.eviction.describe())
    return RunResult(
        spec=spec, status="ok", metrics=metrics, step_times_s=steps,
        warmup_times_s=timing.warmup_s,
        param_count=trainer.param_count if trainer is not None else None, warnings=warnings,
        finished_at=time.time(),
        outcome=outcome if spec.kind == "loader" else StepOutcome(dataflow=outcome), **base,
    )



def median_prep(preps: list[Prep]) -> Prep | None:
    """The median of each stage over the timed batches."""
    if not preps:
        return None
    med = statistics.median
    return Prep(read_s=med(p.read_s for p in preps), decode_s=med(p.decode_s for p in preps),
                augment_s=med(p.augment_s for p in preps),
                collate_s=med(p.collate_s for p in preps))


def _notes(spec: RunSpec, opts: InputOptions) -> list[str]:
    notes = []
    if opts.pin_memory and spec.device != "gpu":
        notes.append("pin_memory has no effect without a GPU: nothing is copied to a device")
    return notes
