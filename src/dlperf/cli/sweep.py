"""``dlperf sweep`` (every combination, resumably) and ``dlperf reproduce dlbench``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from dlperf.cli import args
from dlperf.cli.progress import ProgressListener, out, print_plan
from dlperf.core.errors import UsageError


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="measure every combination, resumably")
    p.add_argument("file", nargs="?", help="TOML sweep file (flags override its values)")
    p.add_argument("--networks", help="comma-separated")
    p.add_argument("--mode", choices=["train", "inference"],
                   help="train: time per mini-batch (default); inference: latency per query")
    p.add_argument("--frameworks", help="comma-separated (default torch)")
    p.add_argument("--variants", help="comma-separated, 'default' or 'all'")
    p.add_argument("--devices", help="cpu,gpu")
    p.add_argument("--precision", help="comma-separated: " + args.PRECISION_HELP)
    p.add_argument("--threads", help="comma-separated or 'auto'")
    p.add_argument("--batch-size", help="comma-separated, 'default' or 'sweep'")
    p.add_argument("--size")
    p.add_argument("--param", action="append", metavar="NAME=VALUE")
    p.add_argument("--repeat", type=args.positive_int)
    args.add_limits(p)
    args.add_sweep_flags(p)
    args.add_db(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("reproduce", help="reproduce a published study (dlbench)")
    p.add_argument("study", help="dlbench")
    p.add_argument("--brief", action="store_true", help="fcn5, alexnet and lstm32 at 1, P "
                   "and 2P threads (P: physical cores) with the quick settings: about 6 "
                   "minutes for three frameworks on 2 cores")
    p.add_argument("--quick", action="store_true", help="threads 1,2,4, default batches, one "
                   "process each: a few minutes")
    p.add_argument("--frameworks", help="comma-separated, or 'all' installed (default torch)")
    p.add_argument("--variants", help="comma-separated, 'default' or 'all'")
    p.add_argument("--threads", help="override the thread counts")
    p.add_argument("--size", help="'tiny' for a smoke test of the whole pipeline")
    p.add_argument("--out", default="results/dlbench", help="results folder (default results/dlbench)")
    args.add_limits(p)
    args.add_sweep_flags(p)
    args.add_db(p)
    p.set_defaults(func=cmd_reproduce)


def cmd_sweep(a: argparse.Namespace) -> int:
    from dlperf.engine import config

    overrides: dict[str, Any] = dict(
        networks=args.str_list(a.networks), mode=a.mode, frameworks=args.str_list(a.frameworks),
        variants=args.str_list(a.variants), devices=args.str_list(a.devices),
        precisions=args.precision_arg(a.precision),
        threads=args.threads_arg(a.threads) if a.threads else None,
        batch_sizes=args.batch_arg(a.batch_size), size=a.size,
        params=args.parse_params(a.param) or None, repeat=a.repeat, timeout=a.timeout,
        memory_limit=a.memory_limit,
    )
    if a.file:
        cfg = config.load_sweep_file(a.file, **overrides)
    else:
        if not overrides["networks"]:
            raise UsageError("sweep needs --networks or a sweep file")
        cfg = config.build(**overrides)
    cfg = cfg.model_copy(update={"measurement": args.measurement_from(a, cfg.measurement)})
    return sweep_and_print(cfg, a, title="sweep")


def sweep_and_print(cfg, a: argparse.Namespace, title: str) -> int:
    """Plan the sweep against the store, run what is missing (or list it with --dry-run),
    then print this machine's results of the sweep's configurations."""
    from dlperf import api
    from dlperf.core import frameworks
    from dlperf.core.aggregate import aggregate
    from dlperf.engine import plan
    from dlperf.report.exporters import print_table
    from dlperf.report.tables import detail_table

    for fw in cfg.frameworks:
        frameworks.require(fw)
    specs = plan.expand(cfg)
    planned = api.plan_runs(specs, db=a.db, force=a.force, retry_failed=a.retry_failed)
    print_plan(title, planned, verb="measure",
               describe=(lambda s: f"{s.label()}  (repeat {s.repeat})") if a.dry_run else None)
    if a.dry_run:
        return 0
    with ProgressListener() as listener:
        api.sweep(cfg, db=a.db, force=a.force, retry_failed=a.retry_failed, listener=listener)
    rows = aggregate(api.stored_results(specs, db=a.db))
    if cfg.mode == "inference":
        from dlperf.kinds.inference.section import latency_table

        print_table(latency_table(rows), out)
    else:
        print_table(detail_table(rows, title=f"{title}: results"), out)
    return 0


def cmd_reproduce(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.cli.report import print_report
    from dlperf.engine import presets

    if a.study != "dlbench":
        raise UsageError(f"unknown study '{a.study}' (known: dlbench)")
    frameworks = presets.resolve_frameworks(args.str_list(a.frameworks) or ["torch"])
    variants = args.str_list(a.variants) or ["default"]
    configs = presets.dlbench(quick=a.quick, brief=a.brief, frameworks=frameworks,
                              variants=variants,
                              threads=args.threads_arg(a.threads) if a.threads else None,
                              size=a.size, timeout=a.timeout, memory_limit=a.memory_limit)
    started = time.time()
    for name, cfg in configs:
        # timing flags given alongside change the preset's settings (shown as 'custom')
        cfg = cfg.model_copy(update={"measurement": args.measurement_from(a, cfg.measurement)})
        sweep_and_print(cfg, a, title=name)
    out_dir = Path(a.out)
    rep = api.report(db=a.db, out=out_dir, networks=list(presets.DLBENCH_NETWORKS),
                     frameworks=frameworks, size=configs[0][1].size)
    print_report(rep)
    mode = " --brief" if a.brief else " --quick" if a.quick else ""
    out.print(f"reproduce dlbench{mode}: {time.time() - started:.0f} s; "
              f"results in [bold]{out_dir}/[/] (report.html, *.md, *.csv, *.png)")
    return 0
