"""Kind "profile": one network's training steps under the framework's own profiler
(``dlperf explain``), after the same warm-up as a timed step. What comes back is the time
of each op, grouped by op and operand shapes, per step: the material the performance
model's per-op times are set beside."""

from __future__ import annotations

from pydantic import Field

from dlperf.core.payload import Frozen, Payload


class ProfileOptions(Frozen):
    """How many steps run under the profiler (after the warm-up)."""

    steps: int = Field(5, ge=1)


class ProfiledOp(Payload):
    """One op at one set of operand shapes, per step: the profiler's own figures."""

    name: str  # 'aten::mm'
    shapes: tuple[tuple[int, ...], ...] = ()  # each tensor operand's shape (() for others)
    calls: float  # calls per step
    time_s: float  # the op's own time per step (children excluded): CPU, or the device's
    flops: float | None = None  # per step, the profiler's count where it has one
    #: bytes of an element of each operand, where the profiler records dtypes (PyTorch);
    #: None: unknown (fp32 taken)
    element_bytes: tuple[int, ...] | None = None


class ProfileOutcome(Payload):
    """Every op group of the profiled steps, and the steps' wall time."""

    profiler: str  # 'torch.profiler'
    steps: int
    step_s: float  # mean wall time of a profiled step (the profiler's own cost included)
    ops: tuple[ProfiledOp, ...] = ()
