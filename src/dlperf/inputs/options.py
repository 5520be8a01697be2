"""What an input pipeline is (``InputOptions``: how a run's mini-batches reach the step)
and what its stages cost per mini-batch (``Prep``). Framework-free: the kinds of run read
them as options, each framework's pipeline (``dlperf.backends.<framework>_input``) builds
from them.

``InputOptions`` are the fields of a "step" run's options (``StepOptions`` subclasses it)
and a "loader" run's (``LoaderOptions``): their defaults are synthetic tensors already on
the device, and a spec's identity counts only options that differ from their defaults, so
every result measured before data flow existed keeps its id, and every input setting that
is not a default is part of the identity.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from dlperf.core.payload import Frozen, Payload
from dlperf.core.units import nbytes

InputMode = Literal["synthetic", "memory", "disk"]
DataFormat = Literal["jpeg", "png", "raw"]
CacheState = Literal["warm", "cold"]
INPUT_MODES: tuple[str, ...] = ("synthetic", "memory", "disk")
DATA_FORMATS: tuple[str, ...] = ("jpeg", "png", "raw")
#: formats that hold images and must be decoded; 'raw' holds the input tensor's bytes
IMAGE_FORMATS: tuple[str, ...] = ("jpeg", "png")
#: samples in a generated data set unless --samples says otherwise: a few epochs of the
#: DLBench batches, small enough to generate in seconds (resnet50's JPEGs: about 50 MB)
DEFAULT_SAMPLES = 512


class InputOptions(Frozen):
    """How a run's mini-batches reach the training step."""

    input: InputMode = Field("synthetic", description="synthetic: one batch made on the "
                             "device before timing (DLBench); memory: a decoded data set in "
                             "host memory; disk: files read every epoch")
    data_format: DataFormat = Field("jpeg", description="disk only: jpeg or png image files "
                                    "(read and decoded), raw fixed-size records (read only)")
    loader_workers: int = Field(0, ge=0, description="loader processes (0: load in the "
                                "training process)")
    prefetch: int = Field(0, ge=0, description="batches prepared ahead of the training loop "
                          "(per loader worker where the framework counts so)")
    autotune: bool = Field(False, description="the framework picks the parallelism and "
                           "prefetch depth itself (tf.data's AUTOTUNE); loader_workers and "
                           "prefetch are then unused")
    pin_memory: bool = Field(False, description="batches in page-locked host memory (GPU)")
    cache: CacheState = Field("warm", description="cold: the data set's files are evicted "
                              "from the page cache before the run and at every epoch")
    samples: int = Field(DEFAULT_SAMPLES, ge=1, description="samples in the data set")
    sample_delay_s: float = Field(0.0, ge=0, allow_inf_nan=False, description="an added "
                                  "wait per sample in the loader (a slower source, a heavier "
                                  "augmentation): what-ifs and tests")
    device_memory_bytes: int | None = Field(None, ge=1, description="cap on the device "
                                            "memory the framework may allocate (GPU)")
    memory_limit_bytes: int | None = Field(None, ge=1, description="the host memory limit "
                                           "the run was measured under (the memory search): "
                                           "an out-of-memory under one limit says nothing of "
                                           "another")

    @model_validator(mode="after")
    def _consistent(self) -> InputOptions:
        if self.input == "synthetic":
            given = sorted(self.model_dump(exclude_defaults=True).keys()
                           - {"input", "memory_limit_bytes"})
            if given:
                raise ValueError(f"{', '.join(given)} need an input pipeline (input memory or "
                                 "disk); synthetic data has none")
        if self.autotune and (self.loader_workers or self.prefetch):
            raise ValueError("autotune picks loader_workers and prefetch itself: give "
                             "neither")
        if self.input == "memory":
            if self.cache != "warm":
                raise ValueError("cache cold applies to input disk (a data set in memory is "
                                 "never read from storage)")
            if self.data_format != "jpeg":
                raise ValueError("data_format applies to input disk (a data set in memory is "
                                 "held decoded)")
        return self

    @property
    def synthetic(self) -> bool:
        return self.input == "synthetic"

    def to_options(self) -> dict[str, Any]:
        """The settings that differ from the defaults (what a spec's identity counts):
        empty for synthetic data."""
        return self.model_dump(exclude_defaults=True)

    @property
    def has_pipeline(self) -> bool:
        """True when a run trains on (or times) a real input pipeline."""
        return self.input != "synthetic"

    def labelled(self, base: str) -> str:
        """A RunSpec's label with these settings: 'alexnet torch/eager cpu x1 b16
        disk:jpeg w2 p2'."""
        inp = self.describe()
        return base + (f" {inp}" if inp else "")

    def describe(self) -> str:
        """Compact label: 'disk:jpeg w2 p2 pin cold n512 +5ms'; '' for synthetic data."""
        limit = f"limit {nbytes(self.memory_limit_bytes)}" if self.memory_limit_bytes else ""
        if self.synthetic:
            return limit
        parts = [f"{self.input}:{self.data_format}" if self.input == "disk" else self.input]
        parts += ["autotune"] if self.autotune else [f"w{self.loader_workers}", f"p{self.prefetch}"]
        if self.pin_memory:
            parts.append("pin")
        if self.cache == "cold":
            parts.append("cold")
        if self.samples != DEFAULT_SAMPLES:
            parts.append(f"n{self.samples}")
        if self.sample_delay_s:
            parts.append(f"+{self.sample_delay_s * 1e3:g}ms")
        if self.device_memory_bytes is not None:
            parts.append(f"device cap {nbytes(self.device_memory_bytes)}")
        return " ".join(parts + ([limit] if limit else []))


class Prep(Payload):
    """Seconds of loader work behind one mini-batch, summed over its samples (work spread
    over several loader workers adds up: this is work, not waiting)."""

    read_s: float = 0.0  # bytes from storage (or from host memory)
    decode_s: float = 0.0  # JPEG/PNG decoding; 0 for raw records
    augment_s: float = 0.0  # flip, normalise, layout (and any injected delay)
    collate_s: float = 0.0  # stacking the samples into one batch

    @property
    def total_s(self) -> float:
        return self.read_s + self.decode_s + self.augment_s + self.collate_s
