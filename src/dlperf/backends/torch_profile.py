"""PyTorch's own profiler over a few training steps (``dlperf explain``): every op's self
time (its children excluded, so that nothing is counted twice), call count and FLOPs,
grouped by op and operand shapes (``key_averages(group_by_input_shape=True)``), per step,
with each operand's element size as the op's first call recorded it (the averages keep no
dtypes; under mixed precision an op's operands can be half or fp32). On a GPU the device's
kernel time is the op's time."""

from __future__ import annotations

from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity
from torch.profiler import profile as torch_profile

from dlperf.backends.base import Trainer
from dlperf.backends.trace_times import mean_step_s


def _device_time(e: object) -> float:
    # the attribute's name changed across releases (cuda -> device)
    for name in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(e, name):
            return float(getattr(e, name))
    return 0.0


def _shapes(operands: list) -> tuple[tuple[int, ...], ...]:
    """Each operand's shape, in order: () for a scalar, and a list of tensors (the
    optimizer's fused ``_foreach_*`` ops) spread out into its tensors' shapes, so that the
    bytes such an op moves are counted."""
    out: list[tuple[int, ...]] = []
    for s in operands:
        if isinstance(s, list | tuple) and all(isinstance(d, int) for d in s):
            out.append(tuple(s))
        elif isinstance(s, list | tuple) and s and all(isinstance(t, list | tuple) for t in s):
            out.extend(tuple(int(d) for d in t) for t in s)
        else:
            out.append(())
    return tuple(out)


#: bytes of an element of the dtypes the profiler names (others, scalars: 0)
DTYPE_BYTES = {"double": 8, "float": 4, "int": 4, "long int": 8, "c10::Half": 2,
               "c10::BFloat16": 2, "bool": 1, "unsigned char": 1, "signed char": 1}


def _element_bytes(prof: torch_profile) -> dict[tuple, tuple[int, ...]]:
    """(op, operand shapes) -> each operand's element bytes, from the op's first call.
    Read from the profiler's kineto events, which have carried each operand's dtype for
    many releases (the averaged events keep none, and the raw ``FunctionEvent``'s
    ``input_dtypes`` is recent: an H100's PyTorch 2.11 gave none); none where this
    build's profiler has no such record."""
    try:
        events = prof.profiler.kineto_results.events()
    except AttributeError:
        return {}
    out: dict[tuple, tuple[int, ...]] = {}
    for e in events:
        key = (e.name(), _shapes(list(e.shapes() or [])))
        if key not in out and (dtypes := e.dtypes()):
            out[key] = tuple(DTYPE_BYTES.get(d, 0) for d in dtypes)
    return out


def kept(name: str, us: float, flops: float | None) -> bool:
    """Whether an averaged event becomes an op of the profile: one that took time, and
    one that took none but carries the FLOPs the profiler counts on it alone
    (``aten::conv2d``, a wrapper that launches no kernel of its own on a GPU: the library
    convolution it ends in takes its rows from that count, ``perfmodel.ops.op_times``)."""
    return not name.startswith("ProfilerStep") and (us > 0 or bool(flops))


def profile(trainer: Trainer, steps: int, device: str) -> tuple[list[dict], float]:
    gpu = device == "gpu"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with torch_profile(activities=activities, record_shapes=True, with_flops=True) as prof:
        wall = mean_step_s(trainer, steps)
    elems = _element_bytes(prof)
    ops = []
    for e in prof.key_averages(group_by_input_shape=True):
        # on a GPU, the ops (CPU-side events) with the device time of the kernels each one
        # launched itself; the kernels' own events would count that time twice
        if gpu and getattr(e, "device_type", DeviceType.CPU) != DeviceType.CPU:
            continue
        us = _device_time(e) if gpu else float(e.self_cpu_time_total)
        if not kept(e.key, us, e.flops):
            continue
        shapes = _shapes(list(e.input_shapes or []))
        ops.append({"name": e.key, "shapes": shapes, "calls": e.count / steps,
                    "time_s": us * 1e-6 / steps, "flops": (e.flops / steps) if e.flops else None,
                    "element_bytes": elems.get((e.key, shapes))})
    return ops, wall
