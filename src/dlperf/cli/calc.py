"""``dlperf calc``: the guide's arithmetic as calculators. Parsing and printing only; the
arithmetic lives in ``dlperf.kinds.dataflow.transfer``, the figures in the perfmodel catalogue.

    dlperf calc transfer --link pcie4x16 --device-memory 8GB --devices 4 --compute 0.5
    dlperf calc storage --data 32GB --storage nvme,raid0-nvme5
"""

from __future__ import annotations

import argparse
import math

from dlperf.cli.args import Take, add_run_flags, str_list
from dlperf.core.errors import UsageError
from dlperf.engine.config import parse_bytes
from dlperf.kinds.dataflow import transfer as tr
from dlperf.perfmodel import catalogue

#: the guide's card, for the note on a link's slower end when no --device is given
GUIDE_DEVICE = "gtx1080"


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calc", help="calculators: host-to-device transfer, storage reads")
    calc = p.add_subparsers(dest="calc_command", metavar="CALCULATOR", required=True)

    t = calc.add_parser("transfer", help="refresh device memory over a shared link (the "
                        "guide's arithmetic), and what it leaves out")
    t.add_argument("--link", default="pcie4x16", help="a link of the catalogue (default "
                   "pcie4x16; see dlperf devices)")
    add_run_flags(t, device=Take(catalogue=True, help="a catalogue device: its memory (unless "
                                 "--device-memory) and its own link (default: the guide's "
                                 "gtx1080)"))
    t.add_argument("--device-memory", help="memory refreshed per device, e.g. 8GB "
                   "(GB = 1e9 bytes)")
    t.add_argument("--devices", type=int, default=1, help="devices sharing the link")
    t.add_argument("--compute", type=float, default=0.0, help="seconds of computation "
                   "per iteration")
    t.set_defaults(calc_func=cmd_transfer)

    s = calc.add_parser("storage", help="time to read data from each kind of storage")
    s.add_argument("--data", required=True, help="bytes to read, e.g. 32GB")
    s.add_argument("--storage", help="comma-separated catalogue names (default: all)")
    s.set_defaults(calc_func=cmd_storage)
    p.set_defaults(func=cmd_calc)


def cmd_calc(a: argparse.Namespace) -> int:
    return a.calc_func(a)


def _seconds(x: float) -> str:
    return f"{x:.6f} s"


def _number(x: float) -> str:
    return f"{x:.6f}".rstrip("0").rstrip(".")


def _row(label: str, value: str, how: str = "") -> str:
    return f"  {label:<34} {value:<12} {how}".rstrip()


def cmd_transfer(a: argparse.Namespace) -> int:
    link = catalogue.link(a.link)
    dev = catalogue.device(a.device or GUIDE_DEVICE)
    if a.device_memory is None and a.device is None:
        raise UsageError("give --device-memory (e.g. 8GB) or a catalogue --device")
    memory = parse_bytes(a.device_memory) if a.device_memory else dev.memory_gb * 1e9
    if a.devices < 1:
        raise UsageError(f"--devices must be at least 1, got {a.devices}")
    if not a.compute >= 0 or math.isinf(a.compute):
        raise UsageError(f"--compute must be a non-negative number of seconds, got {a.compute}")
    n, c, gb = a.devices, a.compute, _number(memory / 1e9)
    r = tr.refresh(memory, link.gbps, n)
    print(f"Refreshing {gb} GB per device over {link.name} ({link.description}, "
          f"{_number(link.gbps)} GB/s per direction)")
    print(_row("one device", _seconds(r.one_s), f"{gb} GB / {_number(link.gbps)} GB/s"))
    print(_row(f"all {n} devices, one shared link", _seconds(r.all_s),
               f"{n} x {r.one_s:.6f} s"))
    print(_row(f"the other {n - 1}, while one computes", _seconds(r.others_s),
               f"{n - 1} x {r.one_s:.6f} s"))
    it = tr.guide_iteration(r, c)
    print(f"With {_number(c)} s of computation per iteration (the guide's arithmetic)")
    print(_row("idle per iteration", _seconds(it.idle_s),
               f"max(0, {r.others_s:.6f} - {_number(c)})"))
    print(_row("effective compute share", f"{it.compute_share:.2%}",
               f"{_number(c)} / ({_number(c)} + {it.idle_s:.6f})"))
    print("What this arithmetic leaves out")
    rr = tr.round_robin_iteration(r, c)
    print(f"  - each device's own refresh: one round of the shared link serves all {n} "
          f"({r.all_s:.6f} s), so without overlap an iteration takes "
          f"max({_number(c)} + {r.one_s:.6f}, {r.all_s:.6f}) = {rr.time_s:.6f} s: "
          f"{rr.compute_share:.2%} compute")
    shared = tr.prefetched_iteration(c, r.all_s)
    own = tr.prefetched_iteration(c, r.one_s)
    limit = "the link is the limit" if r.all_s > c else "hidden"
    print(f"  - prefetching (copying the next data while computing) hides a transfer "
          f"shorter than the computation: on the shared link an iteration takes "
          f"max({_number(c)}, {r.all_s:.6f}) = {shared.time_s:.6f} s ({limit}); with each "
          f"device on its own {link.name}, max({_number(c)}, {r.one_s:.6f}) = "
          f"{own.time_s:.6f} s: {own.compute_share:.2%} compute")
    own_link = catalogue.link(dev.host_link) if dev.host_link else None
    if own_link is not None and own_link.gbps < link.gbps:
        slow = tr.transfer_time(memory, own_link.gbps)
        print(f"  - a link runs at its slower end: {dev.description} sits on "
              f"{own_link.description} ({own_link.name}, {_number(own_link.gbps)} GB/s), so "
              f"on {link.name} its refresh takes {slow:.6f} s, {slow / r.one_s:.1f}x the "
              "figure above")
    return 0


def cmd_storage(a: argparse.Namespace) -> int:
    nbytes = parse_bytes(a.data)
    table = catalogue.storage()
    names = str_list(a.storage) or list(table)
    entries = [catalogue.storage_entry(name) for name in names]
    print(f"Reading {_number(nbytes / 1e9)} GB")
    first = tr.storage_read_time(nbytes, entries[0].read_gbps)
    for s in entries:
        t = tr.storage_read_time(nbytes, s.read_gbps)
        ratio = "" if s is entries[0] else f"{first / t:.2f}x the speed of {entries[0].name}"
        print(f"  {s.name:<12} {s.description:<34} {_number(s.read_gbps):>6} GB/s "
              f"{_seconds(t):>14}  {ratio}".rstrip())
    return 0

