"""``python -m dlperf.backends.count_flops NAME...``: each network's training-step FLOPs
at its default size and batch from PyTorch's counter, as one JSON object on stdout.

A process of its own, so that the command line that asks (``dlperf networks``) never
loads a framework; a network the counter cannot trace is left out.
"""

from __future__ import annotations

import json
import sys

from dlperf import workloads
from dlperf.backends.torch_backend import count_flops


def main(names: list[str]) -> dict[str, float]:
    out = {}
    for name in names:
        wl = workloads.get(name)
        try:
            out[name] = count_flops(wl.config(), wl.default_batch)
        except Exception:  # noqa: BLE001 - the caller shows the closed form instead
            continue
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
