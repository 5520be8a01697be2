"""The clock a busy core runs at, measured rather than read.

A virtual machine's /proc/cpuinfo gives no cpufreq maximum and a 'cpu MHz' that is the
host's nominal clock, not the boost the core really runs at: a 2-vCPU AMD EPYC (Zen 5)
guest reports 2596 MHz while its measured products reach 529 GFLOP/s on 2 cores, which
two 512-bit FMA pipes can do only at 4.1 GHz or more. A theoretical peak priced at the
nominal clock then sits below what the machine measurably does.

The measurement: a chain of dependent 64-bit integer additions (``add rax, rdx``), each
of which waits for the one before it, so the chain advances one addition per cycle: an
integer ALU operation's latency is one cycle on every x86-64 core (Intel 64 and IA-32
Optimization Reference Manual; AMD Software Optimization Guides, instruction latency
tables; Fog, "Instruction tables"). Timing a known number of them gives cycles per
second. The code is eight such additions in a counted loop, written to an executable page
and called through ctypes (which releases the GIL). A core that was interrupted only
looks slower, so the fastest of a few trials is the clock. Only on x86-64 Linux; anywhere
else, or where the platform refuses an executable page, the clock is unknown (None).
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import platform
import sys
import time

#: dependent additions per loop iteration of ``_CODE``
ADDS_PER_ITERATION = 8
#: x86-64 System V, uint64_t f(uint64_t n): n iterations of 8 dependent additions
_CODE = bytes(
    [0x48, 0x89, 0xF9,                    # mov rcx, rdi       the iteration count
     0x31, 0xC0,                          # xor eax, eax
     0xBA, 0x01, 0x00, 0x00, 0x00]        # mov edx, 1
    + [0x48, 0x01, 0xD0] * ADDS_PER_ITERATION  # loop: add rax, rdx (x 8, each on the last)
    + [0x48, 0xFF, 0xC9,                  # dec rcx
       0x75, 0x100 - (3 * ADDS_PER_ITERATION + 5),  # jnz loop
       0xC3])                             # ret
#: a plausible clock, in GHz: outside it the measurement is taken as failed
PLAUSIBLE_GHZ = (0.3, 8.0)


def _chain() -> tuple[object, object] | None:
    """The callable chain of additions and the page that holds it, or None."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None
    try:
        page = mmap.mmap(-1, mmap.PAGESIZE,
                         prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except (OSError, ValueError, AttributeError):  # W^X policies refuse such a page
        return None
    page.write(_CODE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    return ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64)(address), page


@functools.cache
def busy_clock_ghz(trials: int = 5, iterations: int = 4_000_000) -> float | None:
    """This process's core's clock while busy, in GHz (the fastest of ``trials`` timed
    chains of ``iterations`` x 8 additions, after one untimed to let the clock rise), or
    None where it cannot be measured. About 10 ms a trial at 3 GHz."""
    made = _chain()
    if made is None:
        return None
    run, _page = made
    run(iterations)  # the governor raises the clock under load
    best = 0.0
    for _ in range(trials):
        t0 = time.perf_counter()
        total = run(iterations)
        elapsed = time.perf_counter() - t0
        if total != iterations * ADDS_PER_ITERATION:  # the code did not run as written
            return None
        best = max(best, total / elapsed / 1e9)
    lo, hi = PLAUSIBLE_GHZ
    return best if lo <= best <= hi else None
