"""Kind "step": time per mini-batch of one network on synthetic data (DLBench's
measure), and what a measured step carries besides its metrics."""

from __future__ import annotations

from dlperf.kinds.base import Frozen, Payload
from dlperf.kinds.peak import Peak


class StepOptions(Frozen):
    """Nothing yet: a step's settings are the RunSpec's own fields."""


class StepOutcome(Payload):
    """The peak the step's achieved FLOP/s was compared with (its share of peak)."""

    peak: Peak | None = None
