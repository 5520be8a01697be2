"""Data flow's kinds: what an input pipeline measured (``DataflowOutcome``); kind
"loader" (the pipeline alone) and kind "storage" (a read bandwidth). What a pipeline is
(``InputOptions``) and its stages' costs (``Prep``) are ``dlperf.inputs.options``, named
here too.

``DataflowOutcome`` is a loader run's outcome, and ``StepOutcome.dataflow`` of a step
run on a pipeline.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dlperf.core.payload import Frozen, Payload
from dlperf.inputs.options import InputOptions, Prep


class LoaderOptions(InputOptions):
    """Kind "loader": the input pipeline alone, no training (its samples/s)."""

    def labelled(self, base: str) -> str:
        inp = self.describe()
        return base + " loader" + (f" {inp}" if inp else "")


class DataflowOutcome(Payload):
    """The data-flow figures of one step or loader run.

    For a step run, each timed step is ``stall + compute``: the stall is the time the
    training loop was blocked in the pipeline's ``next()``, the compute the training step
    up to the device's sync. ``Metrics.median_s`` stays the time per mini-batch.
    """

    kind: Literal["step", "loader"]
    stall_s: list[float] = Field(default_factory=list)  # per timed step, aligned with step_times_s
    stall_median_s: float = 0.0
    stall_mean_s: float = 0.0
    stall_share: float = 0.0  # sum of stalls / sum of step times over the timed steps
    compute_median_s: float | None = None  # the training step alone (step runs)
    prep: Prep | None = None  # median per batch, where the pipeline can time itself
    loader_samples_per_s: float | None = None  # loader runs: samples over wall time
    batches_per_step: int = 1  # loader runs time rounds of one batch per worker
    prefetch_in_force: int | None = None  # what the framework's knob was set to
    loader_cpus: list[int] = Field(default_factory=list)
    data_set: str = ""  # the generated data set's folder name ('' in memory)
    data_set_bytes: int = 0
    eviction: str = ""  # what --cache cold did, or why the platform refused
    h2d_s: float | None = None  # loader runs on a GPU: median copy of a batch to the device
    h2d_bytes: int | None = None
    notes: list[str] = Field(default_factory=list)


class StorageOptions(Frozen):
    """A storage bandwidth measurement (kind "storage"): which file or folder, how large a
    test file, which tool. The path is part of the identity: two disks are two results."""

    path: str
    file_bytes: int = Field(ge=1)
    tool: Literal["fio", "direct"]

    def labelled(self, base: str) -> str:
        return f"storage {self.path} ({self.tool})"


class StorageOutcome(Payload):
    """Cold read bandwidth of a storage (``dlperf.kinds.dataflow.storage``)."""

    tool: str
    method: str
    file_bytes: int
    seq_bytes_per_s: float
    seq_block: int
    rand_bytes_per_s: float
    rand_block: int
    notes: list[str] = Field(default_factory=list)
