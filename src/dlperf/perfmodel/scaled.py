"""Kernel curves measured on one GPU, scaled to a catalogue GPU that dlperf has no
calibration of.

Habitat's premise (Yu et al., 'Habitat: A Runtime-Based Computational Performance
Predictor for Deep Neural Network Training', USENIX ATC 2021, sec. 3): a kernel measured
on one GPU predicts the same kernel on another better than a datasheet roofline does,
because the measurement carries what the roofline leaves out (the library's efficiency at
that shape, its fixed costs). Habitat's 'wave scaling' takes a memory-bound kernel's time
by the ratio of the memory bandwidths and a compute-bound one's by the ratios of SM
counts and clocks (its code, ``habitat/analysis/wave_scaling/roofline.py``), and learns
convolutions and products with MLPs. The scaling acts on the fitted curves
(``perfmodel.fit``):

- products and convolutions at fp32, on the FP32 units: the asymptotic rate by the ratio
  of SMs x clock (``Device.sm_rate``), as Habitat scales them. The datasheets' fp32 peaks
  count every FP32 unit, and an SM of Hopper's or Ada's has twice Volta's or the A100's
  (128 against 64) but issues no more instructions per cycle, so that a product's loads
  and address arithmetic take issue slots the peak counts as FLOPs: the H200's fp32
  convolutions reach a quarter of its peak, a V100's ResNet-50 trains at 29% of its own
  whole. Without the SM figures, by the ratio of fp32 peaks;
- products and convolutions on tensor cores (tf32, fp16, bf16): by the ratio of the
  datasheets' peaks at the precision, since a tensor core's work per SM per cycle
  doubled from one generation to the next (Volta, Ampere, Hopper), which SM counts and
  clocks do not show;
- the operands' traffic term, and every memory curve (passes, update, loss, batch
  normalisation) held by the memory, by the ratio of bandwidths; a memory kernel that
  ran slower on the reference than its DRAM allowed (the plain memory pass's largest
  working set sets that rate) was held by its SMs (the requests they keep in flight:
  Little's law, as in Volkov, 'Understanding Latency Hiding on GPUs', 2016; its
  reductions' instructions), so its time beyond the DRAM's scales by SMs x clock, the
  DRAM's part by the bandwidths. The H200's PyTorch batch norm moved 80 to 2,200 GB/s of
  its 4,800, its plain memory pass 4,070;
- the fixed costs (a kernel's minimum time, the host's launches and step call) stay.

What it leaves out: wave quantisation (a kernel's last, partial wave of thread blocks on
a GPU of another SM count) and the libraries' change of algorithm between GPUs; a shape
keeps the measured GPU's efficiency. The reference curves ship in
``data/reference_fits.json``: ``dlperf calibrate --device gpu --frameworks torch
--precision P`` on one GPU at each precision, written by ``python -m
dlperf.kinds.calibrate.shipped_fits`` (the file's ``source`` names the GPU, software and date). A
user with a GPU of their own writes its file the same way and points
``$DLPERF_REFERENCE_FITS`` at it: the catalogue's GPUs are then scaled from theirs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dlperf.core.errors import UsageError
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

    def at(self, precision: str, framework: str = "torch") -> LocalFit | None:
        return next((f for f in self.fits if f.precision == precision
                     and f.framework == framework), None)

    @property
    def frameworks(self) -> list[str]:
        return list(dict.fromkeys(f.framework for f in self.fits))


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
                         f"dlperf.kinds.calibrate.shipped_fits': {e.errors()[0]['msg']}") from None
    catalogue.device(ref.device)  # its GPU must be in the catalogue: the ratios divide by it
    return ref


def _gemm(c: GemmCurve, flops: float, bandwidth: float, peak: float | None) -> GemmCurve:
    return c.model_copy(update={"rate": c.rate * flops, "bandwidth": c.bandwidth * bandwidth,
                                "peak": peak})


def _conv(c: ConvCurve, flops: float, memory: Callable[[MemoryCurve], MemoryCurve],
          peak: float | None) -> ConvCurve:
    traffic = None if c.memory is None else memory(c.memory)  # its layout copies'
    return c.model_copy(update={"rate": c.rate * flops, "peak": peak, "memory": traffic})


def held_time(seconds: float, nbytes: float, dram: float, bandwidth: float,
              sm: float | None) -> float:
    """A memory kernel's time on the target: the part the reference's DRAM held (its
    bytes at ``dram`` B/s, the most the reference's memory pass reached) over the
    bandwidth ratio, and what it took beyond that, where the reference ran slower than
    its DRAM allowed, over the ``sm`` ratio (SMs x clock) (module docstring). Only that
    excess shows the SMs holding it: a kernel at the DRAM's rate scales with the
    bandwidth alone. Without ``sm``, the whole time over the bandwidth ratio."""
    if sm is None:
        return seconds / bandwidth
    dram_s = min(seconds, nbytes / dram)
    return dram_s / bandwidth + (seconds - dram_s) / sm


def _memory(c: MemoryCurve, bandwidth: float, sm: float | None, dram: float) -> MemoryCurve:
    return c.model_copy(update={"seconds": tuple(
        held_time(s, n, dram, bandwidth, sm) for s, n in zip(c.seconds, c.nbytes, strict=True))})


def scale(fit: LocalFit, flops: float, bandwidth: float,
          peak: float | None = None, sm: float | None = None) -> LocalFit:
    """``fit`` on a GPU whose products and convolutions run ``flops`` times as fast, with
    ``bandwidth`` times the memory bandwidth and ``sm`` times the SMs x clock (None:
    unknown, memory curves by bandwidth alone) (module docstring), no product or
    convolution faster than ``peak`` FLOP/s (the curves' saturation, fitted on the shapes
    timed, can pass the datasheet's peak on a network's far larger layers)."""
    dram = fit.memory.dram_bytes_per_s  # the reference's DRAM, as its plain pass gets it

    def mem(c: MemoryCurve) -> MemoryCurve:
        return _memory(c, bandwidth, sm, dram)

    def opt(c: MemoryCurve | None) -> MemoryCurve | None:
        return None if c is None else mem(c)

    def opt_gemm(c: GemmCurve | None) -> GemmCurve | None:
        return None if c is None else _gemm(c, flops, bandwidth, peak)

    return fit.model_copy(update={
        "gemm": _gemm(fit.gemm, flops, bandwidth, peak), "gemm_tn": opt_gemm(fit.gemm_tn),
        "gemm_nt": opt_gemm(fit.gemm_nt), "gemm_tn_seq": opt_gemm(fit.gemm_tn_seq),
        "conv": _conv(fit.conv, flops, mem, peak),
        # the backward's curve times both gradients, twice the forward's FLOPs per call
        "conv_bwd": _conv(fit.conv_bwd, flops, mem, peak and peak / 2),
        "memory": mem(fit.memory),
        "update": opt(fit.update), "xent": opt(fit.xent), "bn": opt(fit.bn),
        "bn_channels": {k: mem(v) for k, v in fit.bn_channels.items()},
        "allreduce": {},
    })


def scaled_fit(target: Device, precision: str, ref: ReferenceFits | None = None,
               framework: str = "torch") -> tuple[LocalFit, str] | None:
    """The reference GPU's curves of ``framework`` at ``precision`` scaled to ``target``
    (PyTorch's where the reference has none of that framework), and a line saying whose;
    None for a CPU, or where no reference curve runs the way ``target`` would (TF32 on a
    GPU without it runs as fp32, so it takes the fp32 curves)."""
    ref = ref or reference()
    if ref is None or target.kind != "gpu":
        return None
    runs_as = "fp32" if precision == "tf32" and target.tf32_tflops is None else precision
    fit = ref.at(runs_as, framework)
    instead = ""
    if fit is None and framework != "torch":
        fit = ref.at(runs_as, "torch")
        instead = (f" (the reference has no {framework} curves at {runs_as}, so PyTorch's "
                   f"stand in: dlperf calibrate --device gpu --frameworks {framework} on a "
                   "GPU, then python -m dlperf.kinds.calibrate.shipped_fits, adds them)")
    if fit is None:
        return None
    source = catalogue.device(ref.device)
    bandwidth = target.memory_gbps / source.memory_gbps
    rates = (target.sm_rate(), source.sm_rate())
    sm = rates[0] / rates[1] if rates[0] is not None and rates[1] is not None else None
    if runs_as == "fp32" and sm is not None:  # the FP32 units: by SMs x clock (Habitat)
        flops, by = sm, "SMs x clock"
    else:
        flops, by = target.peak_flops(runs_as) / source.peak_flops(runs_as), "peak FLOP/s"
    held = f", memory held by the SMs x{sm:.3g}" if sm is not None else ""
    note = (f"{NOTE}{ref.device}'s calibrated {fit.framework} {runs_as} curves, products "
            f"scaled by {by} x{flops:.3g}, bandwidth x{bandwidth:.3g}{held}{instead}")
    origin = f"the {ref.device}'s curves scaled to the {target.name}'s figures ({ref.source})"
    scaled = scale(fit, flops, bandwidth, target.peak_flops(runs_as), sm)
    return scaled.model_copy(update={"origin": origin}), note
