"""The worker: a fresh process that measures one RunSpec and writes one RunResult.

    python -m dlperf.engine.worker SPEC.json RESULT.json PROGRESS.jsonl [RESUME.json]

It pins itself to its CPUs before any framework loads (the launcher has already set the
threading environment variables), lets the backend apply its own thread setting, builds
the workload, warms up, times, and writes the result as JSON. Every step time is also
appended to PROGRESS.jsonl as it happens, so the parent keeps what was measured if this
process crashes, runs out of memory or is killed at its timeout.

RESUME.json, for a kind that resumes (a calibration run, kind 'kernel'), holds what an
interrupted run of the same spec had measured (the kind's outcome: the shapes it had
timed); it is kept, not measured again.

Failures the worker can see (an unsupported configuration, an out-of-memory error, an
exception) are written as a failed RunResult; failures it cannot (a segfault, a kill) are
recorded by the parent from the exit status.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from dlperf.core.orphans import exit_without_teardown
from dlperf.core.spec import RunResult, RunSpec
from dlperf.kinds import KINDS


def _pin(threads: int) -> list[int]:
    from dlperf.core.environment import cpus_for

    cpus = cpus_for(threads)
    os.sched_setaffinity(0, cpus)
    return cpus


def execute(spec: RunSpec, progress: Callable[[dict[str, Any]], None] | None = None,
            resume: Any = None, lean_import: bool = False) -> RunResult:
    """Measure ``spec`` in this process with its kind's body (``KINDS[kind].run``; a kernel
    run keeps ``resume``'s shapes). Never raises for a failure of the measured code.
    ``lean_import``: the framework is imported without its optional extras
    (``backends.lean_import``), which stay off in this process: a worker's only."""
    emit = progress or (lambda event: None)
    started = time.time()
    cpus = _pin(spec.threads)
    kind = KINDS[spec.kind]
    if kind.run is None or kind.launcher != "worker":
        return RunResult.failed(spec, "unsupported", f"worker cannot run kind '{spec.kind}'",
                                cpus=cpus, started_at=started, finished_at=time.time())
    try:
        from dlperf import backends
        from dlperf.backends.lean_import import skipping_extras

        with skipping_extras(spec.framework) if lean_import else nullcontext():
            backend = backends.load(spec.framework)
        in_force = backend.set_threads(spec.threads)
        # the allocator too: it sets a step's new pages (``Metrics.system_s_per_step``)
        from dlperf.core.environment import allocator

        software = {**backend.software(), "allocator": allocator()}
    except Exception as e:  # import failure of the framework itself
        return RunResult.failed(spec, "error", f"{type(e).__name__}: {e}", cpus=cpus,
                                started_at=started, finished_at=time.time())

    base = dict(cpus=cpus, threads_in_force=in_force, software=software, started_at=started)
    from dlperf.backends.base import UnsupportedError

    try:  # before anything is built: TF32 flags and mixed-precision policies act at build
        base["precision_in_force"] = backend.set_precision(spec.precision, spec.device)
    except UnsupportedError as e:
        return RunResult.failed(spec, "unsupported", str(e), finished_at=time.time(), **base)
    return kind.run(spec, backend, emit, base, resume)


def main(argv: list[str] | None = None) -> int:
    from dlperf.core.orphans import die_with_parent, parent_from_env

    die_with_parent(parent_from_env())  # never outlive the launcher, even killed by SIGKILL
    argv = sys.argv[1:] if argv is None else argv
    spec_path, result_path, progress_path = (Path(a) for a in argv[:3])
    spec = RunSpec.model_validate_json(spec_path.read_text())
    # what an interrupted run of this spec had measured: its kind's outcome
    outcome_type = KINDS[spec.kind].outcome
    resume = outcome_type.model_validate_json(Path(argv[3]).read_text()) \
        if argv[3:] and outcome_type is not None else None
    with progress_path.open("a", buffering=1) as prog:

        def emit(event: dict[str, Any]) -> None:
            prog.write(json.dumps(event) + "\n")

        result = execute(spec, emit, resume, lean_import=True)
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(result.model_dump_json())
    tmp.replace(result_path)  # atomic: the parent never reads half a result
    return 0


if __name__ == "__main__":
    exit_without_teardown(main())
