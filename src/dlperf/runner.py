"""Run a list of RunSpecs: one launch each, results stored as they arrive.

Every kind of run goes through here: a single worker (``launch.isolated``) or a torchrun
job for a parallel run (``launch.torchrun``). Each run is claimed in the store first (two
sweeps on one store never measure the same run) and launched under the machine's
measurement lock (two dlperf commands never time workers on the same cores at once).

Before the first step-time run at a thread count, the machine's fp32 matmul peak at that
thread count is measured (once per machine; it is kept in the store) so that each result
can say what share of the peak it reached.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlperf.environment import usable_cpus
from dlperf.launch import run_isolated
from dlperf.launch.cpulock import cpus_held
from dlperf.launch.isolated import LaunchInterrupted
from dlperf.spec import Measurement, RunResult, RunSpec
from dlperf.store import Store

# The peak probe: a few large matmuls, timed like any other step.
PEAK_MEASUREMENT = Measurement(min_time_s=2.0, min_steps=3, warmup_min_steps=1, warmup_max_steps=3)


def peak_threads(threads: int) -> int:
    """The thread count whose peak bounds a run: more threads than CPUs cannot compute
    faster than all the CPUs (and timing a large matmul oversubscribed takes minutes)."""
    return min(threads, len(usable_cpus()))


class Interrupted(Exception):
    """Ctrl-C (or SIGTERM) during a sweep; ``saved`` results were stored before it, and the
    run in flight, if any, was stored as 'interrupted' with the steps it had timed."""

    def __init__(self, saved: int, in_flight: RunResult | None = None):
        super().__init__(f"interrupted after {saved} stored results")
        self.saved = saved
        self.in_flight = in_flight


class Listener:
    """Progress hooks; the CLI draws a progress bar with them, the API passes none."""

    def start(self, spec: RunSpec, index: int, total: int) -> None: ...
    def event(self, spec: RunSpec, event: dict) -> None: ...
    def done(self, result: RunResult) -> None: ...
    def skipped(self, spec: RunSpec, why: str) -> None: ...
    def waiting(self, spec: RunSpec, holder: str) -> None: ...


@dataclass
class Runner:
    store: Store
    timeout_s: float = 1800.0
    memory_limit: int | None = None
    peak_size: int = 4096
    peak_measurement: Measurement = PEAK_MEASUREMENT
    listener: Listener = field(default_factory=Listener)
    #: torchrun settings for kind 'parallel' (``launch.torchrun.run_parallel`` keywords)
    torchrun: dict[str, Any] = field(default_factory=dict)

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

    def _launch(self, spec: RunSpec) -> RunResult | None:
        """Launch ``spec`` under the machine's measurement lock. Interrupted, the run in
        flight is stored as 'interrupted' before the interrupt goes on."""
        on_event = lambda ev: self.listener.event(spec, ev)  # noqa: E731
        with cpus_held(spec.label(), on_wait=lambda who: self.listener.waiting(spec, who)):
            try:
                if spec.kind == "parallel":
                    from dlperf.launch.torchrun import run_parallel

                    return run_parallel(spec, timeout_s=self.timeout_s,
                                        memory_limit_bytes=self.memory_limit,
                                        on_event=on_event, **self.torchrun)
                return run_isolated(spec, timeout_s=self.timeout_s,
                                    memory_limit_bytes=self.memory_limit, on_event=on_event)
            except LaunchInterrupted as e:
                raise Interrupted(0, self.store.add(e.result)) from None

    def _run_and_store(self, spec: RunSpec) -> RunResult:
        result = self._launch(spec)
        return self.store.add(result)

    def run(self, spec: RunSpec) -> RunResult | None:
        """Measure one spec (and the peak it needs), store and return the result. None for
        a parallel run whose rank 0 lived on another machine (that machine stores it)."""
        # the peak is an fp32 matmul: a tf32, bf16 or fp16 run may well go past it
        fp32_step = spec.kind == "step" and spec.precision == "fp32"
        peak = self.ensure_peak(peak_threads(spec.threads), spec.device) if fp32_step else None
        result = self._launch(spec)
        if result is None:
            return None
        if peak and result.ok and result.metrics and result.metrics.achieved_flops:
            metrics = result.metrics.model_copy(
                update={"peak_flops": peak, "peak_share": result.metrics.achieved_flops / peak}
            )
            result = result.model_copy(update={"metrics": metrics})
        return self.store.add(result)

    def run_all(self, specs: Sequence[RunSpec], stop: Callable[[], bool] | None = None,
                still_pending: Callable[[RunSpec], bool] | None = None) -> list[RunResult]:
        """Run each spec this process can claim; ``still_pending`` re-checks, once claimed,
        that no other sweep stored it meanwhile (the resume rule of the caller)."""
        results: list[RunResult] = []
        try:
            for i, spec in enumerate(specs):
                if stop and stop():
                    break
                self.listener.start(spec, i, len(specs))
                holder = self.store.claim(spec)
                if holder is not None:
                    self.listener.skipped(spec, f"being measured by another dlperf ({holder})")
                    continue
                try:
                    if still_pending is not None and not still_pending(spec):
                        self.listener.skipped(spec, "stored meanwhile by another dlperf")
                        continue
                    result = self.run(spec)
                finally:
                    self.store.release(spec)
                if result is None:
                    self.listener.skipped(spec, "this machine's workers finished; the machine "
                                                "that held rank 0 stores the result")
                    continue
                results.append(result)
                self.listener.done(result)
        except Interrupted as e:
            raise Interrupted(len(results), e.in_flight) from None
        except KeyboardInterrupt:
            raise Interrupted(len(results)) from None
        return results
