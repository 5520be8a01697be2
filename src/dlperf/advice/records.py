"""What a recommendation is: a statement, its number, and where the number comes from.

Every number is one of three kinds: measured on this machine (with its dispersion and the
configuration that measured it), predicted by the performance model (with the model's
validated error for that kind of configuration, or the plain statement that it has none
yet), or unknown (with the command that would measure it). Nothing else is allowed, so
advice can never show a number without saying how much to trust it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from dlperf.perfmodel.result import Prediction

#: The model's validated relative error for the kind of configuration a prediction is
#: (e.g. 0.25 for +-25%), or None where it has not been validated. ``dlperf validate``
#: provides one; advice passes None until then and says "error not validated yet".
ErrorLookup = Callable[[Prediction], float | None]

Topic = Literal["network", "framework", "threads", "allocator", "devices", "data", "batch"]


@dataclass(frozen=True)
class Measured:
    """Measured here: the configuration, its dispersion, the settings that measured it."""

    configuration: str
    dispersion: str  # '+-3.1% (CV of 12 timed steps)'

    def describe(self) -> str:
        return f"measured here: {self.configuration}, {self.dispersion}"


@dataclass(frozen=True)
class Predicted:
    """Predicted by the performance model: what it predicted and its validated error."""

    configuration: str
    error: float | None  # relative, from the ErrorLookup; None: not validated yet
    basis: str = ""  # what the model assumed (efficiencies and their source, in short)
    #: the validated error where it is not a relative one (a stall share's points)
    validated: str = ""

    def describe(self) -> str:
        err = (f"validated error +-{self.error:.0%}" if self.error is not None else
               f"validated error {self.validated}" if self.validated else
               "error not validated yet")
        basis = f"; {self.basis}" if self.basis else ""
        return f"predicted: {self.configuration}, {err}{basis}"


@dataclass(frozen=True)
class Unknown:
    """Neither measured nor predicted: the command that would measure it."""

    command: str
    why: str = "not measured here"

    def describe(self) -> str:
        return f"{self.why}; to find out run: {self.command}"


Source = Measured | Predicted | Unknown


@dataclass(frozen=True)
class Recommendation:
    topic: Topic
    subject: str  # what it is about: 'resnet50', 'threads for fcn5', ...
    advice: str  # the recommendation in words
    value: float | None  # the number behind it (None only for Unknown)
    unit: str  # 's', 'samples/s', 'threads', 'h', ...
    source: Source

    @property
    def kind(self) -> str:
        return {Measured: "measured", Predicted: "predicted", Unknown: "unknown"}[type(self.source)]


@dataclass(frozen=True)
class HardwareAdvice:
    """The recommendations for one piece of hardware ('this machine', '8 x a100-40gb')."""

    hardware: str
    recommendations: tuple[Recommendation, ...]
    notes: tuple[str, ...] = ()

    def of(self, topic: Topic) -> list[Recommendation]:
        return [r for r in self.recommendations if r.topic == topic]


@dataclass(frozen=True)
class Advice:
    task: str
    samples: int
    epochs: float
    hardware: tuple[HardwareAdvice, ...]
