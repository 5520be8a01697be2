"""Kernel curves measured on one GPU, scaled to a catalogue GPU that dlperf has no
calibration of.

Habitat's premise (Yu et al., 'Habitat: A Runtime-Based Computational Performance
Predictor for Deep Neural Network Training', USENIX ATC 2021, sec. 3): a kernel measured
on one GPU predicts the same kernel on another better than a datasheet roofline does,
because the measurement carries what the roofline leaves out (the library's efficiency at
that shape, its fixed costs). Habitat's 'wave scaling' takes a memory-bound kernel's time
by the ratio of the memory bandwidths and a compute-bound one's by the ratios of SM
counts and clocks (its code, ``habitat/analysis/wave_scaling/roofline.py``), and learns
convolutions and products with MLPs. The catalogue holds no SM counts or clocks, and a
tensor core's or FP32 unit's work per SM per cycle changed between generations, so here
a compute-bound curve scales by the ratio of the datasheets' peak FLOP/s at the
precision (SM count x clock x work per SM per cycle). The scaling acts on the fitted
curves (``perfmodel.fit``):

- products and convolutions: the asymptotic rate by the ratio of peak FLOP/s at the
  precision, the operands' traffic term by the ratio of bandwidths; the shape
  saturations and the residuals (the library's efficiency shape by shape) stay as
  measured;
- every memory curve (passes, update, loss, batch normalisation): by the ratio of
  bandwidths;
- the fixed costs (a kernel's minimum time, the host's launches and step call) stay.

What it leaves out: wave quantisation (a kernel's last, partial wave of thread blocks on
a GPU of another SM count) and the libraries' change of algorithm between GPUs; a shape
keeps the measured GPU's efficiency. The reference curves ship in
``data/reference_fits.json``: ``dlperf calibrate --device gpu --frameworks torch
--precision P`` on one GPU at each precision, written by ``python -m
dlperf.calibrate.reference`` (the file's ``source`` names the GPU, software and date). A
user with a GPU of their own writes its file the same way and points
``$DLPERF_REFERENCE_FITS`` at it: the catalogue's GPUs are then scaled from theirs.
"""

from __future__ import annotations

import functools
import os
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dlperf.errors import UsageError
from dlperf.perfmodel import catalogue
from dlperf.perfmodel.catalogue import Device
from dlperf.perfmodel.fit import ConvCurve, GemmCurve, LocalFit, MemoryCurve

REFERENCE_FILE = "reference_fits.json"
#: how the note of a prediction from scaled curves begins
NOTE = "kernels: the "


class ReferenceFits(BaseModel):
    """One GPU's fitted PyTorch kernel curves per precision, and where they come from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    device: str  # its catalogue entry (the peaks the ratios divide by)
    source: str = Field(min_length=1)
    fits: tuple[LocalFit, ...]

    def at(self, precision: str) -> LocalFit | None:
        return next((f for f in self.fits if f.precision == precision), None)


def reference() -> ReferenceFits | None:
    """The reference curves: ``$DLPERF_REFERENCE_FITS`` where set (a missing or broken
    file is one UsageError line), else the shipped ones (None when the package has none)."""
    env = os.environ.get("DLPERF_REFERENCE_FITS")
    if env:
        return _read(str(Path(env).expanduser()))
    path = resources.files("dlperf.perfmodel").joinpath("data", REFERENCE_FILE)
    return _read(str(path)) if path.is_file() else None


@functools.cache
def _read(path: str) -> ReferenceFits:
    try:
        ref = ReferenceFits.model_validate_json(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"DLPERF_REFERENCE_FITS={path}: cannot read: {e.strerror}") from None
    except ValidationError as e:
        raise UsageError(f"{path}: not a reference file of 'python -m "
                         f"dlperf.calibrate.reference': {e.errors()[0]['msg']}") from None
    catalogue.device(ref.device)  # its GPU must be in the catalogue: the ratios divide by it
    return ref


def _gemm(c: GemmCurve, flops: float, bandwidth: float, peak: float | None) -> GemmCurve:
    return c.model_copy(update={"rate": c.rate * flops, "bandwidth": c.bandwidth * bandwidth,
                                "peak": peak})


def _conv(c: ConvCurve, flops: float, bandwidth: float, peak: float | None) -> ConvCurve:
    memory = None if c.memory is None else _memory(c.memory, bandwidth)  # its traffic's
    return c.model_copy(update={"rate": c.rate * flops, "peak": peak, "memory": memory})


def _memory(c: MemoryCurve, bandwidth: float) -> MemoryCurve:
    return c.model_copy(update={"seconds": tuple(s / bandwidth for s in c.seconds)})


def scale(fit: LocalFit, flops: float, bandwidth: float,
          peak: float | None = None) -> LocalFit:
    """``fit`` on a GPU with ``flops`` times the peak rate and ``bandwidth`` times the
    memory bandwidth (module docstring), no product or convolution faster than ``peak``
    FLOP/s (the curves' saturation, fitted on the shapes timed, can pass the datasheet's
    peak on a network's far larger layers)."""
    def opt(c: MemoryCurve | None) -> MemoryCurve | None:
        return None if c is None else _memory(c, bandwidth)

    def opt_gemm(c: GemmCurve | None) -> GemmCurve | None:
        return None if c is None else _gemm(c, flops, bandwidth, peak)

    return fit.model_copy(update={
        "gemm": _gemm(fit.gemm, flops, bandwidth, peak), "gemm_tn": opt_gemm(fit.gemm_tn),
        "gemm_tn_seq": opt_gemm(fit.gemm_tn_seq), "conv": _conv(fit.conv, flops, bandwidth, peak),
        # the backward's curve times both gradients, twice the forward's FLOPs per call
        "conv_bwd": _conv(fit.conv_bwd, flops, bandwidth, peak and peak / 2),
        "memory": _memory(fit.memory, bandwidth),
        "update": opt(fit.update), "xent": opt(fit.xent), "bn": opt(fit.bn),
        "bn_channels": {k: _memory(v, bandwidth) for k, v in fit.bn_channels.items()},
        "allreduce": {},
    })


def scaled_fit(target: Device, precision: str,
               ref: ReferenceFits | None = None) -> tuple[LocalFit, str] | None:
    """The reference GPU's curves at ``precision`` scaled to ``target``, and a line saying
    so; None for a CPU, or where no reference curve runs the way ``target`` would (TF32
    on a GPU without it runs as fp32, so it takes the fp32 curves)."""
    ref = ref or reference()
    if ref is None or target.kind != "gpu":
        return None
    runs_as = "fp32" if precision == "tf32" and target.tf32_tflops is None else precision
    fit = ref.at(runs_as)
    if fit is None:
        return None
    source = catalogue.device(ref.device)
    flops = target.peak_flops(runs_as) / source.peak_flops(runs_as)
    bandwidth = target.memory_gbps / source.memory_gbps
    note = (f"{NOTE}{ref.device}'s calibrated {runs_as} curves, scaled by peak "
            f"FLOP/s x{flops:.3g} and bandwidth x{bandwidth:.3g}")
    origin = f"the {ref.device}'s curves scaled to the {target.name}'s peaks ({ref.source})"
    scaled = scale(fit, flops, bandwidth, target.peak_flops(runs_as))
    return scaled.model_copy(update={"origin": origin}), note
