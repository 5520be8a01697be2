"""FLOPs per training step from PyTorch's counter, cached on disk.

Counting runs on the meta device (shapes only), but still takes a second or two per
network; the cache keeps ``dlperf networks`` fast. Keyed by torch version and the exact
network configuration, so a changed definition is counted again.
"""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path

from dlperf import workloads


def _cache_path() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dlperf" / "flops.json"


def counted_flops(names: list[str]) -> dict[str, float]:
    """name -> FLOPs per step at the default size and batch, from torch's counter."""
    path = _cache_path()
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    version = metadata.version("torch")
    out, dirty = {}, False
    for name in names:
        wl = workloads.get(name)
        cfg = wl.config()
        key = f"torch {version}|{cfg!r}|{wl.default_batch}"
        if key not in cache:
            from dlperf.backends.torch_backend import count_flops

            try:
                cache[key] = count_flops(cfg, wl.default_batch)
            except Exception:  # a network the counter cannot trace: show the closed form
                continue
            dirty = True
        out[name] = cache[key]
    if dirty:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(cache))
        except OSError:
            pass
    return out
