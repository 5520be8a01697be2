"""Kind "peak": one library's large kernel timed as a step (``dlperf.kinds.peak.rates``), and the peak
built from such rates, which every step result carries as its provenance."""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from dlperf.core.payload import Frozen, Payload

#: The kernel name of a peak raised by a training run that beat every kernel.
RAISED = "raised"


class PeakOptions(Frozen):
    """A kernel's operands and the versions of its library's packages (both in the
    identity, so a changed library measures again); for a raised peak, the run that
    raised it."""

    shape: str | None = None
    versions: dict[str, str] = {}
    by: str | None = None
    run_id: str | None = None


class KernelRate(Payload):
    """One kernel's measured rate (or why it has none), with its provenance."""

    framework: str
    kernel: str  # 'matmul', 'conv', or RAISED
    flops: float | None  # the best round's rate
    size: int
    shape: str = ""
    versions: dict[str, str] = {}
    measured_at: float | None = None
    failure: str | None = None
    raised_by: str | None = None  # the label of the run that raised the peak
    round_flops: tuple[float, ...] = ()  # each round's rate (the median of its steps)

    @property
    def source(self) -> str:
        """'tensorflow matmul', or 'raised by fcn5 tensorflow/graph cpu x1 b64'."""
        return f"raised by {self.raised_by}" if self.kernel == RAISED else f"{self.framework} {self.kernel}"


class Peak(Payload):
    """The peak at one thread count and device: every kernel's rate, the best of them, and
    the theoretical peak where the CPU's FMA units are known (``dlperf.core.cpu_peak``)."""

    threads: int
    device: str
    rates: tuple[KernelRate, ...] = ()
    theoretical_flops: float | None = None
    theoretical: str = ""  # how the theoretical peak was computed, or why it is unknown

    @model_validator(mode="before")
    @classmethod
    def _drop_derived(cls, data: Any) -> Any:
        # results stored before the peak was typed carry its derived 'flops' and 'best'
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in ("flops", "best")}
        return data

    @property
    def best(self) -> KernelRate | None:
        measured = [k for k in self.rates if k.flops]
        return max(measured, key=lambda k: k.flops or 0.0) if measured else None

    @property
    def flops(self) -> float | None:
        best = self.best
        return best.flops if best else None

    def library_best(self, framework: str) -> KernelRate | None:
        """The best kernel of one library (raised rows excluded: they are not kernels)."""
        own = [k for k in self.rates if k.framework == framework and k.kernel != RAISED and k.flops]
        return max(own, key=lambda k: k.flops or 0.0) if own else None

    def raised(self, rate: KernelRate) -> Peak:
        return self.model_copy(update={"rates": (*self.rates, rate)})
