"""The theoretical fp32 peak of a CPU: what its FMA units could do if nothing else limited them.

    peak = cores x FMA units per core x fp32 lanes per unit x 2 (multiply and add) x clock

The number of FMA units per core and their width is microarchitecture knowledge that the
CPU does not report, so it comes from the small table below, keyed by the vendor, family
and model numbers of /proc/cpuinfo. A CPU that is not in the table, or whose units depend
on the product tier and the model name does not say which, has an unknown theoretical
peak: dlperf says "unknown" rather than guess. Imports no framework and reads no file
(``dlperf.core.environment.theoretical_peak`` gathers the inputs).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

#: Intel's x86 family-6 model numbers: Linux, arch/x86/include/asm/intel-family.h.
_INTEL_AVX2_CLIENT_SERVER = {
    0x3C, 0x3F, 0x45, 0x46,  # Haswell (client, -X, -L, -G)
    0x3D, 0x47, 0x4F, 0x56,  # Broadwell (client, -G, -X, -D)
    0x4E, 0x5E, 0x8E, 0x9E,  # Skylake client, Kaby/Coffee/Whiskey Lake
    0xA5, 0xA6,  # Comet Lake
}
_INTEL_SKYLAKE_X = 0x55  # Skylake-SP, Cascade Lake, Cooper Lake
_INTEL_ICELAKE_X = 0x6A
_INTEL_SAPPHIRE_EMERALD = {0x8F, 0xCF}  # Sapphire Rapids, Emerald Rapids

_INTEL_ORM = ("Intel 64 and IA-32 Architectures Optimization Reference Manual "
              "(two FMA execution units on ports 0 and 1)")
_INTEL_ARK = "Intel ARK, '# of AVX-512 FMA Units' of the processor"


@dataclass(frozen=True)
class FmaUnits:
    """The FMA units of one core of a microarchitecture."""

    microarch: str
    units: int  # FMA units per core
    bits: int  # datapath width of each unit
    flag: str  # the /proc/cpuinfo flag kernels need to use that width
    source: str

    @property
    def flops_per_cycle(self) -> int:
        """fp32 FLOPs per cycle per core: units x (bits / 32) lanes x 2."""
        return self.units * (self.bits // 32) * 2


def fma_units(vendor: str, family: int, model: int, name: str) -> FmaUnits | None:
    """The FMA units of this CPU's cores, or None when the table does not know them.

    Sources: Intel: the Optimization Reference Manual (Haswell to Comet Lake: 2 x 256-bit
    FMA) and ARK's '# of AVX-512 FMA Units' (Skylake-SP/Cascade Lake: 2 on Platinum, Gold
    6xxx and Gold 5122, 1 on other Gold 5xxx, Silver and Bronze; Ice Lake-SP: 2;
    Sapphire/Emerald Rapids Gold and Platinum: 2). AMD: the Software Optimization Guides for
    family 17h (pub. 55723: Zen, 2 FMA pipes of 128 bits; pub. 56305: Zen 2, 256 bits) and
    family 19h (pub. 56665: Zen 3, 2 x 256 bits; pub. 57647: Zen 4, AVX-512 executed on
    the same 2 x 256-bit pipes) and family 1Ah (pub. 58455: Zen 5, 2 FMA pipes of 512 bits
    on the server and desktop parts); the family/model ranges of each Zen generation as
    Linux sorts them (arch/x86/kernel/cpu/amd.c, bsp_init_amd). Of Zen 5 only the server
    (EPYC 9005 'Turin' and 'Turin Dense', models 00h-1Fh) and desktop ('Granite Ridge',
    40h-4Fh) parts are in the table: the mobile ones (20h-2Fh, 60h-7Fh) differ by product
    (256-bit pipes on some, 512 on others), which the model number does not tell apart.
    """
    if vendor == "GenuineIntel" and family == 6:
        if model in _INTEL_AVX2_CLIENT_SERVER:
            return FmaUnits("Haswell .. Comet Lake", 2, 256, "fma", _INTEL_ORM)
        if model == _INTEL_SKYLAKE_X:
            units = _skylake_sp_units(name)
            return FmaUnits("Skylake-SP / Cascade Lake", units, 512, "avx512f", _INTEL_ARK) if units else None
        if model == _INTEL_ICELAKE_X:
            return FmaUnits("Ice Lake-SP", 2, 512, "avx512f", _INTEL_ARK)
        if model in _INTEL_SAPPHIRE_EMERALD and re.search(r"\b(Platinum|Gold)\b", name):
            return FmaUnits("Sapphire / Emerald Rapids", 2, 512, "avx512f", _INTEL_ARK)
        return None
    if vendor == "AuthenticAMD":
        if family == 0x17 and (model <= 0x2F or 0x50 <= model <= 0x5F):
            return FmaUnits("Zen", 2, 128, "fma", "AMD Software Optimization Guide, family 17h (55723)")
        if family == 0x17 and (0x30 <= model <= 0x4F or 0x60 <= model <= 0x7F
                               or 0x90 <= model <= 0x91 or 0xA0 <= model <= 0xAF):
            return FmaUnits("Zen 2", 2, 256, "fma", "AMD Software Optimization Guide, family 17h models 30h+ (56305)")
        if family == 0x19 and (model <= 0x0F or 0x20 <= model <= 0x5F):
            return FmaUnits("Zen 3", 2, 256, "fma", "AMD Software Optimization Guide, family 19h (56665)")
        if family == 0x19 and (0x10 <= model <= 0x1F or 0x60 <= model <= 0xAF):
            return FmaUnits("Zen 4", 2, 256, "fma", "AMD Software Optimization Guide, family 19h models 10h+ (57647)")
        if family == 0x1A and (model <= 0x1F or 0x40 <= model <= 0x4F):
            return FmaUnits("Zen 5", 2, 512, "avx512f", "AMD Software Optimization Guide, family 1Ah (58455)")
    return None


def tier_dependent(vendor: str, family: int, model: int) -> str | None:
    """The microarchitecture whose FMA units depend on the product tier (``fma_units``
    needs the tier in the model name), or None."""
    if vendor == "GenuineIntel" and family == 6:
        if model == _INTEL_SKYLAKE_X:
            return "Skylake-SP / Cascade Lake (Platinum and Gold 6xxx: 2, Silver and Bronze: 1)"
        if model in _INTEL_SAPPHIRE_EMERALD:
            return "Sapphire / Emerald Rapids (Platinum and Gold: 2)"
    return None


def _skylake_sp_units(name: str) -> int | None:
    """AVX-512 FMA units of a Skylake-SP / Cascade Lake part from its model name (ARK)."""
    if re.search(r"\bPlatinum\b", name) or re.search(r"\bGold 6\d{3}", name) or "Gold 5122" in name:
        return 2
    if re.search(r"\b(Gold 5\d{3}|Silver|Bronze)\b", name):
        return 1
    return None  # e.g. a cloud VM's generic "Intel Xeon Processor": the tier is not known


def clock_ghz(model_name: str, cpu_mhz: str | None, max_khz: int | None,
              busy_ghz: float | None = None) -> tuple[float | None, str]:
    """The clock for the theoretical peak and where it came from: the kernel's cpufreq
    maximum (an upper bound), else the clock measured on a busy core (``cpu_clock``: the
    boost that a virtual machine's nominal figures do not show), else the nominal clock in
    the model name ('@ 2.80GHz'), else the clock /proc/cpuinfo reports ('cpu MHz')."""
    if max_khz:
        return max_khz / 1e6, "cpufreq maximum"
    if busy_ghz:
        return busy_ghz, "measurement on a busy core"
    m = re.search(r"@\s*([\d.]+)\s*GHz", model_name)
    if m:
        return float(m.group(1)), "model name"
    try:
        mhz = float(cpu_mhz or "")
    except ValueError:
        return None, ""
    return mhz / 1e3, "current 'cpu MHz'"


@dataclass(frozen=True)
class Theoretical:
    """The theoretical fp32 peak at a core count, with everything it was computed from."""

    flops: float | None  # FLOP/s; None when unknown
    cores: int
    units: FmaUnits | None = None
    ghz: float | None = None
    clock_source: str = ""
    reason: str = ""  # why it is unknown

    def describe(self) -> str:
        """'358 GFLOP/s = 2 cores x 2 x 512-bit FMA x 2 x 2.80 GHz (Ice Lake-SP; clock from
        the model name)', or 'unknown (why)'."""
        if self.flops is None or self.units is None:
            return f"unknown ({self.reason})"
        u = self.units
        return (f"{self.flops / 1e9:.0f} GFLOP/s = {self.cores} core{'s' if self.cores != 1 else ''}"
                f" x {u.units} x {u.bits}-bit FMA x 2 x {self.ghz:.2f} GHz ({u.microarch}; "
                f"clock from the {self.clock_source})")


_FIGURE = re.compile(r"(\d+(?:\.\d+)?) (GFLOP/s|TFLOP/s|GHz)")


def merged(described: Iterable[str]) -> list[str]:
    """Peaks described alike but for their figures (``Theoretical.describe``: the clock
    measured on a busy core moves by a few MHz from one run to the next) as one, each
    figure that differs as its range: '260-263 GFLOP/s = 1 core x ... x 4.07-4.11 GHz
    (...)'; the others as they are, in order."""
    groups: dict[str, list[str]] = {}
    for d in described:
        groups.setdefault(_FIGURE.sub("\x00 \\2", d), []).append(d)
    out = []
    for form, same in groups.items():
        # the figures of each description, one column per figure (same form: same count)
        columns = zip(*([m.group(1) for m in _FIGURE.finditer(d)] for d in same), strict=True)
        parts = form.split("\x00")
        out.append(parts[0] + "".join(_range(col) + rest
                                      for col, rest in zip(columns, parts[1:], strict=True)))
    return out


def _range(texts: tuple[str, ...]) -> str:
    """'4.07-4.11' from figures as written, or the one figure where all are equal."""
    lo, hi = min(texts, key=float), max(texts, key=float)
    return lo if float(lo) == float(hi) else f"{lo}-{hi}"


def theoretical_peak(cpuinfo: dict[str, str], cores: int, max_khz: int | None = None,
                     busy_ghz: Callable[[], float | None] | None = None) -> Theoretical:
    """cores x FMA units x fp32 lanes x 2 x clock, from the fields of /proc/cpuinfo
    (vendor_id, cpu family, model, model name, flags, cpu MHz), the cpufreq maximum and the
    clock measured on a busy core (``clock_ghz`` says which wins). ``busy_ghz`` measures
    that clock; it is called only where the peak needs it: FMA units known, no cpufreq
    maximum."""
    name = cpuinfo.get("model name", "")
    try:
        family, model = int(cpuinfo.get("cpu family", "")), int(cpuinfo.get("model", ""))
    except ValueError:
        return Theoretical(None, cores, reason="no CPU family and model in /proc/cpuinfo")
    vendor = cpuinfo.get("vendor_id", "")
    units = fma_units(vendor, family, model, name)
    if units is None and (arch := tier_dependent(vendor, family, model)):
        return Theoretical(None, cores, reason=f"the AVX-512 FMA units per core of {arch} "
                           f"depend on the product tier, which the model name '{name}' does "
                           "not give (a virtual machine's generic name?)")
    if units is None:
        return Theoretical(None, cores, reason=f"FMA units of '{name}' (family {family:#x}, "
                           f"model {model:#x}) not in dlperf's table")
    if units.flag not in cpuinfo.get("flags", "").split():
        return Theoretical(None, cores, units, reason=f"{units.microarch} without the "
                           f"'{units.flag}' flag (hidden by a hypervisor?)")
    busy = busy_ghz() if busy_ghz is not None and not max_khz else None
    ghz, source = clock_ghz(name, cpuinfo.get("cpu MHz"), max_khz, busy)
    if not ghz:
        return Theoretical(None, cores, units, reason="no clock frequency found")
    return Theoretical(cores * units.flops_per_cycle * ghz * 1e9, cores, units, ghz, source)
