"""``dlperf experiment``: the guide's network-choice experiments. Parsing and printing
only: the runs are planned in ``dlperf.kinds.train.experiments``, their tables built in
``dlperf.kinds.train.experiments_section``."""

from __future__ import annotations

import argparse
from pathlib import Path

from dlperf.cli import args
from dlperf.cli.progress import ProgressListener, out
from dlperf.core.errors import UsageError


# ----------------------------------------------------------------------------- experiment
def add(sub: argparse._SubParsersAction) -> None:
    from dlperf.kinds.train.experiments import NAMES

    p = sub.add_parser("experiment", help="run one of the guide's network-choice experiments")
    p.add_argument("name", help=f"{', '.join(NAMES)} or all")
    p.add_argument("--quick", action="store_true", help="fewer arms, 40%% of the budget")
    args.add_run_flags(p, threads=args.Take(help="threads of the training runs (the "
                                            "families table always measures 1 and 2)"),
                       seed=True)
    p.add_argument("--max-time", type=args.positive_float,
                   help="training-time budget per run, in s")
    args.add_timeout(p, help="seconds (above 0) per worker (default 900)")
    args.add_memory_limit(p, help="resident memory per worker, e.g. 2GiB; over it the run is "
                          "stored as 'oom' (default: none; input-size: 2GiB)")
    p.add_argument("--out", default="dlperf-report", help="folder for the table and plot "
                   "(default dlperf-report)")
    args.add_sweep_flags(p)
    args.add_executor(p)
    args.add_db(p)
    p.set_defaults(func=cmd_experiment)


def _describe(sp) -> str:
    """'ffn[small] torch/eager cpu x1 b32  side=512' or '...  ARM' (a train run's arm)."""
    arm = getattr(sp.options, "arm", None)
    params = " ".join(f"{k}={v}" for k, v in sp.params.items())
    return f"{sp.label()}  {arm or params}"


def cmd_experiment(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.cli.progress import print_plan
    from dlperf.engine.config import parse_bytes
    from dlperf.kinds.train import experiments
    from dlperf.report.exporters import print_table

    names = list(experiments.NAMES) if a.name == "all" else [a.name]
    s = experiments.Settings(quick=a.quick, threads=a.threads, max_time_s=a.max_time, seed=a.seed)
    if a.memory_limit:
        parse_bytes(a.memory_limit)  # a bad size is refused before anything runs
    todo_by = {n: experiments.specs(n, s) for n in names}  # validates the names
    out_dir = Path(a.out)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot write to {out_dir}: {e}") from None
    slurm = args.slurm_from(a)
    if slurm is not None:
        api.check_slurm(slurm)
    for name, specs in todo_by.items():
        planned = api.plan_runs(specs, db=a.db, force=a.force, retry_failed=a.retry_failed,
                                slurm=slurm)
        print_plan(f"experiment {name}", planned, verb="run",
                   describe=_describe if a.dry_run else None)
        if a.dry_run:
            continue
        memory = parse_bytes(a.memory_limit) if a.memory_limit else (
            experiments.INPUT_SIZE_MEMORY if name == experiments.INPUT_SIZE else None)
        with ProgressListener() as listener:
            api.run_specs(specs, db=a.db, force=a.force, retry_failed=a.retry_failed,
                          timeout_s=a.timeout or 900.0, memory_limit=memory,
                          listener=listener, slurm=slurm)
        sec, files = api.experiment_report(name, out_dir, db=a.db)
        if sec is None:
            out.print(f"  nothing stored for {name}")
            continue
        for t in sec.tables:
            print_table(t, out)
        out.print(f"wrote {', '.join(p.name for p in files)} in {out_dir}; 'dlperf report' "
                  "puts every experiment in one HTML page")
    return 0
