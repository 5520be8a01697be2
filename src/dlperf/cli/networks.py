"""``dlperf networks``: every workload with its parameters and FLOPs per step."""

from __future__ import annotations

import argparse
import json

from dlperf.cli import args
from dlperf.cli.progress import out
from dlperf.core import units


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("networks", help="list the networks with parameters and FLOPs")
    p.add_argument("--group", help="dlbench or guide")
    p.add_argument("--no-count", action="store_true", help="closed-form FLOPs only (no torch)")
    args.add_json(p)
    p.set_defaults(func=cmd_networks)


def cmd_networks(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.report.exporters import print_table
    from dlperf.report.tables import Table

    nets = api.networks(group=a.group)
    counted = {} if a.no_count else api.counted_flops([n["name"] for n in nets])
    rows = []
    for n in nets:
        f = counted.get(n["name"])
        rows.append([n["name"], n["group"], n["description"], units.count(n["params"]),
                     str(n["default_batch"]), units.flops(f if f is not None else n["flops_per_step"]),
                     ", ".join(n["sizes"])])
    src = "PyTorch's FLOP counter" if counted else "closed form"
    t = Table(title="Networks", headers=["name", "group", "definition", "params", "batch",
                                         "FLOPs/step", "sizes"], rows=rows,
              caption=f"FLOPs per training step (forward + backward, matmul and convolution) "
                      f"at the default batch, from {src}.")
    if a.json:
        for n in nets:
            n["flops_per_step_counted"] = counted.get(n["name"])
        print(json.dumps(nets, indent=1))
    else:
        print_table(t, out)
    return 0
