"""Where and how the Slurm executor submits: the flags ``--partitions``, ``--constraint``,
``--nodelist``, ``--slurm-time``, ``--cpus-per-task``, ``--gpus``, ``--account``,
``--exclusive`` and ``--slurm-dir``, or a sweep file's ``[slurm]`` table::

    [slurm]
    partitions = ["cpu", "gpu-a100"]  # one job per configuration group on each
    constraint = "skylake"            # sbatch --constraint
    nodelist = "node[01-04]"          # sbatch --nodelist
    time = "2:00:00"                  # sbatch --time, Slurm's format (minutes, H:MM:SS, D-HH)
    cpus_per_task = 32                # default: the group's thread count
    gpus = 1                          # default: 1 for a GPU run, none for a CPU run
    account = "proj42"
    exclusive = true                  # a node of its own per job
    folder = "/shared/dlperf-jobs"    # where jobs write their results (shared file system)

Everything is validated here, so the sweep file and the flags give the same one-line
errors.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Slurm's time formats: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
#: days-hours:minutes, days-hours:minutes:seconds
_TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}")
#: what a partition, constraint, node list or account may hold: no spaces, no shell
_WORD = re.compile(r"[A-Za-z0-9_.,:|&*\[\]()!@=+-]+")


class SlurmSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: empty: the cluster's default partition
    partitions: list[str] = Field(default_factory=list)
    constraint: str | None = None
    nodelist: str | None = None
    time: str | None = None
    cpus_per_task: int | None = Field(None, ge=1)
    gpus: int | None = Field(None, ge=0)
    account: str | None = None
    exclusive: bool = False
    #: where the jobs write their results; default: beside the store (``<store>.slurm/``)
    folder: str | None = None
    #: the interpreter the jobs run dlperf with; default: this one (a shared install)
    python: str | None = None
    #: seconds between two looks at the jobs' states
    poll_s: float = Field(5.0, gt=0, allow_inf_nan=False)
    #: nodes of one multi-node run (``dlperf parallel --executor slurm --nodes N``)
    nodes: int = Field(1, ge=1)

    @field_validator("partitions")
    @classmethod
    def _partitions(cls, v: list[str]) -> list[str]:
        for p in v:
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", p):
                raise ValueError(f"'{p}' is not a Slurm partition name")
        return list(dict.fromkeys(v))

    @field_validator("constraint", "nodelist", "account")
    @classmethod
    def _word(cls, v: str | None) -> str | None:
        if v is not None and not _WORD.fullmatch(v):
            raise ValueError(f"'{v}' is not a value sbatch takes")
        return v

    @field_validator("time")
    @classmethod
    def _time(cls, v: str | None) -> str | None:
        if v is not None and not _TIME.fullmatch(v):
            raise ValueError(f"'{v}' is not a Slurm time (minutes, H:MM:SS or D-HH:MM:SS)")
        return v
