"""A worker's body for a timed step: build what to time, warm up until settled, time it,
summarise. Kind "step" times forward + backward + update (DLBench's time per mini-batch);
kind "peak" a library's large kernel and kind "inference" a forward pass reuse
``time_steps`` with their own builders. A step on a real input pipeline is the data-flow
kind's body (``dlperf.kinds.dataflow.run``), which times the wait for data apart."""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from dlperf import workloads
from dlperf.backends.base import Backend, Timed, UnsupportedError
from dlperf.core import environment, speed_probe
from dlperf.core.errors import is_out_of_memory
from dlperf.core.spec import Metrics, RunResult, RunSpec
from dlperf.core.stats import instability_warning, summarize
from dlperf.core.timing import Timing, injection_warning, measure
from dlperf.kinds.step import utilisation

Emit = Callable[[dict[str, Any]], None]
T = TypeVar("T", bound=Timed)
#: () -> (what to time, its FLOPs per call or None)
Build = Callable[[], tuple[T, float | None]]


def run_step(spec: RunSpec, backend: Backend, emit: Emit, base: dict[str, Any],
             resume: Any = None) -> RunResult:
    """Kind "step": one network's training step."""
    from dlperf.kinds.dataflow.plan import has_pipeline

    if has_pipeline(spec):
        from dlperf.kinds.dataflow.run import run_dataflow  # a real input pipeline

        return run_dataflow(spec, backend, emit, base)

    def build() -> tuple[Timed, float | None]:
        _, _, cfg = workloads.resolve(spec.network, spec.size, spec.params)
        trainer = backend.build(spec.network, cfg, spec.batch_size, spec.variant,
                                spec.device, spec.seed)
        return trainer, trainer.flops_per_step()

    return time_steps(spec, emit, base, build, model_flops=utilisation.model_flops(spec))[0]


def time_steps(spec: RunSpec, emit: Emit, base: dict[str, Any], build: Build[T],
               samples_per_step: int | None = None, model_flops: float | None = None
               ) -> tuple[RunResult, Timing | None, T | None]:
    """Build, warm up and time; the result (a failure for an unsupported configuration,
    an out-of-memory error or an exception), with the timing and what was timed for a
    caller that adds an outcome. With ``model_flops`` (a step's by its neutral
    definition), the metrics carry MFU and HFU (``utilisation``)."""
    batch = spec.batch_size if samples_per_step is None else samples_per_step
    try:
        rss_before = environment.resident_bytes()
        trainer, flops = build()
        emit({"phase": "built", "param_count": trainer.param_count, "flops": flops})
        _inject_fault()
        timing = measure(trainer.step, trainer.sync, spec.measurement,
                         on_step=lambda phase, s: emit({"phase": phase, "s": s}))
    except UnsupportedError as e:
        return RunResult.failed(spec, "unsupported", str(e), finished_at=time.time(),
                                **base), None, None
    except Exception as e:
        reason = "oom" if is_out_of_memory(e) else "error"
        tb = traceback.format_exc(limit=3).strip().splitlines()[-1]
        return RunResult.failed(spec, reason, f"{type(e).__name__}: {e}".strip()[:500] or tb,
                                finished_at=time.time(), **base), None, None

    s = summarize(timing.steps_s)
    peak_rss = environment.peak_resident_bytes()
    file_rss = environment.file_resident_bytes()
    # after the peak is read (the probe's copies must not raise it): the machine's speed
    # as the steps ran, set against the calibration's beside a prediction (a peak kernel
    # is never predicted); under a memory limit only where its buffers fit the peak
    probe = speed_probe.after_steps(spec.memory_limit, peak_rss) \
        if spec.device == "cpu" and spec.kind != "peak" else None
    achieved = flops / s.median if flops else None
    warnings = [w for w in (instability_warning(s.robust_cv), injection_warning()) if w]
    d = timing.disturbance
    if d is not None and d.disturbed:
        warnings.append(f"disturbed: while its steps were timed, {d.describe()}; measure "
                        "again on a quiet machine (--force)")
    if not timing.settled:
        warnings.append(
            f"warm-up did not settle within {len(timing.warmup_s)} steps; raise the warm-up "
            "budget (--warmup-time) or check for a busy machine"
        )
    peak, peak_is = (utilisation.device_peak(spec, base.get("software") or {})
                     if model_flops else (None, None))
    mfu, hfu = utilisation.utilisation(model_flops, flops, s.median, peak)
    metrics = Metrics(
        steps=s.n, median_s=s.median, mean_s=s.mean, std_s=s.std, min_s=s.min, max_s=s.max,
        mad_s=s.mad, iqr_s=s.iqr, cv=s.cv, samples_per_s=batch / s.median,
        flops_per_step=flops, achieved_flops=achieved,
        peak_rss_bytes=peak_rss, model_rss_bytes=max(0, peak_rss - rss_before),
        file_rss_bytes=file_rss,
        device_peak_bytes=trainer.device_peak_bytes(), cpu_util=timing.cpu_util,
        model_flops_per_step=model_flops, mfu=mfu, hfu=hfu,
        utilisation_peak_flops=peak, utilisation_peak=peak_is,
        warmup_steps=len(timing.warmup_s), warmup_settled=timing.settled,
        other_cpu_share=d.other_share + d.steal_share if d else None,
        minor_faults_per_step=timing.minor_faults_per_step,
        system_s_per_step=timing.system_s_per_step,
        speed_probe=probe or None,
    )
    result = RunResult(
        spec=spec, status="ok", metrics=metrics, step_times_s=timing.steps_s,
        warmup_times_s=timing.warmup_s, param_count=trainer.param_count,
        warnings=warnings, finished_at=time.time(), **base,
    )
    return result, timing, trainer


def _inject_fault() -> None:
    """For the tests of the parent's failure handling: DLPERF_WORKER_FAULT=segfault|kill|hang
    makes this worker die by SIGSEGV or SIGKILL or hang after building, as a broken framework might."""
    fault = os.environ.get("DLPERF_WORKER_FAULT")
    if fault == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif fault == "kill":  # killed by someone, not by the out-of-memory killer
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "hang":
        while True:
            time.sleep(1)
