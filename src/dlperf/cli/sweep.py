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
    p.add_argument("--mode", choices=["train", "inference"],
                   help="train: time per mini-batch (default); inference: latency per query")
    args.add_run_flags(p, network=args.LIST, framework=args.LIST, variant=args.LIST,
                       device=args.LIST, precision=args.LIST, threads=args.LIST,
                       batch_size=args.LIST, size=True, param=True,
                       repeat=args.Take(default=None, help="worker processes per "
                                        "configuration (default 1)"))
    p.add_argument("--env", metavar="FRAMEWORK==VERSION", help="run that framework in the "
                   "environment 'dlperf setup FRAMEWORK==VERSION' made (another version of "
                   "it; its results are kept apart; dlperf compare sets them beside dlperf's "
                   "own, docs/compare.md)")
    args.add_limits(p)
    args.add_sweep_flags(p)
    args.add_executor(p)
    args.add_db(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("reproduce", help="reproduce a published study (dlbench)")
    p.add_argument("study", help="dlbench")
    p.add_argument("--brief", action="store_true", help="fcn5, alexnet and lstm32 at 1 and P "
                   "threads (P: physical cores), fcn5 at 2P too, with the quick settings: "
                   "about 5 minutes for three frameworks on 2 cores")
    p.add_argument("--quick", action="store_true", help="threads 1,2,4, default batches, one "
                   "process each: a few minutes")
    args.add_run_flags(
        p, framework=args.Take(many=True, help="comma-separated, or 'all' installed (default "
                               "torch)"),
        variant=args.LIST, threads=args.Take(many=True, help="override the thread counts"),
        size=args.Take(help="'tiny' for a smoke test of the whole pipeline"))
    p.add_argument("--out", default="results/dlbench", help="results folder (default results/dlbench)")
    args.add_limits(p)
    args.add_sweep_flags(p)
    args.add_executor(p)
    args.add_db(p)
    p.set_defaults(func=cmd_reproduce)


def cmd_sweep(a: argparse.Namespace) -> int:
    from dlperf.engine import config

    overrides: dict[str, Any] = dict(
        networks=a.networks, mode=a.mode, frameworks=a.frameworks, variants=a.variants,
        devices=a.devices, precisions=a.precision, threads=a.threads,
        batch_sizes=a.batch_size, size=a.size,
        params=args.parse_params(a.param) or None, repeat=a.repeat, timeout=a.timeout,
        memory_limit=a.memory_limit, env=a.env, executor=a.executor,
        slurm=args.slurm_values(a) or None,
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
    from dlperf.core import framework_table
    from dlperf.core.aggregate import aggregate
    from dlperf.engine import plan
    from dlperf.kinds.step.tables import detail_table
    from dlperf.report.exporters import print_table

    for fw in cfg.frameworks:
        framework_table.require(fw)
    specs = plan.expand(cfg)
    slurm = cfg.slurm_settings
    if slurm is None and args.slurm_values(a):
        raise UsageError(f"--{args.SLURM_FLAGS_SPELLING[next(iter(args.slurm_values(a)))]} "
                         "needs --executor slurm")
    if slurm is not None:
        api.check_slurm(slurm)
    planned = api.plan_runs(specs, db=a.db, force=a.force, retry_failed=a.retry_failed,
                            slurm=slurm)
    print_plan(title, planned, verb="submit to Slurm" if slurm else "measure",
               describe=(lambda s: f"{s.label()}  (repeat {s.repeat})") if a.dry_run else None)
    if a.dry_run:
        return 0
    with ProgressListener() as listener:
        api.sweep(cfg, db=a.db, force=a.force, retry_failed=a.retry_failed, listener=listener)
    # a cluster's results are the nodes' (each its own machine), not this machine's
    rows = aggregate(api.stored_results(specs, db=a.db, any_machine=slurm is not None))
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
    frameworks = presets.resolve_frameworks(a.frameworks or ["torch"])
    configs = presets.dlbench(quick=a.quick, brief=a.brief, frameworks=frameworks,
                              variants=a.variants or ["default"], threads=a.threads,
                              size=a.size, timeout=a.timeout, memory_limit=a.memory_limit)
    slurm = args.slurm_from(a)
    started = time.time()
    for name, cfg in configs:
        # timing flags given alongside change the preset's settings (shown as 'custom')
        cfg = cfg.model_copy(update={"measurement": args.measurement_from(a, cfg.measurement)})
        if slurm is not None:
            cfg = cfg.model_copy(update={"executor": "slurm", "slurm": slurm})
        sweep_and_print(cfg, a, title=name)
    out_dir = Path(a.out)
    rep = api.report(db=a.db, out=out_dir, networks=list(presets.DLBENCH_NETWORKS),
                     frameworks=frameworks, size=configs[0][1].size)
    print_report(rep)
    mode = " --brief" if a.brief else " --quick" if a.quick else ""
    out.print(f"reproduce dlbench{mode}: {time.time() - started:.0f} s; "
              f"results in [bold]{out_dir}/[/] (report.html, *.md, *.csv, *.png)")
    return 0
