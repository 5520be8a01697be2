"""FLOPs per training step from PyTorch's counter, cached on disk.

Counting runs on the meta device (shapes only), in a process of its own
(``dlperf.backends.count_flops``: the command line never loads torch), and still takes a
second or two per network; the cache keeps ``dlperf networks`` fast. Keyed by torch version and the exact
network configuration, so a changed definition is counted again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
    keys = {}
    for name in names:
        wl = workloads.get(name)
        keys[name] = f"torch {version}|{wl.config()!r}|{wl.default_batch}"
    missing = [n for n in names if keys[n] not in cache]
    dirty = bool(missing) and _count(missing, keys, cache)
    out = {n: cache[keys[n]] for n in names if keys[n] in cache}
    if dirty:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(cache))
        except OSError:
            pass
    return out


def _count(names: list[str], keys: dict[str, str], cache: dict[str, float]) -> bool:
    """Count ``names`` in a child process into ``cache``; False if it could not run."""
    from dlperf.engine.launch.isolated import with_src_path

    env = with_src_path(dict(os.environ))
    try:
        p = subprocess.run([sys.executable, "-m", "dlperf.backends.count_flops", *names],
                           capture_output=True, text=True, env=env, timeout=600, check=True)
        counted = json.loads(p.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return False
    for name, flops in counted.items():
        cache[keys[name]] = flops
    return bool(counted)
