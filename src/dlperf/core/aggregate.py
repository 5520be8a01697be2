"""From stored RunResults to one ConfigResult per configuration: repetitions combined,
failures kept (the report side; ``dlperf.kinds.parallel.results`` is the run side of a parallel run).

A configuration is a RunSpec's ``config_id`` (which includes its precision and its
measurement settings) on one machine: results of different machines or settings are
never combined, and ``settings_names`` labels the settings so that tables show them.

A configuration measured in several worker processes is summarised by the median of the
per-process medians (robust to one disturbed process) and by the spread between
processes (coefficient of variation of those medians); within-process spread is the
median of the per-process coefficients of variation.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dlperf.core.spec import Measurement, RunResult, RunSpec


@dataclass
class ConfigResult:
    """Every stored repetition of one configuration on one machine, combined: what
    ``dlperf.run`` returns and what each line of a table shows."""

    spec: RunSpec  # repetition 0's spec (or the first seen)
    results: list[RunResult] = field(default_factory=list)
    machine_id: str | None = None  # the machine every result of the row ran on

    @property
    def ok(self) -> list[RunResult]:
        return [r for r in self.results if r.ok and r.metrics]

    @property
    def measured(self) -> bool:
        return bool(self.ok)

    @property
    def peak_provenance(self) -> Any:
        """The peak the newest measured repetition was compared with (a step's
        ``StepOutcome.peak``; core reads it without knowing the kind)."""
        return next((peak for r in reversed(self.ok)
                     if (peak := getattr(r.outcome, "peak", None))), None)

    @property
    def failure(self) -> str | None:
        """The reason to show when no repetition succeeded."""
        if self.ok or not self.results:
            return None
        f = self.results[-1].failure
        return f"{f.reason}: {f.message}" if f else "failed"

    @property
    def failure_reason(self) -> str | None:
        if self.ok or not self.results:
            return None
        f = self.results[-1].failure
        return f.reason if f else "failed"

    def _medians(self) -> list[float]:
        return [r.metrics.median_s for r in self.ok]  # type: ignore[union-attr]

    @property
    def median_s(self) -> float | None:
        m = self._medians()
        return statistics.median(m) if m else None

    @property
    def processes(self) -> int:
        return len(self.ok)

    @property
    def between_cv(self) -> float | None:
        m = self._medians()
        if len(m) < 2:
            return None
        return statistics.stdev(m) / statistics.fmean(m)

    @property
    def within_cv(self) -> float | None:
        cvs = [r.metrics.cv for r in self.ok]  # type: ignore[union-attr]
        return statistics.median(cvs) if cvs else None

    @property
    def mad_s(self) -> float | None:
        """Median absolute deviation of all timed steps of all processes."""
        steps = [s for r in self.ok for s in r.step_times_s]
        if not steps:
            return None
        med = statistics.median(steps)
        return statistics.median(abs(s - med) for s in steps)

    def _metric(self, name: str) -> float | None:
        vals = [getattr(r.metrics, name) for r in self.ok if getattr(r.metrics, name) is not None]
        return statistics.median(vals) if vals else None

    @property
    def samples_per_s(self) -> float | None:
        med = self.median_s
        return self.spec.batch_size / med if med else None

    @property
    def flops_per_step(self) -> float | None:
        return self._metric("flops_per_step")

    @property
    def achieved_flops(self) -> float | None:
        f, med = self.flops_per_step, self.median_s
        return f / med if f and med else None

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilisation: the model FLOPs per second at the median time over the
        device's peak at the run's precision (``utilisation_peak``), None where unknown."""
        peak, med = self._metric("utilisation_peak_flops"), self.median_s
        model = self._metric("model_flops_per_step")
        return model / med / peak if peak and model and med else None

    @property
    def hfu(self) -> float | None:
        """Hardware FLOPs utilisation: the executed FLOPs per second over the same peak."""
        peak, a = self._metric("utilisation_peak_flops"), self.achieved_flops
        return a / peak if peak and a else None

    @property
    def utilisation_peak(self) -> str | None:
        """What MFU and HFU divide by, or why they are unknown (the newest repetition's)."""
        return next((r.metrics.utilisation_peak for r in reversed(self.ok)
                     if r.metrics.utilisation_peak), None)  # type: ignore[union-attr]

    @property
    def peak_share(self) -> float | None:
        """Achieved FLOP/s over the peak stored with the results, never above 1: a result
        stored by an older dlperf may lie above its peak (``over_peak`` says so)."""
        peak = self._metric("peak_flops")
        a = self.achieved_flops
        return min(a / peak, 1.0) if a and peak else None

    @property
    def over_peak(self) -> bool:
        """True when the achieved rate lies above the peak stored with the results."""
        peak = self._metric("peak_flops")
        a = self.achieved_flops
        return bool(a and peak and a > peak)

    @property
    def _peak_rss_run(self) -> RunResult | None:
        """The repetition with the highest resident peak (None where none recorded one)."""
        runs = [r for r in self.ok if r.metrics.peak_rss_bytes]  # type: ignore[union-attr]
        return max(runs, key=lambda r: r.metrics.peak_rss_bytes) if runs else None  # type: ignore[union-attr]

    @property
    def peak_rss_bytes(self) -> float | None:
        top = self._peak_rss_run
        return top.metrics.peak_rss_bytes if top else None  # type: ignore[union-attr]

    @property
    def file_rss_bytes(self) -> float | None:
        """The files' pages resident in the repetition whose peak is ``peak_rss_bytes``
        (None where it did not record them)."""
        top = self._peak_rss_run
        return top.metrics.file_rss_bytes if top else None  # type: ignore[union-attr]

    @property
    def device_peak_bytes(self) -> float | None:
        """The device allocator's peak of the repetitions (a GPU's; None on a CPU)."""
        vals = [r.metrics.device_peak_bytes for r in self.ok if r.metrics.device_peak_bytes]  # type: ignore[union-attr]
        return max(vals) if vals else None

    @property
    def cpu_util(self) -> float | None:
        return self._metric("cpu_util")

    @property
    def minor_faults_per_step(self) -> float | None:
        return self._metric("minor_faults_per_step")

    @property
    def system_s_per_step(self) -> float | None:
        return self._metric("system_s_per_step")

    @property
    def new_page_bytes_per_step(self) -> float | None:
        """The minor faults a step at this machine's base page size (a huge page is one
        fault)."""
        import resource

        faults = self.minor_faults_per_step
        return None if faults is None else faults * resource.getpagesize()

    @property
    def allocators(self) -> list[str]:
        """The memory allocators its processes ran under, as recorded (``environment.
        allocator``; none for a run an older dlperf stored)."""
        return sorted({r.software["allocator"] for r in self.ok if "allocator" in r.software})

    @property
    def threads_in_force(self) -> int | None:
        vals = {r.threads_in_force for r in self.ok if r.threads_in_force is not None}
        return vals.pop() if len(vals) == 1 else None

    @property
    def warnings(self) -> list[str]:
        seen: dict[str, None] = {}
        for r in self.ok:
            for w in r.warnings:
                seen.setdefault(w, None)
        if self.over_peak:
            seen.setdefault(over_peak_note(self.achieved_flops, self._metric("peak_flops")), None)
        if len(mixed := self.allocators) > 1:
            seen.setdefault(
                "its processes ran under different memory allocators ("
                + " | ".join(mixed) + "): their times do not compare; measure each "
                "setting into a store of its own (--db)", None)
        cv = self.between_cv
        if cv is not None and cv > 0.05:
            seen.setdefault(
                f"unstable between processes: medians vary by {cv:.1%}; raise --repeat or "
                "measure on a quieter machine", None)
        return list(seen)

    @property
    def framework_label(self) -> str:
        """'torch/eager', with the precision when it is not fp32: 'torch/eager bf16'."""
        prec = "" if self.spec.precision == "fp32" else f" {self.spec.precision}"
        return f"{self.spec.framework}/{self.spec.variant}{prec}"


#: A time ratio within this of 1 reads as no change: one quick process per configuration
#: does not resolve less (its steps vary by a few percent, docs/measurement.md).
SAME_WITHIN = 0.02


def direction(ratio: float) -> str:
    """'slower', 'faster' or 'no change' for a time ratio (new time over old)."""
    if ratio > 1 + SAME_WITHIN:
        return "slower"
    if ratio < 1 - SAME_WITHIN:
        return "faster"
    return "no change"


def over_peak_note(achieved: float | None, peak: float | None) -> str:
    """Why a share of peak shows 100% where the stored rates give more (a result stored by
    a dlperf that did not yet raise the peak past a faster run)."""
    return (f"achieved {(achieved or 0) / 1e9:.1f} GFLOP/s is above the peak stored with this "
            f"result ({(peak or 0) / 1e9:.1f} GFLOP/s); its share is shown as 100%")


def config_key(result: RunResult) -> tuple[str | None, str]:
    """What makes results repetitions of one configuration: the machine and the config_id."""
    return result.machine_id, result.spec.config_id


def aggregate(results: Iterable[RunResult]) -> list[ConfigResult]:
    """One ConfigResult per configuration and machine, in the order they were first stored."""
    rows: dict[tuple[str | None, str], ConfigResult] = {}
    for r in results:
        key = config_key(r)
        if key not in rows:
            rows[key] = ConfigResult(spec=r.spec.model_copy(update={"repeat": 0}), machine_id=r.machine_id)
        rows[key].results.append(r)
    return list(rows.values())


def settings_names(rows: Iterable[ConfigResult]) -> dict[Measurement, str]:
    """A name for every measurement setting among the rows: 'quick', 'full', 'default'
    (dlperf.core.settings.NAMED_SETTINGS), 'custom', or 'custom1', 'custom2', ... when several
    unnamed settings occur."""
    from dlperf.core.settings import settings_name

    seen = list(dict.fromkeys(r.spec.measurement for r in rows))
    custom = [m for m in seen if settings_name(m) == "custom"]
    names = {}
    for m in seen:
        name = settings_name(m)
        if name == "custom" and len(custom) > 1:
            name = f"custom{custom.index(m) + 1}"
        names[m] = name
    return names


def settings_notes(names: dict[Measurement, str]) -> list[str]:
    """One footnote per measurement setting: its name and what it is."""
    from dlperf.core.settings import describe_settings

    return [f"settings {name}: {describe_settings(m)}" for m, name in names.items()]


def other_framework_rates(store: Any, spec: RunSpec) -> dict[str, float]:
    """FLOP/s of the same configuration (network, size, params, threads, batch, device) on
    this machine in other frameworks or variants, from the store: framework label -> rate."""
    from dlperf.core.environment import machine_id

    rows = aggregate(store.results(kind="step", status="ok", network=spec.network, size=spec.size,
                                   threads=spec.threads, batch_size=spec.batch_size,
                                   device=spec.device, machine_id=machine_id()))
    return {r.framework_label: r.achieved_flops for r in rows
            if (r.spec.framework, r.spec.variant) != (spec.framework, spec.variant)
            and r.spec.params == spec.params and r.spec.options == spec.options
            and r.achieved_flops}
