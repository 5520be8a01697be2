"""Efficiency factors: the share of a datasheet rate that real kernels reach.

The defaults are public measurements of other machines, cited below, never a fit to the
time of the network being predicted. This machine's own measured kernels (``dlperf
calibrate``: GEMM, convolution and bandwidth curves through the normal worker) replace
them for its devices through ``Efficiencies.kernels`` (``dlperf.perfmodel.local``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from dlperf.perfmodel.catalogue import Device
from dlperf.perfmodel.fit import LocalFit


class Efficiency(BaseModel):
    """What one device reaches: a share of its peak FLOP/s in matmuls and convolutions, a
    share of its memory bandwidth, and a fixed cost per kernel launch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    matmul: float = Field(gt=0, le=1)
    memory: float = Field(gt=0, le=1)
    overhead_s: float = Field(ge=0)
    source: str = Field(min_length=1)


GPU = Efficiency(
    matmul=0.8,
    memory=0.8,
    overhead_s=6e-6,
    source=(
        "matmul 0.8: HPL, made of large matrix multiplies, reached 63.5 of 79.2 PFLOP/s "
        "(80%) on Selene, DGX A100 (TOP500 list of November 2020, https://www.top500.org/lists/top500/2020/11/); "
        "memory 0.8: a V100 streams about 750 of its 900 GB/s in the microbenchmarks of "
        "Jia et al. (2018), 'Dissecting the NVIDIA Volta GPU architecture via "
        "microbenchmarking', arXiv:1804.06826; overhead 6 us: eight kernels of a small MLP "
        "take about 50 us launched one by one (CUDA.jl documentation, 'Graphs', "
        "https://cuda.juliagpu.org/dev/usage/graphs/)"
    ),
)

CPU = Efficiency(
    matmul=0.6,
    memory=0.8,
    overhead_s=6e-6,
    source=(
        "matmul 0.6: HPL reached 23.5 of 38.7 PFLOP/s (61%) on Frontera, Xeon Platinum "
        "8280 (TOP500 list of June 2019, https://www.top500.org/lists/top500/2019/06/): the peak counts "
        "the base clock, AVX-512 code runs below it; memory 0.8: tuned STREAM Triad "
        "reached 250 of 307 GB/s on two EPYC 7601 and 199 of 256 GB/s on two Xeon "
        "Platinum 8176 (AnandTech, 'Intel Skylake-EP vs AMD EPYC 7000', 2017, "
        "https://www.anandtech.com/show/11544/); overhead 6 us: the GPU figure, for want of "
        "a public per-operator figure on CPUs"
    ),
)


class Efficiencies(BaseModel):
    """Efficiency per kind of device, per named device where measured, and per link."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: Efficiency = GPU
    cpu: Efficiency = CPU
    devices: dict[str, Efficiency] = Field(default_factory=dict)
    #: fitted kernel curves per device name (this machine, ``dlperf calibrate``): a device
    #: here is timed from its curves, not from a roofline with efficiency factors
    kernels: dict[str, LocalFit] = Field(default_factory=dict)
    #: a catalogue GPU without curves here takes the shipped reference GPU's, scaled to
    #: its peaks (``perfmodel.scaled``); False: the roofline with the efficiency factors
    scaled: bool = True
    link: float = Field(default=0.8, gt=0, le=1)
    link_source: str = (
        "0.8: NCCL moves about 230 of NVLink 3's 300 GB/s per direction on A100 and 370 of "
        "NVLink 4's 450 GB/s on H100, per its maintainer "
        "(https://github.com/NVIDIA/nccl-tests/issues/149, "
        "https://github.com/NVIDIA/nccl-tests/issues/212)"
    )

    def fitted(self, device: Device) -> LocalFit | None:
        return self.kernels.get(device.name)

    def for_device(self, device: Device) -> Efficiency:
        return self.devices.get(device.name) or (self.gpu if device.kind == "gpu" else self.cpu)
