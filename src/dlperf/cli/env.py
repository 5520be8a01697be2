"""``dlperf env``: the machine, the software and the measured fp32 peak."""

from __future__ import annotations

import argparse

from rich.markup import escape

from dlperf.cli import args
from dlperf.cli.progress import ProgressListener, out
from dlperf.core import units


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("env", help="the machine, the software and the measured fp32 peak")
    args.add_run_flags(p, threads=args.Take(many=True, help="thread counts for the peak "
                                            "(default 1, 2, 4, ... past the CPUs)"))
    p.add_argument("--remeasure", action="store_true", help="measure the peak kernels again")
    p.add_argument("--peak-size", type=args.peak_size, default=2048,
                   help="peak kernel size, at least 16: matmul side, conv batch x 64 (default 2048)")
    args.add_db(p)
    p.set_defaults(func=cmd_env)


def cmd_env(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.core import environment
    from dlperf.engine.config import auto_threads

    m = environment.machine()
    out.print(f"[bold]machine[/]  {m['cpu_model']} ({m['cpu_vendor']})")
    out.print(f"  cores    {m['physical_cores']} physical, {m['logical_cpus']} logical, "
              f"{m['usable_cpus']} usable by dlperf" + ("; virtual machine" if m["hypervisor"] else ""))
    out.print(f"  flags    {' '.join(m['cpu_flags']) or '-'}")
    out.print(f"  memory   {units.nbytes(m['memory_bytes'])}")
    gpus = m["gpus"]
    out.print("  GPU      " + (", ".join(f"{g['name']} ({units.nbytes(g['memory_bytes'])})" for g in gpus)
                              if gpus else "none"))
    out.print(f"  system   {m['os']}, Python {m['python']}")
    threads = a.threads or auto_threads()
    with ProgressListener() as listener:
        peaks = api.measure_peaks(threads, gpu=bool(gpus), remeasure=a.remeasure,
                                  peak_size=a.peak_size, db=a.db, listener=listener)
    out.print("[bold]software[/]")
    for k, v in environment.packages().items():
        out.print(f"  {k:14} {v}")
    for k in ("blas", "cpu_capability", "mkldnn", "cuda"):
        if k in peaks.software:
            out.print(f"  {'torch ' + k:14} {peaks.software[k]}")
    out.print(f"[bold]fp32 peak[/]: the best of the libraries' kernels (size {a.peak_size}; in "
              "its own worker or after the calibration's kernels, its best round's median step, "
              "GFLOP/s), and the theoretical peak")
    for t, pk in peaks.by_threads.items():
        print_peak("GPU" if t == "gpu" else f"{t} thread{'s' if t != 1 else ''}", pk)
    return 0


def print_peak(label: str, pk) -> None:
    best = pk.best
    out.print(f"  [bold]{label:12}[/] " + (f"{units.flops(best.flops, '/s')} ({escape(best.source)})"
                                          if best else "no kernel ran"))
    for k in pk.rates:
        rate = units.flops(k.flops, "/s") if k.flops else f"- ({k.failure})"
        each = (f"rounds {', '.join(f'{f / 1e9:.1f}' for f in k.round_flops)}"
                if len(k.round_flops) > 1 else "")
        versions = ", ".join(f"{p} {v}" for p, v in k.versions.items())
        mark = "  <- best" if k is best else ""
        out.print(f"    {escape(k.source):24} {escape(rate):14} {each:22} {escape(versions)}{mark}")
    if pk.device == "cpu":
        out.print(f"    {'theoretical':24} {escape(pk.theoretical)}")
