"""Sweep configuration: from CLI flags or a TOML sweep file to a frozen, validated config.

A sweep file looks like this (every key optional but ``networks``)::

    [sweep]
    networks = ["fcn5", "alexnet"]
    frameworks = ["torch", "jax"]
    variants = ["default"]          # or "all", or names such as "eager", "compile"
    devices = ["cpu"]
    precisions = ["fp32"]           # fp32, tf32 (GPU only), bf16, fp16
    threads = [1, 2, 4]             # or "auto": 1, 2, 4, ... past the logical CPUs
    batch_sizes = "default"         # "default" (DLBench's), "sweep" (DLBench's sweep) or a list
    size = "full"                   # "tiny" for a fast smoke test
    mode = "train"                  # or "inference": forward-only queries (kind "inference")
    repeat = 3                      # separate worker processes per configuration
    timeout = 1800                  # seconds per worker (> 0)
    memory_limit = "16GiB"
    env = "torch==2.12.0"           # that framework's runs in the environment 'dlperf setup
                                    # torch==2.12.0' made (docs/compare.md)
    executor = "local"              # or "slurm": each configuration group a Slurm job

    [measurement]                   # dlperf.core.spec.Measurement; part of each result's identity
    min_time_s = 2.0

    [slurm]                         # dlperf.engine.slurm.settings.SlurmSettings
    partitions = ["cpu", "gpu-a100"]

Everything wrong is reported as one line naming the file and the key.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dlperf import workloads
from dlperf.core import framework_table, separate_envs
from dlperf.core.errors import UsageError, validation_message
from dlperf.core.spec import Device, Measurement, Precision
from dlperf.engine.slurm.settings import SlurmSettings

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6,
          "mib": 2**20, "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12,
          "tib": 2**40}


def parse_bytes(text: str | int | float) -> int:
    """'8GiB' -> 8589934592; '512MB' -> 512000000; a plain number is bytes."""
    if isinstance(text, int | float):
        if not math.isfinite(text):
            raise UsageError(f"bad memory size '{text}' (examples: 512MiB, 8GiB, 2GB)")
        value = int(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise UsageError(f"bad memory size '{text}' (examples: 512MiB, 8GiB, 2GB)")
        value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise UsageError(f"memory size must be positive, got '{text}'")
    return value


def auto_threads() -> list[int]:
    """1, 2, 4, ... up to the usable CPUs, plus one step past them (DLBench saw 8 threads
    on 4 cores run slower; the step past the cores shows it)."""
    n = len(os.sched_getaffinity(0))
    out, t = [], 1
    while t <= n:
        out.append(t)
        t *= 2
    out.append(t)
    return out


class SweepConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    networks: list[str] = Field(min_length=1)
    #: "train": time per mini-batch (kind "step"); "inference": latency per query
    mode: Literal["train", "inference"] = "train"
    frameworks: list[str] = Field(default_factory=lambda: ["torch"], min_length=1)
    variants: list[str] = Field(default_factory=lambda: ["default"], min_length=1)
    devices: list[Device] = Field(default_factory=lambda: ["cpu"], min_length=1)
    precisions: list[Precision] = Field(default_factory=lambda: ["fp32"], min_length=1)
    threads: list[int] = Field(default_factory=lambda: [1], min_length=1)
    batch_sizes: list[int] | Literal["default", "sweep"] = "default"
    size: str | None = None
    params: dict[str, float | int | str | bool] = Field(default_factory=dict)
    repeat: int = Field(1, ge=1)
    seed: int = Field(0, ge=0, lt=2**31)  # NumPy's legacy seed, which Keras sets, is < 2**32
    timeout: float = Field(1800.0, gt=0, allow_inf_nan=False)
    memory_limit: int | None = None
    peak_size: int = Field(2048, ge=16, description="size of the peak kernels (matmul side)")
    measurement: Measurement = Field(default_factory=Measurement)
    #: another version of one of the frameworks, in its own environment ('torch==2.12.0'
    #: or its name 'torch-2.12.0'; made by ``dlperf setup torch==2.12.0``): that
    #: framework's runs use it
    env: str | None = None
    #: where the runs are measured: here, or as Slurm jobs with ``slurm``'s settings
    executor: Literal["local", "slurm"] = "local"
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)

    @field_validator("env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if not v:
            return None
        # 'torch==2.12.0' or the environment's name, 'torch-2.12.0'
        return separate_envs.get(v).name if "-" in v else separate_envs.versioned(v).name

    @model_validator(mode="after")
    def _env_framework(self) -> SweepConfig:
        fw = separate_envs.framework_of(self.env) if self.env else None
        if fw and fw not in self.frameworks:
            raise UsageError(f"--env {self.env} is an environment of {fw}, which the sweep "
                             f"does not run (frameworks: {', '.join(self.frameworks)})")
        return self

    def env_for(self, framework: str) -> str:
        """The environment ``framework``'s runs use: the sweep's ``env`` if it is one of
        that framework's, else dlperf's own ('')."""
        return self.env if self.env and separate_envs.framework_of(self.env) == framework \
            else ""

    @property
    def slurm_settings(self) -> SlurmSettings | None:
        """The Slurm settings when the executor is Slurm, else None (run here)."""
        return self.slurm if self.executor == "slurm" else None

    @field_validator("threads")
    @classmethod
    def _threads(cls, v: list[int]) -> list[int]:
        if any(t < 1 for t in v):
            raise ValueError("thread counts must be at least 1")
        return v

    @field_validator("batch_sizes")
    @classmethod
    def _batches(cls, v):
        if isinstance(v, list) and any(b < 1 for b in v):
            raise ValueError("batch sizes must be at least 1")
        return v

    @field_validator("params")
    @classmethod
    def _params(cls, v: dict[str, Any]) -> dict[str, Any]:
        for k, x in v.items():
            if isinstance(x, float) and not math.isfinite(x):
                raise ValueError(f"parameter {k} must be a finite number, got {x}")
        return v

    @field_validator("memory_limit", mode="before")
    @classmethod
    def _mem(cls, v):
        return None if v in (None, "", 0) else parse_bytes(v)

    @field_validator("networks")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        for name in v:
            workloads.get(name)
        return v

    @field_validator("frameworks")
    @classmethod
    def _frameworks(cls, v: list[str]) -> list[str]:
        return [framework_table.info(f).name for f in v]

    def variants_for(self, framework: str) -> list[str]:
        info = framework_table.info(framework)
        if self.variants == ["all"]:
            return list(info.variants)
        chosen = []
        for v in self.variants:
            if v in ("default", ""):
                chosen.append(info.default_variant)
            elif v in info.variants:
                chosen.append(v)
        if not chosen:  # none of the named variants belongs to this framework
            raise UsageError(
                f"no variant of {self.variants} exists for '{framework}' "
                f"(variants: {', '.join(info.variants)})"
            )
        return list(dict.fromkeys(chosen))

    def batches_for(self, network: str) -> list[int]:
        wl = workloads.get(network)
        if self.batch_sizes == "default":
            return [wl.default_batch]
        if self.batch_sizes == "sweep":
            return list(wl.batch_sweep)
        return list(self.batch_sizes)


def _one_line(e: ValidationError, where: str) -> str:
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "config"
    msg = validation_message(e)
    more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
    return f"{where}{loc}: {msg}{more}"


def build(where: str = "", **values: Any) -> SweepConfig:
    """Validate keyword values into a SweepConfig; one-line UsageError on any problem."""
    values = {k: v for k, v in values.items() if v is not None}
    try:
        return SweepConfig(**values)
    except ValidationError as e:
        raise UsageError(_one_line(e, where)) from None
    except UsageError as e:  # raised by a validator (unknown network, framework, size)
        raise UsageError(f"{where}{e}") from None


def load_sweep_file(path: str | Path, **overrides: Any) -> SweepConfig:
    """Read a TOML sweep file; CLI flags given alongside override its values."""
    p = Path(path)
    where = f"sweep file {p}: "
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise UsageError(f"sweep file {p} not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read sweep file {p}: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{where}malformed TOML: {e}") from None
    unknown = set(data) - {"sweep", "measurement", "slurm"}
    if unknown:
        raise UsageError(f"{where}unknown table [{sorted(unknown)[0]}] (tables: [sweep], "
                         "[measurement], [slurm])")
    values = dict(data.get("sweep", {}))
    if not isinstance(values, dict):
        raise UsageError(f"{where}[sweep] must be a table")
    if values.get("threads") == "auto":
        values["threads"] = auto_threads()
    if "measurement" in data:
        values["measurement"] = data["measurement"]
    if "slurm" in data:
        # flags given alongside override the table's keys one by one
        values["slurm"] = {**data["slurm"], **(overrides.pop("slurm", None) or {})}
    values.update({k: v for k, v in overrides.items() if v is not None})
    return build(where, **values)
