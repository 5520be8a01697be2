"""Model and hardware FLOPs utilisation of a measured step (MFU and HFU, as Chowdhery et
al., "PaLM", 2022, appendix B, and Korthikanti et al., "Reducing Activation Recomputation
in Large Transformer Models", 2022, define them):

    MFU = model FLOPs per step / step time / the device's peak at the run's precision
    HFU = FLOPs executed per step (recomputation counted) / step time / the same peak

The model FLOPs are the network's neutral definition's (``dlperf.workloads``: forward,
weight and input gradients); the executed ones the framework's own counter. The peak is
the datasheet's for a GPU of the catalogue and this CPU's theoretical fp32 peak for a CPU
(``dlperf.core.cpu_peak``); where dlperf does not know it, MFU is unknown and says why.
"""

from __future__ import annotations

from typing import Any

from dlperf import workloads
from dlperf.core import environment
from dlperf.core.errors import UsageError
from dlperf.core.spec import RunSpec
from dlperf.perfmodel import catalogue


def model_flops(spec: RunSpec) -> float | None:
    """FLOPs of one training step by the neutral definition: batch x each layer's forward,
    weight-gradient and input-gradient products."""
    _, _, cfg = workloads.resolve(spec.network, spec.size, spec.params)
    return float(spec.batch_size * sum(layer.train_flops() for layer in cfg.layers())) or None


def device_peak(spec: RunSpec, software: dict[str, Any]) -> tuple[float | None, str]:
    """The peak FLOP/s MFU divides by, and what it is (or why it is unknown)."""
    if spec.device == "cpu":
        if spec.precision != "fp32":
            return None, (f"unknown: dlperf knows a CPU's fp32 peak, not its {spec.precision} "
                          "one")
        t = environment.theoretical_peak(spec.threads)
        if t.flops is None:
            return None, f"unknown: this CPU's theoretical peak is {t.describe()}"
        return t.flops, f"this CPU's theoretical fp32 peak, {t.describe()}"
    reported = software.get("gpu")
    entry = catalogue.gpu_entry(reported)
    if entry is None:
        return None, f"unknown: GPU '{reported}' is not in dlperf's catalogue"
    dev = catalogue.device(entry)
    precision = spec.precision if spec.precision in catalogue.PRECISIONS else "fp32"
    try:
        flops = dev.peak_flops(precision)
    except UsageError as e:  # a precision the datasheet gives no figure for
        return None, f"unknown: {e}"
    return flops, (f"the {dev.description} datasheet's {precision} peak, "
                   f"{flops / 1e12:.4g} TFLOP/s ({entry})")


def utilisation(model: float | None, executed: float | None, step_s: float,
                peak: float | None) -> tuple[float | None, float | None]:
    """(MFU, HFU) of a step of ``step_s`` seconds; None where a figure is missing."""
    if not peak or step_s <= 0:
        return None, None
    return (model / step_s / peak if model else None,
            executed / step_s / peak if executed else None)
