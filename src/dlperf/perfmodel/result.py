"""What predict() returns: the predicted time, its breakdown and per-layer times."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, computed_field

from dlperf.perfmodel.input_pipeline import InputPrediction
from dlperf.perfmodel.memory import MemoryBreakdown


class Breakdown(BaseModel):
    """Where the predicted time goes; the terms add up to ``Prediction.time_s``."""

    model_config = ConfigDict(frozen=True)

    compute_s: float  # passes limited by FLOP/s: matrix products, convolutions
    memory_s: float  # passes limited by bandwidth: elementwise, normalisation, pooling, update
    overhead_s: float  # fixed cost of every kernel launch
    communication_s: float  # gradients, weights or activations between devices
    bubble_s: float  # pipeline fill and drain
    straggler_s: float  # waiting for (or losing throughput to) the slow worker
    #: the input pipeline: the stall, and the step's stretch by the loader's work on its
    #: cores (0 on data already in place; ``perfmodel.input_pipeline``)
    input_s: float = 0.0

    @property
    def total_s(self) -> float:
        return sum(self.model_dump().values())


class MemoryMargin(BaseModel):
    """How far the memory model has erred where it was checked: the relative error a batch
    chosen to fit leaves as margin, and what it was measured over (for example 'the 90th
    percentile |error| over 9 tensorflow steps measured here')."""

    model_config = ConfigDict(frozen=True)

    error: float
    basis: str


class ValidatedError(BaseModel):
    """How far the model's time has erred on configurations of the kind predicted,
    measured on this machine (``kinds.calibrate.trust``): the 90th percentile and the
    median of the absolute error, over ``n`` configurations described by ``basis``."""

    model_config = ConfigDict(frozen=True)

    p90: float
    median: float
    n: int
    basis: str


class LayerTime(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    op: str
    bound: Literal["compute", "memory"]
    time_s: float
    flops: float
    bytes: float


class Prediction(BaseModel):
    """A predicted time per mini-batch with its breakdown, per-layer times (of one device,
    or of the whole pipeline) and the assumptions that shaped it."""

    model_config = ConfigDict(frozen=True)

    network: str
    size: str
    batch_size: int
    device: str
    precision: str
    strategy: str
    devices: int
    nodes: int
    groups: int | None = None
    micro_batches: int | None = None
    #: the pipeline's stages, each its layers' names (cut as dlperf parallel cuts them)
    stages: list[list[str]] | None = None
    links: dict[str, str]
    time_s: float
    breakdown: Breakdown
    layers: list[LayerTime]
    flops_per_step: float
    #: the peak of one step per device, by what holds it (``perfmodel.memory``)
    memory: MemoryBreakdown
    memory_bytes: float  # per device: ``memory.total`` (its earlier name)
    #: whether ``memory`` fits the device's memory, and the largest global batch that does
    fits: bool
    max_batch: int | None = None
    #: whether ``max_batch`` is the largest the search tried: that many or more fit
    max_batch_or_more: bool = False
    #: the memory model's validated error, where the caller knows it, and the largest
    #: global batch whose peak grown by it still fits (what ``dlperf advise`` advises)
    memory_margin: MemoryMargin | None = None
    max_batch_with_margin: int | None = None
    #: predicted model FLOPs utilisation, and the peak it divides by (None: a device whose
    #: peak dlperf does not know)
    mfu: float | None = None
    mfu_peak: str | None = None
    notes: list[str]
    calibration: str
    #: on a catalogue GPU, the framework whose reference curves were scaled to it (None:
    #: no curves scaled: this machine's calibration, or a CPU's efficiency factors)
    curves: str | None = None
    #: the input pipeline's part (None: data already in place, as DLBench timed it)
    input: InputPrediction | None = None
    #: on this machine, the model's validated error for this kind of configuration (None:
    #: a catalogue device, or fewer than two such configurations measured here)
    validated_error: ValidatedError | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def peak_memory_bytes(self) -> float:
        return self.memory.total

    @computed_field  # type: ignore[prop-decorator]
    @property
    def samples_per_s(self) -> float:
        return self.batch_size / self.time_s
