"""RunSpec (what to measure), RunResult (what was measured) and Failure (why not).

All three are frozen pydantic models that round-trip through JSON: the parent writes a
RunSpec to a file, the worker process reads it and writes a RunResult back, and the store
keeps the JSON. ``SCHEMA_VERSION`` is stored with every result; bump it when a field
changes meaning.

What differs between kinds of run lives in ``dlperf.kinds``: a spec's ``options`` and a
result's ``outcome`` are that kind's typed models, chosen by ``kind`` from the table of
kinds (``dlperf.core.kind_table``), which this module reads without importing the kinds.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, model_serializer, model_validator

from dlperf.core import kind_table
from dlperf.core.payload import Diagnostics
from dlperf.core.units import nbytes

# 2: RunSpec.precision; measurement settings and precision in the ids
# 3: typed options (identity: the options that differ from their defaults) and outcomes
SCHEMA_VERSION = 3

#: the kinds of run: "step", "peak", "train", "parallel" (``dlperf.kinds.KINDS``)
Kind = str
Device = Literal["cpu", "gpu"]
#: Numeric precision of a run. fp32: IEEE single precision, TF32 and reduced-precision
#: reductions off; tf32: fp32 storage with TF32 matrix products (NVIDIA Ampere and later);
#: bf16, fp16: the framework's mixed precision (fp16 with loss scaling).
Precision = Literal["fp32", "tf32", "bf16", "fp16"]
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16")
# 'budget': a time-to-target run whose step or time budget ended before the target
FailureReason = Literal["crash", "oom", "timeout", "unsupported", "error", "interrupted", "budget"]

# Fields of RunSpec that make up a configuration's identity. The measurement settings are
# part of it: a quick number (1 s of steps after a short warm-up) and a full one are
# different measurements, and resuming one sweep must never count the other's results.
# The machine is not a RunSpec field: the store keys every row by the machine it ran on.
_IDENTITY = (
    "kind",
    "network",
    "size",
    "framework",
    "variant",
    "device",
    "threads",
    "batch_size",
    "params",
    "seed",
    "precision",
    "measurement",
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Measurement(_Frozen):
    """How long to warm up and how long to time; part of a run's identity."""

    min_time_s: float = Field(2.0, gt=0, allow_inf_nan=False,
                              description="time the timed steps for at least this long")
    min_steps: int = Field(5, ge=1)
    max_steps: int = Field(1000, ge=1)
    warmup_min_steps: int = Field(1, ge=1, description="steps always discarded (cold start)")
    warmup_max_steps: int = Field(50, ge=1)
    warmup_max_time_s: float = Field(30.0, gt=0, allow_inf_nan=False)
    settle_tolerance: float = Field(0.05, gt=0, allow_inf_nan=False,
                                    description="relative change that counts as settled")

    @model_validator(mode="after")
    def _ordered(self) -> Measurement:
        if self.min_steps > self.max_steps:
            raise ValueError(f"min_steps ({self.min_steps}) is above max_steps ({self.max_steps})")
        if self.warmup_min_steps > self.warmup_max_steps:
            raise ValueError(f"warmup_min_steps ({self.warmup_min_steps}) is above "
                             f"warmup_max_steps ({self.warmup_max_steps})")
        return self


class RunSpec(_Frozen):
    """One configuration to measure in one fresh worker process.

    ``repeat`` numbers the independent repetitions of a configuration; each is its own
    process and its own stored result.
    """

    kind: Kind = "step"
    network: str
    size: str = "full"
    framework: str = "torch"
    variant: str = "default"  # resolved to the framework's default variant on creation
    device: Device = "cpu"
    threads: int = Field(1, ge=1)
    batch_size: int = Field(1, ge=1)
    params: dict[str, float | int | str | bool] = Field(default_factory=dict)
    seed: int = 0
    precision: Precision = "fp32"
    repeat: int = Field(0, ge=0)
    measurement: Measurement = Field(default_factory=Measurement)
    #: the environment the framework runs in: '' dlperf's own, else one made by ``dlperf
    #: setup FRAMEWORK==VERSION`` ('torch-2.12.0'; ``dlperf.core.separate_envs``)
    env: str = Field("", pattern=r"^([a-z][a-z0-9_]*-[0-9][0-9a-z.+!-]*)?$")
    #: the memory limit the run was asked to fit in (``--memory-limit``: the worker's
    #: resident memory, a GPU's device memory), None: none asked. A run under a limit
    #: answers another question than the same configuration without one ("does it fit?"),
    #: so it is a configuration of its own: its failure never hides the unlimited
    #: measurement, and a measurement without a limit never stands for it
    memory_limit: int | None = Field(None, gt=0)
    # the kind's own settings (``dlperf.kinds``: e.g. a training target, a strategy); part
    # of the identity
    options: SerializeAsAny[BaseModel] = Field(default_factory=lambda: _options_of("step", {}))

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        # 'default' names the framework's own default (torch eager, tensorflow graph, jax
        # jit), so that a spec and its stored identity never depend on the spelling
        if data.get("variant", "default") in ("default", "", None):
            from dlperf.core import framework_table

            fw = data.get("framework", "torch")
            if fw in framework_table.BACKENDS:
                data = {**data, "variant": framework_table.BACKENDS[fw].default_variant}
        # options as a plain mapping (JSON, a call site): the kind's own model reads them
        kind = data.get("kind", "step")
        options = data.get("options")
        if kind_table.lookup(kind) and (options is None or isinstance(options, dict)):
            data = {**data, "options": _options_of(kind, options or {})}
        return data

    @model_validator(mode="after")
    def _options_of_kind(self) -> RunSpec:
        info = kind_table.lookup(self.kind)
        if info is None:
            raise ValueError(f"unknown kind of run '{self.kind}' "
                             f"(known: {', '.join(kind_table.names())})")
        if not isinstance(self.options, info.options):
            raise ValueError(f"a {self.kind} run takes {info.options.__name__}, "
                             f"got {type(self.options).__name__}")
        if info.check is not None:
            info.check(self)
        return self

    @model_serializer(mode="wrap")
    def _without_default_env(self, handler: Any) -> Any:
        """A run in dlperf's own environment, and one under no memory limit, is written as
        before either field existed, so that a dlperf of that time still reads the store."""
        data = handler(self)
        if isinstance(data, dict):
            if not self.env:
                data.pop("env", None)
            if self.memory_limit is None:
                data.pop("memory_limit", None)
        return data

    def identity(self, *, env: bool = True) -> dict[str, Any]:
        """What makes two specs the same configuration. Options count by what differs from
        their defaults, so a kind that gains an option keeps every stored id; so does the
        environment (``env=False``: left out). Options the kind names ``BESIDE`` (what
        its worker measures besides the configuration, stored as runs of their own) do
        not count."""
        ident = {k: getattr(self, k) for k in _IDENTITY}
        ident["measurement"] = self.measurement.model_dump()
        beside = set(getattr(type(self.options), "BESIDE", ()))
        options = self.options.model_dump(exclude_defaults=True, exclude=beside or None)
        if options:
            ident["options"] = options
        if env and self.env:
            ident["env"] = self.env
        if self.memory_limit is not None:
            ident["memory_limit"] = self.memory_limit
        return ident

    @property
    def config_id(self) -> str:
        """Stable id of the configuration, the same for every repetition."""
        return _digest(self.identity())

    @property
    def setup_free_id(self) -> str:
        """The configuration's id whatever environment its framework ran in: what
        ``dlperf compare`` matches two versions by."""
        return _digest(self.identity(env=False))

    @property
    def run_id(self) -> str:
        """Stable id of one repetition of the configuration."""
        return f"{self.config_id}-r{self.repeat}"

    def label(self) -> str:
        """Short human label: 'fcn5 torch/eager cpu x2 b64' ('... gpu b64 bf16' when the
        precision is not fp32); a kind may say more or otherwise (its ``label`` in the table
        of kinds: a parallel run reads 'fcn5 sync x2 b64 t1', a run on an input pipeline
        '... disk:jpeg w2 p2'). The measurement settings are not in the label: tables show
        them in a column of their own."""
        size = "" if self.size in ("full", "") else f"[{self.size}]"
        dev = f"cpu x{self.threads}" if self.device == "cpu" else self.device
        prec = "" if self.precision == "fp32" else f" {self.precision}"
        env = f" [{self.env}]" if self.env else ""
        limit = f" (limit {nbytes(self.memory_limit)})" if self.memory_limit else ""
        label = (f"{self.network}{size} {self.framework}/{self.variant}{env} {dev} "
                 f"b{self.batch_size}{prec}{limit}")
        info = kind_table.lookup(self.kind)
        return info.label(self, label) if info and info.label else label


def _digest(identity: dict[str, Any]) -> str:
    blob = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def _options_of(kind: str, values: dict[str, Any]) -> BaseModel:
    info = kind_table.lookup(kind)
    if info is None:  # the after-validator names the known kinds
        raise ValueError(f"unknown kind of run '{kind}' (known: {', '.join(kind_table.names())})")
    return info.options.model_validate(values)


#: keys of a schema-2 ``extra`` that were the launcher's diagnostics -> their new name
_LEGACY_DIAGNOSTICS = {"worker_log_tail": "log_tail", "log_tail": "log_tail",
                       "peak_rss_bytes": "peak_rss_bytes", "stacks": "stacks"}


def _split_legacy_extra(extra: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    outcome = {k: v for k, v in extra.items() if k not in _LEGACY_DIAGNOSTICS}
    diagnostics = {_LEGACY_DIAGNOSTICS[k]: v for k, v in extra.items() if k in _LEGACY_DIAGNOSTICS}
    return outcome, diagnostics


def _legacy_outcome_is_whole(kind: str, outcome: dict[str, Any]) -> bool:
    """Whether a schema-2 payload has what the kind's outcome needs (a failed training run
    has no curve: its payload, if any, is kept as diagnostics)."""
    if kind == "train":
        return "curve" in outcome
    if kind == "parallel":
        return "strategy" in outcome and "workers" in outcome
    return True


class Failure(_Frozen):
    reason: FailureReason
    message: str


class Metrics(_Frozen):
    """Summary of the timed steps of one worker process. Times in seconds."""

    steps: int
    median_s: float
    mean_s: float
    std_s: float
    min_s: float
    max_s: float
    mad_s: float
    iqr_s: float
    cv: float
    samples_per_s: float
    flops_per_step: float | None = None
    achieved_flops: float | None = None
    peak_flops: float | None = None
    peak_share: float | None = None
    peak_rss_bytes: int | None = None
    model_rss_bytes: int | None = None
    #: the files' pages resident in the process after its steps (``environment.
    #: file_resident_bytes``; part of ``peak_rss_bytes``): the page cache's state, which
    #: a memory prediction's baseline took as its calibration found it (None: not known)
    file_rss_bytes: int | None = None
    device_peak_bytes: int | None = None
    cpu_util: float | None = None
    #: FLOPs of one step by the network's neutral definition (``flops_per_step`` is what
    #: the framework counted it executing: recomputation included)
    model_flops_per_step: float | None = None
    #: model FLOPs utilisation: the model FLOPs per second over the device's peak at the
    #: run's precision (``utilisation_peak``)
    mfu: float | None = None
    #: hardware FLOPs utilisation: the FLOPs the framework executed per second
    #: (recomputation counted) over the same peak
    hfu: float | None = None
    #: the peak MFU and HFU divide by, in FLOP/s, and what it is (or why it is unknown)
    utilisation_peak_flops: float | None = None
    utilisation_peak: str | None = None
    warmup_steps: int = 0
    warmup_settled: bool = True
    #: the share of its CPUs' time other processes (and the hypervisor's steal) took while
    #: the steps were timed (``core.disturbance``; None: not known)
    other_cpu_share: float | None = None
    #: the machine's speed right after the timed steps (``core.speed_probe``, seconds per
    #: part; None: not a CPU step, or measured by an older dlperf)
    speed_probe: dict[str, float] | None = None
    #: per timed step, the process's minor page faults (pages it touched for the first
    #: time since they were mapped: a new heap or mmap block, an allocator's fresh
    #: region) and the kernel's CPU time, mostly those faults' (``getrusage``; None:
    #: measured by an older dlperf). What the kernels timed alone may not pay: PyTorch's
    #: steps fault their activations in at every step (docs/prediction.md)
    minor_faults_per_step: float | None = None
    system_s_per_step: float | None = None


class RunResult(_Frozen):
    schema_version: int = SCHEMA_VERSION
    spec: RunSpec
    status: Literal["ok", "failed"]
    failure: Failure | None = None
    metrics: Metrics | None = None
    step_times_s: list[float] = Field(default_factory=list)
    warmup_times_s: list[float] = Field(default_factory=list)
    threads_in_force: int | None = None
    # the framework's precision settings as read back after applying spec.precision
    precision_in_force: dict[str, Any] = Field(default_factory=dict)
    cpus: list[int] = Field(default_factory=list)
    param_count: int | None = None
    software: dict[str, Any] = Field(default_factory=dict)
    env_id: str | None = None
    # the machine it ran on (dlperf.core.environment.machine_id); part of the result's identity:
    # the store, resume and reports never mix results of different machines
    machine_id: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    warnings: list[str] = Field(default_factory=list)
    # CPU seconds the launcher spent watching this run (it shares the CPUs with it)
    launcher_cpu_s: float | None = None
    # the kind's own findings (``dlperf.kinds``): a training curve, a strategy's breakdown
    outcome: SerializeAsAny[BaseModel] | None = None
    # what the launcher kept of a failed run (log tail, stacks)
    diagnostics: Diagnostics | None = None

    @model_validator(mode="before")
    @classmethod
    def _typed_payload(cls, data: Any) -> Any:
        """The outcome read by the kind's own model; a result stored before outcomes were
        typed (schema 2) has one untyped ``extra`` mapping, split here into outcome and
        diagnostics (nothing of it is dropped: unknown keys stay on the outcome)."""
        if not isinstance(data, dict):
            return data
        spec = data.get("spec")
        kind = spec.kind if isinstance(spec, RunSpec) else (spec or {}).get("kind", "step")
        info = kind_table.lookup(kind)
        data = dict(data)
        if "extra" in data:
            outcome, diagnostics = _split_legacy_extra(data.pop("extra") or {})
            if outcome and info is not None and info.outcome is not None and \
                    _legacy_outcome_is_whole(kind, outcome):
                data.setdefault("outcome", outcome)
            elif outcome:
                diagnostics = {**(diagnostics or {}), **outcome}
            if diagnostics:
                data.setdefault("diagnostics", diagnostics)
        outcome = data.get("outcome")
        if isinstance(outcome, dict) and info is not None and info.outcome is not None:
            data["outcome"] = info.outcome.model_validate(outcome)
        return data

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def failed(cls, spec: RunSpec, reason: FailureReason, message: str, **kw: Any) -> RunResult:
        return cls(spec=spec, status="failed", failure=Failure(reason=reason, message=message), **kw)
