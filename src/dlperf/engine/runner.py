"""Run a list of RunSpecs: one launch each, results stored as they arrive.

One linear path, whatever the kind: resolve what the runs depend on (``resolve_peaks``),
then for each run claim it, launch it the way its kind says (``KINDS[kind].launcher``: a
fresh worker, ``launch.isolated``; a torchrun job, ``launch.torchrun``; or this process
for a run that needs no framework), settle what follows from its result (its share of
the peak, ``_settle``), store it, and release the claim. The claim keeps two sweeps on one
store from measuring the same run; the machine's measurement lock keeps two dlperf
commands from timing workers on the same cores at once.

The peak a step's share is taken of: the machine's fp32 peak at its thread count, the
best of several kernels across the installed frameworks (``dlperf.kinds.peak.rates``),
kept in the store and reused while the machine, the settings and the libraries' versions
are the same; a store that lacks a rate takes it from the machine's peak store, where
every store's measured rates are kept too (``machine_peaks``). A run faster than every
kernel raises the peak to its own rate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlperf.core import environment
from dlperf.core.environment import usable_cpus
from dlperf.core.spec import Measurement, RunResult, RunSpec
from dlperf.core.store import Store
from dlperf.engine import machine_peaks
from dlperf.engine.cpulock import cpus_held
from dlperf.engine.launch import run_isolated
from dlperf.engine.launch.isolated import LaunchInterrupted
from dlperf.kinds import KINDS
from dlperf.kinds.peak import rates as peak

PEAK_MEASUREMENT = peak.MEASUREMENT


def share_threads(spec: RunSpec) -> int | None:
    """The threads whose peak a run's achieved FLOP/s is a share of, as its kind says
    (``Kind.share_threads``: a step's own; a parallel run's workers x threads on its one
    machine). None for what has no share: another precision than fp32 (the peak is fp32;
    bf16 may well go past it), a kernel, a training curve."""
    of = KINDS[spec.kind].share_threads
    return of(spec) if of is not None and spec.precision == "fp32" else None


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
    def cluster(self, counts: dict[str, int]) -> None:
        """The cluster's jobs: queued, running, done, failed (the Slurm executor)."""


@dataclass
class Runner:
    store: Store
    timeout_s: float = 1800.0
    memory_limit: int | None = None
    peak_size: int = peak.DEFAULT_SIZE
    peak_measurement: Measurement = PEAK_MEASUREMENT
    peak_kernels: tuple[tuple[str, str], ...] = peak.KERNELS
    listener: Listener = field(default_factory=Listener)
    #: torchrun settings for kind 'parallel' (``launch.torchrun.run_parallel`` keywords)
    torchrun: dict[str, Any] = field(default_factory=dict)

    def peak_specs(self, threads: int, device: str) -> list[RunSpec]:
        return peak.kernel_specs(threads, device, self.peak_size, environment.packages(),
                                 self.peak_measurement, self.peak_kernels)

    def ensure_peak(self, threads: int, device: str = "cpu", *, remeasure: bool = False) -> peak.Peak:
        """The peak at this thread count: fresh stored kernel rates reused, the others (all
        of them with ``remeasure``) measured now, one worker each."""
        packages = environment.packages()
        stored = self.store.peak_results(threads, device)
        found, missing = peak.lookup(stored, self.peak_specs(threads, device), packages)
        if remeasure:
            found = [r for r in found if r.spec.network == peak.RAISED]
            missing = self.peak_specs(threads, device)
        else:  # what another store on this machine measured (``machine_peaks``)
            borrowed = machine_peaks.borrow(self.store, missing, threads, device, packages)
            found += borrowed
            taken = {r.spec.run_id for r in borrowed}
            missing = [s for s in missing if s.run_id not in taken]
        measured = [self._run_and_store(s) for s in missing]
        machine_peaks.keep(self.store, measured)
        found += measured
        theory = environment.theoretical_peak(threads) if device == "cpu" else None
        return peak.peak_of(found, threads, device, theory.flops if theory else None,
                            theory.describe() if theory else "")

    def _launch(self, spec: RunSpec) -> RunResult | None:
        """Launch ``spec`` under the machine's measurement lock. Interrupted, the run in
        flight is stored as 'interrupted' before the interrupt goes on."""
        on_event = lambda ev: self.listener.event(spec, ev)  # noqa: E731
        with cpus_held(spec.label(), on_wait=lambda who: self.listener.waiting(spec, who)):
            try:
                kind = KINDS[spec.kind]
                if kind.launcher == "torchrun":
                    from dlperf.engine.launch.torchrun import run_parallel

                    return run_parallel(spec, timeout_s=self.timeout_s,
                                        memory_limit_bytes=self.memory_limit,
                                        on_event=on_event, **self.torchrun)
                if kind.launcher == "in_process":  # needs no framework: no worker either
                    return kind.run(spec, None, on_event, {}, None)
                return run_isolated(spec, timeout_s=self.timeout_s, on_event=on_event,
                                    memory_limit_bytes=self.memory_limit
                                    if kind.memory_limited else None,
                                    resume=self._resume(spec))
            except LaunchInterrupted as e:
                raise Interrupted(0, self.store.add(e.result)) from None

    def _resume(self, spec: RunSpec) -> Any:
        """What the latest run of ``spec`` on this machine hands this one, for a kind that
        resumes (``Kind.resume_from``: a calibration keeps the shapes it had timed)."""
        resume_from = KINDS[spec.kind].resume_from
        if resume_from is None:
            return None
        rows = self.store.results(kind=spec.kind, run_id=spec.run_id,
                                  machine_id=environment.machine_id())
        last = max(rows, key=lambda r: r.finished_at or 0, default=None)
        return resume_from(last) if last is not None else None

    def _run_and_store(self, spec: RunSpec) -> RunResult:
        result = self._launch(spec)
        return self.store.add(result)

    def resolve_peaks(self, specs: Sequence[RunSpec]) -> dict[tuple[int, str], peak.Peak]:
        """What the runs depend on, resolved before any of them runs: the peak at each
        thread count and device whose share a run reports (stored rates reused, the
        others measured now)."""
        keys = sorted({(peak_threads(t), s.device) for s in specs if (t := share_threads(s))})
        return {key: self.ensure_peak(*key) for key in keys}

    def with_share(self, result: RunResult, pk: peak.Peak) -> tuple[RunResult, peak.Peak]:
        """``result`` with its share of the peak and the peak's provenance, and the peak
        later runs compare with. A run faster than the peak raises it (stored, so later
        runs use it too) and says so; unless it is faster than the CPU's theoretical peak
        too: then its FLOP count or its thread count is off, and it must not lower every
        later run's share."""
        m = result.metrics
        if not result.ok or m is None or not m.achieved_flops or not pk.flops:
            return result, pk
        achieved, warnings, best = m.achieved_flops, list(result.warnings), pk.best
        if best and best.flops and achieved > best.flops:
            if pk.theoretical_flops and achieved > pk.theoretical_flops:
                warnings.append(peak.impossible_warning(achieved, pk, m.cpu_util))
            else:
                row = self.store.add(peak.raised_result(result, pk, environment.packages()))
                warnings.append(peak.raised_warning(achieved, best, pk))
                pk = pk.raised(peak.kernel_rate([row]))
        metrics = m.model_copy(update={"peak_flops": pk.flops,
                                       "peak_share": min(achieved / pk.flops, 1.0)})
        # the kind's outcome carries the peak (StepOutcome.peak, ParallelOutcome.peak)
        outcome = (result.outcome or KINDS[result.spec.kind].outcome()).model_copy(
            update={"peak": pk})
        return result.model_copy(update={"metrics": metrics, "warnings": warnings,
                                         "outcome": outcome}), pk

    def _settle(self, result: RunResult, peaks: dict[tuple[int, str], peak.Peak]) -> RunResult:
        """What follows from a result, in one place: its share of the peak (which it may
        raise for the runs after it), then the store, with the runs its worker measured
        besides (``Kind.beside``: a calibration's peak kernels, kept in the machine's peak
        store too, as a peak worker's are)."""
        if (threads := share_threads(result.spec)) is not None:
            key = (peak_threads(threads), result.spec.device)
            result, peaks[key] = self.with_share(result, peaks[key])
        beside = KINDS[result.spec.kind].beside
        result, others = beside(result) if beside is not None else (result, [])
        stored = self.store.add(result)
        others = [self.store.add(r) for r in others]
        machine_peaks.keep(self.store, [r for r in others if r.spec.kind == "peak"])
        return stored

    def run_all(self, specs: Sequence[RunSpec], stop: Callable[[], bool] | None = None,
                still_pending: Callable[[RunSpec], bool] | None = None) -> list[RunResult]:
        """Run each spec this process can claim; ``still_pending`` re-checks, once claimed,
        that no other sweep stored it meanwhile (the resume rule of the caller)."""
        results: list[RunResult] = []
        try:
            peaks = self.resolve_peaks(specs)
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
                    result = self._launch(spec)
                    if result is not None:  # stored before the claim is released
                        result = self._settle(result, peaks)
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
