"""Inside a worker: a run of kind 'profile' builds the network as a step run does, times
its steps under the same warm-up rule (``measure.timing``; the metrics are those of a
step, unprofiled), then runs ``ProfileOptions.steps`` more under the framework's own
profiler and returns the op groups as the run's ``ProfileOutcome``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dlperf import workloads
from dlperf.backends.base import Backend, Profiling, UnsupportedError, capability
from dlperf.core import environment, speed_probe
from dlperf.core.errors import is_out_of_memory
from dlperf.core.spec import Metrics, RunResult, RunSpec
from dlperf.core.stats import summarize
from dlperf.core.timing import measure
from dlperf.kinds.explain.options import ProfiledOp, ProfileOptions, ProfileOutcome


def run_profile(spec: RunSpec, backend: Backend, emit: Callable[[dict[str, Any]], None],
                base: dict[str, Any]) -> RunResult:
    o = spec.options
    assert isinstance(o, ProfileOptions)
    try:
        _, _, cfg = workloads.resolve(spec.network, spec.size, spec.params)
        trainer = backend.build(spec.network, cfg, spec.batch_size, spec.variant, spec.device,
                                spec.seed)
        flops = trainer.flops_per_step()
        emit({"phase": "built", "param_count": trainer.param_count, "flops": flops})
        timing = measure(trainer.step, trainer.sync, spec.measurement,
                         on_step=lambda phase, s: emit({"phase": phase, "s": s}))
        # the machine's speed as the steps ran: the explanation sets each op against the
        # calibration's curves, made at the calibration's speed (``analysis.speed_note``)
        probe = speed_probe.after_steps(spec.memory_limit, environment.peak_resident_bytes()) \
            if spec.device == "cpu" else None
        ops, wall = capability(backend, Profiling).profile(trainer, o.steps, spec.device)
    except UnsupportedError as e:
        return RunResult.failed(spec, "unsupported", str(e), finished_at=time.time(), **base)
    except Exception as e:
        reason = "oom" if is_out_of_memory(e) else "error"
        return RunResult.failed(spec, reason, f"{type(e).__name__}: {e}"[:500],
                                finished_at=time.time(), **base)
    s = summarize(timing.steps_s)
    metrics = Metrics(steps=s.n, median_s=s.median, mean_s=s.mean, std_s=s.std, min_s=s.min,
                      max_s=s.max, mad_s=s.mad, iqr_s=s.iqr, cv=s.cv,
                      samples_per_s=spec.batch_size / s.median, flops_per_step=flops,
                      achieved_flops=flops / s.median if flops else None,
                      cpu_util=timing.cpu_util, warmup_steps=len(timing.warmup_s),
                      warmup_settled=timing.settled, speed_probe=probe or None)
    outcome = ProfileOutcome(profiler=f"{backend.name} profiler", steps=o.steps, step_s=wall,
                             ops=tuple(ProfiledOp(**op) for op in ops))
    return RunResult(spec=spec, status="ok", metrics=metrics, step_times_s=timing.steps_s,
                     warmup_times_s=timing.warmup_s, param_count=trainer.param_count,
                     outcome=outcome, finished_at=time.time(), **base)
