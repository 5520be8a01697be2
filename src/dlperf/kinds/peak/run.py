"""A worker's body for kind "peak": one library's large fp32 kernel, timed as a step is."""

from __future__ import annotations

from typing import Any

from dlperf.backends.base import Backend, Timed, probe
from dlperf.core.spec import RunResult, RunSpec
from dlperf.kinds.step.run import Emit, time_steps


def run_peak(spec: RunSpec, backend: Backend, emit: Emit, base: dict[str, Any],
             resume: Any = None) -> RunResult:
    def build() -> tuple[Timed, float | None]:
        trainer = probe(backend, spec.network, spec.batch_size, spec.device)
        return trainer, trainer.flops_per_step()

    # a kernel has no samples: its rate is in FLOP/s
    return time_steps(spec, emit, base, build, samples_per_step=0)[0]
