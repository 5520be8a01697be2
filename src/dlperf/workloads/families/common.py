"""What the families share: the data sets' shapes, the checks of a config's fields, and the
dense-stack and generator-step helpers."""

from __future__ import annotations

import math

from dlperf.workloads.base import Layer, dense

#: The shape of one example of each data set, as ``dlperf.workloads.real_data`` delivers it.
DATA_SHAPES: dict[str, tuple[int, ...]] = {
    "digits": (1, 8, 8),
    "digits-seq": (8, 8),
    "mnist1d": (40, 1),
    "cancer": (30,),
    "trees": (),
}
CLASSES = 10
ACTIVATIONS = ("relu", "sigmoid", "tanh")


def check_fields(cfg, *, datasets: tuple[str, ...], positive: tuple[str, ...]) -> None:
    """Raise ValueError (a UsageError at resolve time) for a field out of range."""
    if cfg.dataset not in datasets:
        raise ValueError(f"dataset must be one of {', '.join(datasets)}, got '{cfg.dataset}'")
    for name in positive:
        v = getattr(cfg, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    act = getattr(cfg, "activation", "relu")
    if act not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got '{act}'")
    init_scale_value(cfg.init_scale)


def init_scale_value(v: float | int | str | None) -> float | None:
    """None for the framework default ("default"), else the standard deviation s > 0."""
    if v is None or v == "default":
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0 or math.isinf(v):
        raise ValueError(f"init_scale must be 'default' or a positive number, got {v!r}")
    return float(v)


def parse_widths(text: str) -> tuple[int, ...]:
    """'256-128-64' -> (256, 128, 64): hidden-layer widths, each a positive integer."""
    try:
        widths = tuple(int(w) for w in str(text).split("-"))
    except ValueError:
        raise ValueError(f"widths must look like 256-128-64, got {text!r}") from None
    if not widths or any(w < 1 for w in widths):
        raise ValueError(f"widths must be positive integers, got {text!r}")
    return widths


def flat_size(dataset: str) -> int:
    return math.prod(DATA_SHAPES[dataset])


def dense_stack(name: str, widths: tuple[int, ...], *, first: bool, act: str) -> list[Layer]:
    """Dense layers through ``widths`` with an activation after each."""
    out: list[Layer] = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        out.append(dense(f"{name}{i + 1}", a, b, first=first and i == 0))
        out.append(Layer(f"{name}_{act}{i + 1}", "act", out_elems=b))
    return out


def generator_step(layer: Layer) -> Layer:
    """The extra pass of a layer that the generator's update goes through (GAN): one more
    forward and one input gradient, no weight gradient (the layer is held fixed)."""
    return Layer(f"{layer.name}_gstep", layer.op, fwd_flops=layer.fwd_flops, input_grad=True,
                 gemms=layer.gemms)
