"""``dlperf dataflow``: the flow of data as a measured factor (docs/dataflow.md). Parsing
and printing; the runs go through the runner, worker and store like every other.

    dlperf dataflow sweep --network alexnet --loader-workers 0,1,2,4 --prefetch 0,2
    dlperf dataflow loader --network resnet50 --input disk --loader-workers 2
    dlperf dataflow storage --path /data [--network resnet50]
    dlperf dataflow memory --network resnet50 --memory-limit 8GiB
    dlperf dataflow h2d --network resnet50          (a GPU; exit 2 without one)
    dlperf dataflow clear                           (the generated data sets)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape

from dlperf.cli import args
from dlperf.cli.dataflow_common import base_specs, config_flags, run_specs
from dlperf.cli.dataflow_common import values as values_of
from dlperf.cli.dataflow_flags import add_input_flags, use_data_dir
from dlperf.cli.dataflow_measure import cmd_h2d, cmd_memory, cmd_storage
from dlperf.cli.progress import out
from dlperf.core import units
from dlperf.core.errors import UsageError
from dlperf.core.spec import RunSpec
from dlperf.inputs import datasets
from dlperf.kinds.dataflow import plan as dplan


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dataflow", help="data flow: input pipelines, stalls, storage, memory")
    dsub = p.add_subparsers(dest="dataflow_command", metavar="COMMAND", required=True,
                            parser_class=args.Parser)

    s = dsub.add_parser("sweep", help="time per mini-batch and stall share against loader "
                        "workers and prefetching, beside the synthetic-data floor")
    config_flags(s)
    add_input_flags(s, grid=True)
    s.add_argument("--out", default="dlperf-dataflow", help="folder for the table and plot")
    args.add_limits(s)
    args.add_sweep_flags(s)
    args.add_db(s)
    s.set_defaults(df_func=cmd_sweep)

    ld = dsub.add_parser("loader", help="an input pipeline alone: samples/s with no training")
    config_flags(ld)
    add_input_flags(ld)
    args.add_limits(ld)
    args.add_db(ld)
    ld.set_defaults(df_func=cmd_loader)

    st = dsub.add_parser("storage", help="cold sequential and random read bandwidth, and "
                         "whether it feeds a measured training rate")
    st.add_argument("--path", required=True, help="a folder (a test file is written there "
                    "and removed) or a file to read")
    st.add_argument("--file-size", default="256MiB", help="test file size (default 256MiB)")
    st.add_argument("--tool", choices=["auto", "fio", "direct"], default="auto",
                    help="fio where installed (auto), or the built-in direct reader")
    args.add_run_flags(st, network=args.Take(help="say whether this storage feeds this "
                                             "network's measured training rate (from the "
                                             "store)"))
    st.add_argument("--data-format", choices=["jpeg", "png", "raw"],
                    help="what the network reads (default jpeg for images, raw otherwise)")
    st.add_argument("--rate", type=args.positive_float, help="samples/s to feed (default: the "
                    "fastest measured rate of --network on this machine)")
    args.add_db(st)
    st.set_defaults(df_func=cmd_storage)

    m = dsub.add_parser("memory", help="the largest mini-batch under a memory limit")
    config_flags(m)
    add_input_flags(m)
    m.add_argument("--start", type=args.positive_int, default=1, help="first batch tried")
    m.add_argument("--max-batch", type=args.positive_int, default=4096)
    args.add_limits(m)
    args.add_sweep_flags(m)
    args.add_db(m)
    m.set_defaults(df_func=cmd_memory)

    h = dsub.add_parser("h2d", help="host-to-device copies (pageable, pinned) and their "
                        "share of a step with and without overlap (needs a GPU)")
    config_flags(h, network_default="resnet50")
    h.add_argument("--samples", type=args.positive_int, default=256)
    args.add_limits(h)
    args.add_sweep_flags(h)
    args.add_db(h)
    h.set_defaults(df_func=cmd_h2d)

    c = dsub.add_parser("clear", help="remove the generated data sets")
    c.add_argument("--data-dir", help="folder of the generated data sets")
    c.set_defaults(df_func=cmd_clear)
    p.set_defaults(func=cmd_dataflow)


def cmd_dataflow(a: argparse.Namespace) -> int:
    return a.df_func(a)


# ----------------------------------------------------------------------------- sweep
def cmd_sweep(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.kinds.dataflow.plots import sweep_plot
    from dlperf.kinds.dataflow.section import sweep_table
    from dlperf.report.exporters import EXPORTERS, print_table

    values = values_of(a, loader_workers=None, prefetch=None)
    values = {k: v for k, v in values.items() if v is not None}
    if values.get("input", "disk") == "synthetic":
        raise UsageError("--input synthetic: the sweep trains on an input pipeline (memory "
                         "or disk); its synthetic-data floor is measured anyway")
    bases, cfg = base_specs(a)
    specs: list[RunSpec] = []
    for b in bases:
        specs += dplan.sweep(b, values, a.loader_workers, a.prefetch, cfg.memory_limit)
    results = run_specs(specs, cfg, a)
    if a.dry_run:
        return 0
    found = api.dataflow_groups({s.config_id for s in specs}, db=a.db)
    outdir = Path(a.out)
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out: cannot create {a.out}: {e.strerror}") from None
    for i, g in enumerate(found):
        t = sweep_table(g)
        print_table(t, out)
        for ex in EXPORTERS:
            (outdir / f"dataflow_{i + 1}.{ex.suffix}").write_text(ex.render(t))
        plot = sweep_plot(g, outdir / f"dataflow_{i + 1}.png")
        if plot:
            out.print(f"plot: {plot}")
    failed = [r for r in results if not r.ok]
    return 1 if results and len(failed) == len(results) else 0


# ----------------------------------------------------------------------------- loader
def cmd_loader(a: argparse.Namespace) -> int:
    params = args.parse_params(a.param)
    values = values_of(a)
    values.setdefault("input", "disk")
    bases, cfg = base_specs(a)
    opts, notes = dplan.resolve(values, a.network, a.size, params, bases[0].batch_size,
                                cfg.memory_limit)
    for n in notes:
        out.print(f"note: {escape(n)}")
    specs = [dplan.loader_spec(s) for s in dplan.with_options(bases, opts)]
    a.force = True  # like 'dlperf run': always measure
    results = run_specs(specs, cfg, a)
    for r in results:
        if r.ok:
            from dlperf.kinds.dataflow.analysis import dataflow_of

            o = dataflow_of(r)
            prep = f"; loader work {units.seconds(o.prep.total_s)} per batch" if o and o.prep else ""
            out.print(f"[bold]{escape(r.spec.label())}[/]: {r.metrics.samples_per_s:.4g} "
                      f"samples/s with no training ({units.seconds(r.metrics.median_s)} median "
                      f"per batch{prep})")
        else:
            out.print(f"[red]{escape(r.spec.label())}[/]: {r.failure.reason}: "
                      f"{escape(r.failure.message)}")
    return 0 if any(r.ok for r in results) else 1


# ----------------------------------------------------------------------------- clear
def cmd_clear(a: argparse.Namespace) -> int:
    use_data_dir(a)
    root, freed = datasets.clear()
    out.print(f"removed {root} ({units.nbytes(freed)})" if freed else f"nothing in {root}")
    return 0

