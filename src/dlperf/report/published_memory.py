"""The memory model against the allocator peaks dlperf measured on a lent GPU
(``reference.measured_gpu_memory``): what ``dlperf validate --published`` shows and the
error ``dlperf advise`` quotes for a catalogue GPU's largest batch. Nothing is fitted on
these rows; the prediction is ``perfmodel.memory.step_memory`` on the device."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import NamedTuple

from dlperf import workloads
from dlperf.core.stats import quantile
from dlperf.perfmodel.memory import MemoryBreakdown, step_memory
from dlperf.perfmodel.result import MemoryMargin
from dlperf.reference import MeasuredPeak, measured_gpu_memory


@dataclass(frozen=True)
class PeakCase:
    row: MeasuredPeak
    predicted: MemoryBreakdown

    @property
    def error(self) -> float:
        """Predicted over measured, less 1."""
        return self.predicted.total / self.row.device_peak_bytes - 1


def peak_cases() -> list[PeakCase]:
    """Each shipped GPU peak beside the model's."""
    out = []
    for row in measured_gpu_memory()[1]:
        _, _, cfg = workloads.resolve(row.network, row.size, {})
        out.append(PeakCase(row, step_memory(cfg.layers(), row.batch_size, row.precision,
                                             on_device=True, framework=row.framework)))
    return out


class GpuMemoryError(NamedTuple):
    """The model's error over the shipped GPU peaks."""

    median: float  # |error|
    p90: float
    n: int
    gpu: str  # where they were measured

    def margin(self) -> MemoryMargin:
        """The error a catalogue GPU's batch chosen to fit leaves as margin."""
        return MemoryMargin(error=self.p90, basis=(
            f"the 90th percentile |error| over {self.n} steps' allocator peaks measured on "
            f"{self.gpu} (median {self.median:.0%}; dlperf validate --published)"))

    def describe(self) -> str:
        return f"{self.margin().basis}, left as margin"


def gpu_memory_error() -> GpuMemoryError:
    """The model's |error| over the shipped GPU peaks (``peak_cases``)."""
    cases = peak_cases()
    mags = sorted(abs(c.error) for c in cases)
    return GpuMemoryError(statistics.median(mags), quantile(mags, 0.9), len(cases),
                          ", ".join(sorted({c.row.gpu for c in cases})))
