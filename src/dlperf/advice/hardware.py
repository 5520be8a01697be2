"""What ``--hardware`` names: this machine, a catalogue device with a count, or several of
them to compare; and the sample count of ``--samples``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from dlperf.core.errors import UsageError
from dlperf.perfmodel import catalogue

THIS = "this"


@dataclass(frozen=True)
class Hardware:
    device: str  # 'this' or a catalogue device name
    count: int = 1

    @property
    def is_this(self) -> bool:
        return self.device == THIS

    def label(self) -> str:
        if self.is_this:
            return "this machine"
        return f"{self.count} x {self.device}" if self.count > 1 else self.device


# '8xa100-40gb', '8 x a100-40gb', 'a100-40gb:8', 'a100-40gb x8', 'a100-40gb*8'
_ITEM = re.compile(r"^(?:(\d+)\s*[x*]\s*)?([A-Za-z][\w.-]*)(?:(?:\s*[:*]\s*|\s+x\s*)(\d+))?$")


def parse_hardware(text: str) -> list[Hardware]:
    """'this', 'a100-40gb:8', '8xa100-40gb', 'h100-sxm x4', comma-separated to compare.
    An unknown device or a bad count is one UsageError line."""
    out = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        m = _ITEM.match(item)
        if not m or (m.group(1) and m.group(3)):
            raise UsageError(f"--hardware: cannot read '{item}' (write 'this', a catalogue "
                             "device such as 'a100-40gb', or one with a count: 'a100-40gb:8')")
        name, count = m.group(2), int(m.group(1) or m.group(3) or 1)
        if name.lower() == THIS:
            if count != 1:
                raise UsageError("--hardware: 'this' is this machine as it is; give no count")
            out.append(Hardware(THIS))
            continue
        if count < 1:
            raise UsageError(f"--hardware: the device count must be at least 1, got '{item}'")
        try:
            catalogue.device(name)
        except UsageError as e:  # one line naming the known devices
            raise UsageError(f"--hardware: {e}") from None
        out.append(Hardware(name, count))
    if not out:
        raise UsageError("--hardware: empty (give 'this' or a catalogue device)")
    return out


_SUFFIX = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "b": 1e9}


def parse_samples(text: str) -> int:
    """'1.2M', '50k', '60000', '1e6' -> a count of at least 1; anything else one line."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*([kKmMgGbB]?)\s*", text)
    value = float(m.group(1)) * _SUFFIX[m.group(2).lower()] if m else math.nan
    if not math.isfinite(value) or value < 1:
        raise UsageError(f"--samples: '{text}' is not a sample count (e.g. 60000, 50k, 1.2M)")
    return round(value)
