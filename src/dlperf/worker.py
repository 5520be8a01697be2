"""The worker: a fresh process that measures one RunSpec and writes one RunResult.

    python -m dlperf.worker SPEC.json RESULT.json PROGRESS.jsonl [RESUME.json]

It pins itself to its CPUs before any framework loads (the launcher has already set the
threading environment variables), lets the backend apply its own thread setting, builds
the workload, warms up, times, and writes the result as JSON. Every step time is also
appended to PROGRESS.jsonl as it happens, so the parent keeps what was measured if this
process crashes, runs out of memory or is killed at its timeout.

RESUME.json, for a calibration run (kind 'kernel') only, holds the shapes an interrupted
run of the same spec had timed (``KernelOutcome``); they are kept, not timed again.

Failures the worker can see (an unsupported configuration, an out-of-memory error, an
exception) are written as a failed RunResult; failures it cannot (a segfault, a kill) are
recorded by the parent from the exit status.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from dlperf.errors import is_out_of_memory
from dlperf.kinds.dataflow import InputOptions
from dlperf.kinds.kernel import KernelOutcome
from dlperf.spec import Metrics, RunResult, RunSpec


def _pin(threads: int) -> list[int]:
    from dlperf.environment import cpus_for

    cpus = cpus_for(threads)
    os.sched_setaffinity(0, cpus)
    return cpus


def _rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux: the peak resident set of this process so far
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _current_rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


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


def execute(spec: RunSpec, progress: Callable[[dict[str, Any]], None] | None = None,
            resume: KernelOutcome | None = None) -> RunResult:
    """Measure ``spec`` in this process (a kernel run keeps ``resume``'s shapes). Never
    raises for a failure of the measured code."""
    emit = progress or (lambda event: None)
    started = time.time()
    cpus = _pin(spec.threads)
    try:
        from dlperf import backends

        backend = backends.load(spec.framework)
        in_force = backend.set_threads(spec.threads)
        software = backend.software()
    except Exception as e:  # import failure of the framework itself
        return RunResult.failed(spec, "error", f"{type(e).__name__}: {e}", cpus=cpus,
                                started_at=started, finished_at=time.time())

    base = dict(cpus=cpus, threads_in_force=in_force, software=software, started_at=started)
    from dlperf.backends.base import UnsupportedError

    try:  # before anything is built: TF32 flags and mixed-precision policies act at build
        base["precision_in_force"] = backend.set_precision(spec.precision, spec.device)
    except UnsupportedError as e:
        return RunResult.failed(spec, "unsupported", str(e), finished_at=time.time(), **base)
    if spec.kind == "train":
        from dlperf.training.loop import run_training

        return run_training(spec, backend, emit, base)
    if spec.kind == "profile":
        from dlperf.explain.worker import run_profile  # a step under the profiler

        return run_profile(spec, backend, emit, base)
    if spec.kind == "kernel":
        from dlperf.calibrate.worker import run_kernels  # the model's calibration kernels

        return run_kernels(spec, backend, emit, base, resume)
    if spec.kind == "loader" or (isinstance(spec.options, InputOptions)
                                 and spec.options.has_pipeline):
        from dlperf.dataflow.worker import run_dataflow  # a real input pipeline

        return run_dataflow(spec, backend, emit, base)
    if spec.kind not in ("step", "peak", "inference"):
        return RunResult.failed(spec, "unsupported", f"worker cannot run kind '{spec.kind}'", **base)

    from dlperf.measure.stats import instability_warning, summarize
    from dlperf.measure.timing import measure

    timing = None
    try:
        rss_before = _current_rss()
        if spec.kind == "peak":
            trainer = backend.probe(spec.network, spec.batch_size, spec.device)
            flops = trainer.flops_per_step()
        elif spec.kind == "inference":
            from dlperf import workloads

            _, _, cfg = workloads.resolve(spec.network, spec.size, spec.params)
            trainer = backend.build_inference(spec.network, cfg, spec.batch_size,
                                              spec.variant, spec.device, spec.seed)
            # the forward products of the neutral definition (no framework counts a
            # forward-only call the same way in all of them)
            flops = float(spec.batch_size * sum(x.fwd_flops for x in cfg.layers())) or None
        else:
            from dlperf import workloads

            _, _, cfg = workloads.resolve(spec.network, spec.size, spec.params)
            trainer = backend.build(spec.network, cfg, spec.batch_size, spec.variant,
                                    spec.device, spec.seed)
            flops = trainer.flops_per_step()
        emit({"phase": "built", "param_count": trainer.param_count, "flops": flops})
        _inject_fault()
        timing = measure(trainer.step, trainer.sync, spec.measurement,
                         on_step=lambda phase, s: emit({"phase": phase, "s": s}))
    except UnsupportedError as e:
        return RunResult.failed(spec, "unsupported", str(e), finished_at=time.time(), **base)
    except Exception as e:
        reason = "oom" if is_out_of_memory(e) else "error"
        tb = traceback.format_exc(limit=3).strip().splitlines()[-1]
        return RunResult.failed(spec, reason, f"{type(e).__name__}: {e}".strip()[:500] or tb,
                                finished_at=time.time(), **base)

    s = summarize(timing.steps_s)
    peak_rss = _rss_bytes()
    achieved = flops / s.median if flops else None
    warnings = [w for w in (instability_warning(s.robust_cv),) if w]
    if not timing.settled:
        warnings.append(
            f"warm-up did not settle within {len(timing.warmup_s)} steps; raise the warm-up "
            "budget (--warmup-time) or check for a busy machine"
        )
    metrics = Metrics(
        steps=s.n, median_s=s.median, mean_s=s.mean, std_s=s.std, min_s=s.min, max_s=s.max,
        mad_s=s.mad, iqr_s=s.iqr, cv=s.cv,
        samples_per_s=spec.batch_size / s.median if spec.kind != "peak" else 0.0,
        flops_per_step=flops, achieved_flops=achieved,
        peak_rss_bytes=peak_rss, model_rss_bytes=max(0, peak_rss - rss_before),
        device_peak_bytes=trainer.device_peak_bytes(), cpu_util=timing.cpu_util,
        warmup_steps=len(timing.warmup_s), warmup_settled=timing.settled,
    )
    outcome = None
    if spec.kind == "inference":
        from dlperf.kinds.inference import latency_outcome

        outcome = latency_outcome(timing.steps_s, spec.batch_size, trainer.mode,
                                  trainer.grad_free(), flops)
    return RunResult(
        spec=spec, status="ok", metrics=metrics, step_times_s=timing.steps_s,
        warmup_times_s=timing.warmup_s, param_count=trainer.param_count,
        warnings=warnings, finished_at=time.time(), outcome=outcome, **base,
    )


def main(argv: list[str] | None = None) -> int:
    from dlperf.launch.orphans import die_with_parent, parent_from_env

    die_with_parent(parent_from_env())  # never outlive the launcher, even killed by SIGKILL
    argv = sys.argv[1:] if argv is None else argv
    spec_path, result_path, progress_path = (Path(a) for a in argv[:3])
    spec = RunSpec.model_validate_json(spec_path.read_text())
    resume = KernelOutcome.model_validate_json(Path(argv[3]).read_text()) if argv[3:] else None
    with progress_path.open("a", buffering=1) as prog:

        def emit(event: dict[str, Any]) -> None:
            prog.write(json.dumps(event) + "\n")

        result = execute(spec, emit, resume)
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(result.model_dump_json())
    tmp.replace(result_path)  # atomic: the parent never reads half a result
    return 0


def exit_without_teardown(code: int) -> NoReturn:
    """Leave a worker whose results are written and closed at once: the interpreter's
    teardown of the framework and its threads takes about a second per worker and
    measures nothing."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_without_teardown(main())
