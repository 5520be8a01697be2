"""Numbers shown to a person carry units."""

from __future__ import annotations


def seconds(s: float | None) -> str:
    if s is None:
        return "-"
    s = float(f"{s:.3g}")  # rounded first: 0.9999 s is '1 s', not '1e+03 ms'
    if s >= 100:
        return f"{s:.0f} s"
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


def flops(f: float | None, per: str = "") -> str:
    if f is None:
        return "-"
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6),
                        ("kFLOP", 1e3)):
        if f >= scale:
            return f"{f / scale:.3g} {unit}{per}"
    return f"{f:.3g} FLOP{per}"


def nbytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f} {unit}" if v >= 999.5 else f"{v:.3g} {unit}"  # not '1e+03 MiB'

    return f"{n:.0f} B"


def percent(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def count(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"
