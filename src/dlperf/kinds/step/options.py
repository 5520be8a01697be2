"""Kind "step": time per mini-batch of one network (DLBench's measure), on synthetic data
by default or on a real input pipeline (``dlperf.kinds.dataflow.options``), and what a measured
step carries besides its metrics."""

from __future__ import annotations

from dlperf.core.payload import Payload
from dlperf.inputs.options import InputOptions
from dlperf.kinds.dataflow.options import DataflowOutcome
from dlperf.kinds.peak.options import Peak


class StepOptions(InputOptions):
    """The input pipeline the steps train on (all defaults: synthetic data, as DLBench,
    and an empty identity); the rest of a step's settings are the RunSpec's own fields."""


class StepOutcome(Payload):
    """The peak the step's achieved FLOP/s was compared with (its share of peak), and on
    an input pipeline the data-flow figures (stall per step, preparation, loader rate)."""

    peak: Peak | None = None
    dataflow: DataflowOutcome | None = None
