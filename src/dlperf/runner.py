"""Run a list of RunSpecs: one isolated worker each, results stored as they arrive.

Before the first step-time run at a thread count, the machine's fp32 matmul peak at that
thread count is measured (once per machine; it is kept in the store) so that each result
can say what share of the peak it reached.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dlperf.environment import usable_cpus
from dlperf.launch import run_isolated
from dlperf.spec import Measurement, RunResult, RunSpec
from dlperf.store import Store

# The peak probe: a few large matmuls, timed like any other step.
PEAK_MEASUREMENT = Measurement(min_time_s=2.0, min_steps=3, warmup_min_steps=1, warmup_max_steps=3)


def peak_threads(threads: int) -> int:
    """The thread count whose peak bounds a run: more threads than CPUs cannot compute
    faster than all the CPUs (and timing a large matmul oversubscribed takes minutes)."""
    return min(threads, len(usable_cpus()))


class Interrupted(Exception):
    """Ctrl-C during a sweep; ``saved`` results were stored before it."""

    def __init__(self, saved: int):
        super().__init__(f"interrupted after {saved} stored results")
        self.saved = saved


class Listener:
    """Progress hooks; the CLI draws a progress bar with them, the API passes none."""

    def start(self, spec: RunSpec, index: int, total: int) -> None: ...
    def event(self, spec: RunSpec, event: dict) -> None: ...
    def done(self, result: RunResult) -> None: ...


@dataclass
class Runner:
    store: Store
    timeout_s: float = 1800.0
    memory_limit: int | None = None
    peak_size: int = 4096
    peak_measurement: Measurement = PEAK_MEASUREMENT
    listener: Listener = field(default_factory=Listener)

    def peak_spec(self, threads: int, device: str) -> RunSpec:
        return RunSpec(kind="peak", network="matmul", framework="torch", variant="eager",
                       device=device, threads=threads, batch_size=self.peak_size,
                       measurement=self.peak_measurement)

    def ensure_peak(self, threads: int, device: str = "cpu", *, remeasure: bool = False) -> float | None:
        peak = None if remeasure else self.store.peak_flops(threads, device)
        if peak is None:
            result = self._run_and_store(self.peak_spec(threads, device))
            if result.ok and result.metrics:
                peak = result.metrics.achieved_flops
        return peak

    def _run_and_store(self, spec: RunSpec) -> RunResult:
        result = run_isolated(
            spec,
            timeout_s=self.timeout_s,
            memory_limit_bytes=self.memory_limit,
            on_event=lambda ev: self.listener.event(spec, ev),
        )
        return self.store.add(result)

    def run(self, spec: RunSpec) -> RunResult:
        """Measure one spec (and the peak it needs), store and return the result."""
        # the peak is an fp32 matmul: a tf32, bf16 or fp16 run may well go past it
        fp32_step = spec.kind == "step" and spec.precision == "fp32"
        peak = self.ensure_peak(peak_threads(spec.threads), spec.device) if fp32_step else None
        result = run_isolated(
            spec,
            timeout_s=self.timeout_s,
            memory_limit_bytes=self.memory_limit,
            on_event=lambda ev: self.listener.event(spec, ev),
        )
        if peak and result.ok and result.metrics and result.metrics.achieved_flops:
            metrics = result.metrics.model_copy(
                update={"peak_flops": peak, "peak_share": result.metrics.achieved_flops / peak}
            )
            result = result.model_copy(update={"metrics": metrics})
        return self.store.add(result)

    def run_all(self, specs: Sequence[RunSpec], stop: Callable[[], bool] | None = None) -> list[RunResult]:
        results: list[RunResult] = []
        try:
            for i, spec in enumerate(specs):
                if stop and stop():
                    break
                self.listener.start(spec, i, len(specs))
                result = self.run(spec)
                results.append(result)
                self.listener.done(result)
        except KeyboardInterrupt:
            raise Interrupted(len(results)) from None
        return results
