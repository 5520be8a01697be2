"""A worker's body for kind "inference": the framework's forward-only query, timed as a
step is, with the latency quantiles as its outcome."""

from __future__ import annotations

from typing import Any

from dlperf import workloads
from dlperf.backends.base import Backend, ForwardOnly, Inference, capability
from dlperf.core.spec import RunResult, RunSpec
from dlperf.kinds.inference.options import latency_outcome
from dlperf.kinds.step.run import Emit, time_steps


def run_inference(spec: RunSpec, backend: Backend, emit: Emit, base: dict[str, Any],
                  resume: Any = None) -> RunResult:
    _, _, cfg = workloads.resolve(spec.network, spec.size, spec.params)

    # the forward products of the neutral definition (no framework counts a forward-only
    # call the same way in all of them): what runs and what the model needs, alike
    forward = float(spec.batch_size * sum(x.fwd_flops for x in cfg.layers())) or None

    def build() -> tuple[ForwardOnly, float | None]:
        trainer = capability(backend, Inference).build_inference(
            spec.network, cfg, spec.batch_size, spec.variant, spec.device, spec.seed)
        return trainer, forward

    result, timing, trainer = time_steps(spec, emit, base, build, model_flops=forward)
    if timing is None or trainer is None:
        return result
    outcome = latency_outcome(timing.steps_s, spec.batch_size, trainer.mode,
                              trainer.grad_free(), result.metrics.flops_per_step)
    return result.model_copy(update={"outcome": outcome})
