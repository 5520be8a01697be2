"""The rule of training to a target, the same for ``dlperf train`` (one process) and
``dlperf parallel --target-accuracy`` (several workers): evaluate on held-out data every
few steps; stop when every goal is reached, or when the budget (steps, epochs, training
time: whichever ends first) is spent. A budget spent before the goal is a failure with
reason 'budget' that keeps the whole curve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Goal:
    """A held-out measure to reach: at least ``value`` if higher is better, else at most."""

    name: str
    value: float
    higher_is_better: bool

    def reached(self, measured: float) -> bool:
        return measured >= self.value if self.higher_is_better else measured <= self.value


def reached(goals: Sequence[Goal], measured: Mapping[str, float]) -> bool:
    """True when there is a goal and every one is reached (accuracy and loss both, when a
    run names both)."""
    return bool(goals) and all(g.reached(measured[g.name]) for g in goals)


def accuracy_and_loss_goals(accuracy: float | None, loss: float | None) -> list[Goal]:
    """The goals of a classifier trained to a held-out accuracy and/or loss."""
    goals = []
    if accuracy is not None:
        goals.append(Goal("accuracy", accuracy, True))
    if loss is not None:
        goals.append(Goal("loss", loss, False))
    return goals


@dataclass(frozen=True)
class Budget:
    """How long a run may train: steps, epochs, seconds of training (None: no limit)."""

    max_steps: int | None = None
    max_epochs: float | None = None
    max_time_s: float | None = None

    def spent(self, *, steps: int, epochs: float = 0.0, train_s: float = 0.0) -> str | None:
        """What ended the budget ('20000 steps', '3 epochs', '60 s of training'), else None."""
        if self.max_steps is not None and steps >= self.max_steps:
            return f"{self.max_steps} steps"
        if self.max_epochs is not None and epochs >= self.max_epochs:
            return f"{self.max_epochs:g} epochs"
        if self.max_time_s is not None and train_s >= self.max_time_s:
            return f"{self.max_time_s:g} s of training"
        return None

    def describe(self, steps: str = "steps") -> str:
        """'2000 mini-batches or 30 s', naming the unit of a step."""
        parts = []
        if self.max_steps is not None:
            parts.append(f"{self.max_steps} {steps}")
        if self.max_epochs is not None:
            parts.append(f"{self.max_epochs:g} epochs")
        if self.max_time_s is not None:
            parts.append(f"{self.max_time_s:g} s")
        return " or ".join(parts) or "no limit"
