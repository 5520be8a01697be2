"""The machine and software every number is measured on. Imports no framework.

The machine part (CPU model, cores, flags, memory, GPUs) is read here from /proc, /sys
and nvidia-smi; the framework part (versions, BLAS, devices the framework sees) is
reported by the worker, which has the framework loaded. The store keeps both, keyed by a
hash, beside every result.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from dlperf.core import cpu_clock, cpu_peak
from dlperf.core.errors import UsageError

# Flags worth showing: the vector extensions that decide a CPU's FLOP rate.
_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if ":" in line:
                k, v = (s.strip() for s in line.split(":", 1))
                info.setdefault(k, v)
    except OSError:
        pass
    return info


def physical_cores() -> int:
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def usable_cpus() -> list[int]:
    """Logical CPUs this process may run on, one per physical core first."""
    cpus = sorted(os.sched_getaffinity(0))
    core_of: dict[int, tuple[str, str]] = {}
    for c in cpus:
        topo = Path(f"/sys/devices/system/cpu/cpu{c}/topology")
        try:
            core_of[c] = (
                (topo / "physical_package_id").read_text().strip(),
                (topo / "core_id").read_text().strip(),
            )
        except OSError:
            core_of[c] = ("0", str(c))
    seen: set[tuple[str, str]] = set()
    first, siblings = [], []
    for c in cpus:
        (siblings if core_of[c] in seen else first).append(c)
        seen.add(core_of[c])
    return first + siblings


def cpus_for(threads: int) -> list[int]:
    """CPUs to pin a worker with this many threads to: distinct physical cores first.
    More threads than CPUs get every CPU (the oversubscribed case DLBench measured)."""
    cpus = usable_cpus()
    return cpus[: min(threads, len(cpus))]


@functools.cache
def gpus() -> list[dict[str, Any]]:
    """GPUs seen by nvidia-smi (name, memory); empty when there is none."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.strip().splitlines():
        name, mem = (s.strip() for s in line.split(",", 1))
        found.append({"name": name, "memory_bytes": int(float(mem) * 2**20)})
    return found


def require_gpu(what: str = "--device gpu") -> None:
    """UsageError (one line, exit 2) where no GPU is visible: a GPU path ends here rather
    than in a worker that fails."""
    if not gpus():
        why = "nvidia-smi finds none" if shutil.which("nvidia-smi") else "no nvidia-smi"
        raise UsageError(f"{what} needs a GPU; none is visible on this machine ({why})")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def machine() -> dict[str, Any]:
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    mem = psutil.virtual_memory()
    return {
        "hostname": platform.node(),
        "cpu_model": info.get("model name", platform.processor() or "unknown"),
        "cpu_vendor": info.get("vendor_id", ""),
        "physical_cores": physical_cores(),
        "logical_cpus": os.cpu_count() or 1,
        "usable_cpus": len(os.sched_getaffinity(0)),
        "cpu_flags": [f for f in _FLAGS if f in flags],
        "hypervisor": "hypervisor" in flags,
        "memory_bytes": mem.total,
        "gpus": gpus(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def packages() -> dict[str, str | None]:
    names = ("torch", "tensorflow-cpu", "tensorflow", "keras", "jax", "jaxlib", "flax", "optax", "numpy")
    return {n: v for n in names if (v := _version(n))}


def record(software: dict[str, Any] | None = None) -> dict[str, Any]:
    """The full environment record stored beside a result."""
    return {"machine": machine(), "packages": packages(), "software": software or {},
            "dlperf": _version("dlperf"), "executable": sys.executable}


def env_id(rec: dict[str, Any]) -> str:
    stable = {k: v for k, v in rec.items() if k != "executable"}
    return hashlib.sha1(json.dumps(stable, sort_keys=True, default=str).encode()).hexdigest()[:16]


def machine_id() -> str:
    """Hash of the hardware alone: peaks measured on it stay valid across software updates
    of dlperf itself (they are re-measured when the framework or the CPU changes)."""
    m = dict(machine())
    m.pop("hostname", None)
    return hashlib.sha1(json.dumps(m, sort_keys=True, default=str).encode()).hexdigest()[:16]


def sessions_share_cores() -> bool:
    """Whether this kernel shares a core among sessions rather than among threads
    (autogroup, sched(7): ``/proc/sys/kernel/sched_autogroup_enabled`` is 1). torchrun
    starts each rank in a session of its own, so there each rank's process gets an
    equal share of a core it shares, however many of its threads are runnable."""
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return False


def cores_for(threads: int) -> int:
    """Physical cores under a worker with this many threads: a second thread on a core's
    sibling CPU adds no FMA units."""
    cores = set()
    for c in cpus_for(threads):
        topo = Path(f"/sys/devices/system/cpu/cpu{c}/topology")
        try:
            cores.add(((topo / "physical_package_id").read_text().strip(),
                       (topo / "core_id").read_text().strip()))
        except OSError:
            cores.add(("0", str(c)))
    return len(cores)


def theoretical_peak(threads: int) -> cpu_peak.Theoretical:
    """This CPU's theoretical fp32 peak on the cores a worker with ``threads`` threads runs
    on (``dlperf.core.cpu_peak``, from /proc/cpuinfo, the cpufreq maximum in /sys and,
    where /sys has none, the clock measured on a busy core: ``dlperf.core.cpu_clock``)."""
    try:
        max_khz = int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text())
    except (OSError, ValueError):
        max_khz = None
    return cpu_peak.theoretical_peak(_cpuinfo(), cores_for(threads), max_khz, busy_clock_ghz)


def _clock_cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dlperf" / "busy_clock.json"


def busy_clock_ghz() -> float | None:
    """The fastest clock measured on a busy core of this machine (``cpu_clock``), by this
    process or an earlier one (kept per machine in ``$XDG_CACHE_HOME/dlperf/
    busy_clock.json``): the boost a core reaches moves from one process to the next
    (3.98-4.35 GHz between processes on a 2-vCPU AMD EPYC guest), and the theoretical peak
    is the fastest the cores run, one figure for every run on the machine, as cpufreq's
    maximum is where the kernel gives one. None where it cannot be measured."""
    measured = cpu_clock.busy_clock_ghz()
    path, key = _clock_cache(), machine_id()
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        kept = {}
    kept = kept if isinstance(kept, dict) else {}
    lo, hi = cpu_clock.PLAUSIBLE_GHZ
    seen = kept.get(key)
    seen = float(seen) if isinstance(seen, (int, float)) and lo <= seen <= hi else None
    best = max((g for g in (measured, seen) if g is not None), default=None)
    if best is not None and best != seen:
        try:  # a file of its own renamed over the old one: a reader never sees half of it
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({**kept, key: best}))
            os.replace(tmp, path)
        except OSError:  # a read-only home: this process's measurement still stands
            pass
    return best


#: the environment variables that change how the C library's allocator (or one preloaded
#: in its place) hands out memory, and so a step's new pages and its time
#: (``Metrics.system_s_per_step``): glibc's tunables and its older MALLOC_* variables
#: (mallopt(3)), jemalloc's MALLOC_CONF, a preloaded library
ALLOCATOR_VARS = ("LD_PRELOAD", "GLIBC_TUNABLES", "MALLOC_ARENA_MAX", "MALLOC_MMAP_MAX_",
                  "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_TRIM_THRESHOLD_",
                  "MALLOC_CONF")
#: ``allocator()`` where none of them is set
DEFAULT_ALLOCATOR = "the C library's defaults"


def allocator() -> str:
    """This process's allocator settings as the ``ALLOCATOR_VARS`` set them ('LD_PRELOAD=
    ...; GLIBC_TUNABLES=...'), or ``DEFAULT_ALLOCATOR``."""
    set_ = [f"{k}={v}" for k in ALLOCATOR_VARS if (v := os.environ.get(k))]
    return "; ".join(set_) or DEFAULT_ALLOCATOR


def resident_bytes() -> int:
    """This process's resident memory now."""
    import psutil

    return psutil.Process().memory_info().rss


def _status_bytes(field: str) -> int | None:
    """A size line of this process's /proc/self/status ('VmHWM', 'RssFile'), in bytes, or
    None where the kernel does not give it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def file_resident_bytes() -> int | None:
    """The pages of files (the libraries, memory-mapped data) resident in this process now
    (RssFile), or None where the kernel does not say. Clean pages the page cache shares:
    how many a library maps follows the cache's state, not the process's needs
    (docs/measurement.md: a freshly installed PyTorch maps 133 MiB of its files at
    import, 75 MiB once the cache was dropped and read back)."""
    return _status_bytes("RssFile")


def peak_resident_bytes() -> int:
    """This process's own peak resident memory so far: the kernel's high-water mark of its
    address space (VmHWM in /proc/self/status). Not ru_maxrss: Linux carries that across
    fork and execve (getrusage(2)), so a worker started by a large process (a notebook, a
    test runner) would report its launcher's peak as its own."""
    if (peak := _status_bytes("VmHWM")) is not None:
        return peak
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def restart_peak_resident() -> bool:
    """Start this process's peak resident memory afresh from what it holds now: the free
    memory the C library's heaps keep returned to the system first (glibc's
    ``malloc_trim(0)``), then the kernel's high-water mark reset to the resident memory
    (writing 5 to /proc/self/clear_refs, Linux 4.0 on: proc(5)). False where the mark
    could not be reset (``peak_resident_bytes`` then goes on from the old peak)."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its free memory stays counted
        pass
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True
