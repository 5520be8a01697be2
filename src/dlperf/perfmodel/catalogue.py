"""The catalogue of devices, links and storage: data files, validated on load.

The shipped files live in ``perfmodel/data/`` (every figure with its source). A user adds
or replaces devices in one TOML file, ``$DLPERF_DEVICES``, else
``$XDG_CONFIG_HOME/dlperf/devices.toml`` (``~/.config/dlperf/devices.toml``): an entry
there replaces the shipped entry of the same name whole. A bad entry is one
``UsageError`` line naming the file, the entry and the field.
"""

from __future__ import annotations

import functools
import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dlperf.core.errors import UsageError

#: Precisions the model knows, with the bytes of one element.
PRECISIONS: dict[str, int] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}


class _Entry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str
    source: str = Field(min_length=1)  # where every figure of the entry comes from


class Device(_Entry):
    """A processing unit: peak rates from its datasheet (or, later, from calibration)."""

    kind: Literal["gpu", "cpu"]
    fp32_tflops: float = Field(gt=0)
    tf32_tflops: float | None = Field(default=None, gt=0)
    fp16_tflops: float | None = Field(default=None, gt=0)
    bf16_tflops: float | None = Field(default=None, gt=0)
    memory_gbps: float = Field(gt=0)
    memory_gb: float = Field(gt=0)
    host_link: str | None = None  # to the host (PCIe), a links.toml name
    peer_link: str | None = None  # between devices of one node (NVLink), a links.toml name
    #: a GPU's streaming multiprocessors and FP32 units (CUDA cores), from its whitepaper:
    #: what scales a kernel from one GPU to another where the peaks do not (``sm_rate``)
    sms: int | None = Field(default=None, gt=0)
    fp32_cores: int | None = Field(default=None, gt=0)
    #: a CPU's physical cores (all of its sockets): what ``on_threads`` scales by
    cores: int | None = Field(default=None, gt=0)
    #: a GPU's host: the CPU cores per GPU of the system the catalogue names in its
    #: source (a DGX: its cores over its GPUs), which run its input pipeline
    host_cores: int | None = Field(default=None, gt=0)

    def peak_flops(self, precision: str) -> float:
        """Peak FLOP/s at a precision. TF32 where the device has none runs as fp32 (the
        frameworks' TF32 switch has no effect there); fp16/bf16 without a figure are
        refused rather than guessed."""
        if precision not in PRECISIONS:
            raise UsageError(f"unknown precision '{precision}' (known: {', '.join(PRECISIONS)})")
        tflops = getattr(self, f"{precision}_tflops")
        if tflops is None and precision == "tf32":
            tflops = self.fp32_tflops
        if tflops is None:
            raise UsageError(
                f"device '{self.name}' has no {precision} rate in the catalogue "
                f"(it has no fast {precision} path); use fp32 or add the figure in your catalogue"
            )
        return tflops * 1e12

    def sm_rate(self) -> float | None:
        """SMs x clock (SM cycles per second), the clock being the one the fp32 peak is
        quoted at (peak = FP32 cores x 2 FLOP x clock): the rate at which a GPU issues
        work. Habitat (Yu et al., USENIX ATC 2021, sec. 3.2, 'wave scaling') scales a
        compute-bound kernel between GPUs by it; None without the figures."""
        if self.sms is None or self.fp32_cores is None:
            return None
        return self.sms * self.fp32_tflops * 1e12 / (2 * self.fp32_cores)


class Link(_Entry):
    kind: Literal["pcie", "nvlink", "ethernet", "infiniband", "other"]
    gbps: float = Field(gt=0)  # GB/s in one direction
    latency_us: float = Field(ge=0)
    #: the rate is what a transfer on it achieved here (``dlperf calibrate``'s all-reduce
    #: on loopback), not a line rate: no efficiency factor applies to it
    measured: bool = False

    @property
    def bytes_per_s(self) -> float:
        return self.gbps * 1e9

    def rate(self, efficiency: float) -> float:
        """Bytes per second a collective moves on it: the line rate times ``efficiency``
        (``Efficiencies.link``), or the measured rate as it is."""
        return self.bytes_per_s if self.measured else self.bytes_per_s * efficiency

    @property
    def latency_s(self) -> float:
        return self.latency_us * 1e-6


class Storage(_Entry):
    read_gbps: float = Field(gt=0)
    #: small random reads per second at queue depth 1 (None: the data sheet gives none)
    random_read_iops: float | None = Field(default=None, gt=0)
    #: whether it serves several reads at once (an SSD's channels), or one after another
    #: (a hard disk's one actuator)
    concurrent_reads: bool = True


def _read(text: str, origin: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{origin}: not valid TOML: {e}") from None


def _parse(raw: dict, model: type[_Entry], origin: str) -> dict[str, _Entry]:
    out = {}
    for name, fields in raw.items():
        if not isinstance(fields, dict):
            raise UsageError(f"{origin}: '{name}' must be a table ([{name}]) of fields")
        try:
            out[name] = model(name=name, **fields)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "entry"
            raise UsageError(f"{origin}: entry '{name}': {where}: {err['msg']}") from None
        except TypeError as e:  # e.g. a field named 'name' given twice
            raise UsageError(f"{origin}: entry '{name}': {e}") from None
    return out


def _shipped(filename: str, model: type[_Entry]) -> dict:
    """The entries of a shipped file, a new dict each call (the caller may merge into it)."""
    return dict(_shipped_once(filename, model))


@functools.cache
def _shipped_once(filename: str, model: type[_Entry]) -> dict:
    # read and validated once per process: advice on a catalogue GPU looks devices up a
    # thousand times (every prediction), each read costing milliseconds; the entries are
    # frozen, and the user's file is still read at every call
    text = resources.files("dlperf.perfmodel").joinpath("data", filename).read_text()
    return _parse(_read(text, filename), model, filename)


def user_catalogue_path() -> Path | None:
    """The user's device file: $DLPERF_DEVICES (must exist), else the XDG config one
    (used only when present)."""
    env = os.environ.get("DLPERF_DEVICES")
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise UsageError(f"DLPERF_DEVICES={env}: no such file")
        return path
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    path = base / "dlperf" / "devices.toml"
    return path if path.is_file() else None


def links() -> dict[str, Link]:
    return _shipped("links.toml", Link)


def storage() -> dict[str, Storage]:
    return _shipped("storage.toml", Storage)


def devices() -> dict[str, Device]:
    """The shipped devices with the user's file merged over them; every link a device
    names must exist."""
    out = _shipped("devices.toml", Device)
    path = user_catalogue_path()
    if path is not None:
        try:
            text = path.read_text()
        except OSError as e:
            raise UsageError(f"{path}: cannot read: {e.strerror}") from None
        out.update(_parse(_read(text, str(path)), Device, str(path)))
    known = links()
    for d in out.values():
        for link in (d.host_link, d.peer_link):
            if link is not None and link not in known:
                raise UsageError(
                    f"device '{d.name}': unknown link '{link}' (known: {', '.join(known)})"
                )
    return out


def _get(kind: str, table: dict, name: str):
    try:
        return table[name]
    except KeyError:
        raise UsageError(f"unknown {kind} '{name}' (known: {', '.join(table)})") from None


def device(name: str) -> Device:
    return _get("device", devices(), name)


def gpu(name: str) -> Device | None:
    """The catalogue GPU of that name; None for another kind of device or a name the
    catalogue does not hold (``device`` says why, where that is an error)."""
    dev = devices().get(name)
    return dev if dev is not None and dev.kind == "gpu" else None


def on_threads(dev: Device, threads: int | None) -> Device:
    """A catalogue CPU as ``threads`` threads use it: its peak and memory bandwidth times
    the share of its physical cores they occupy, min(threads, cores) / cores. Threads past
    the cores add nothing: a core's hardware threads share its FMA units and its path to
    memory (Intel 64 and IA-32 Architectures Optimization Reference Manual, Intel
    Hyper-Threading Technology). Bandwidth scales with the cores as compute does, a
    simplification: one core of a large part draws more than its share. A GPU, a CPU
    without a core count, or no thread count: the device as it is."""
    if dev.kind != "cpu" or dev.cores is None or threads is None:
        return dev
    share = min(threads, dev.cores) / dev.cores
    if share == 1:
        return dev
    return dev.model_copy(update={
        "fp32_tflops": dev.fp32_tflops * share, "memory_gbps": dev.memory_gbps * share,
        "description": f"{dev.description}; {threads} thread{'s' if threads > 1 else ''} on "
                       f"{min(threads, dev.cores)} of its {dev.cores} cores"})


#: The catalogue entry of a GPU by the name its driver reports (CUDA's device name, as
#: ``nvidia-smi`` prints it: "NVIDIA H100 80GB HBM3" is the SXM5 part, "NVIDIA H100 PCIe"
#: the PCIe one), matched in this order; the first pattern found in the name wins.
GPU_NAMES: tuple[tuple[str, str], ...] = (
    ("H200", "h200"), ("H100 PCIe", "h100-pcie"), ("H100", "h100-sxm"),
    ("A100-SXM4-80GB", "a100-80gb"), ("A100 80GB", "a100-80gb"), ("A100", "a100-40gb"),
    ("V100", "v100"), ("P100", "p100"), ("L40S", "l40s"), ("L4", "l4"),
    ("GTX 1080", "gtx1080"), ("GTX 980", "gtx980"), ("K80", "k80"),
)


def gpu_entry(reported: str | None) -> str | None:
    """The catalogue's name for a GPU its driver calls ``reported``, or None."""
    if not reported:
        return None
    return next((entry for pattern, entry in GPU_NAMES if pattern in reported), None)


#: Other spellings of link names (the issue's, and the common short forms).
LINK_ALIASES = {"pcie3": "pcie3x16", "pcie4": "pcie4x16", "pcie5": "pcie5x16",
                "eth-10g": "eth10", "eth-25g": "eth25", "eth-100g": "eth100",
                "10gbe": "eth10", "25gbe": "eth25", "100gbe": "eth100"}


def link(name: str) -> Link:
    return _get("link", links(), LINK_ALIASES.get(name, name))


def storage_entry(name: str) -> Storage:
    return _get("storage", storage(), name)
