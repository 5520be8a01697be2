"""``dlperf status``: the Slurm jobs a store sent runs to, queued, running, done and failed,
each with its job id, partition, node and, for a failure, Slurm's reason."""

from __future__ import annotations

import argparse

from rich.markup import escape

from dlperf.cli import args
from dlperf.cli.progress import out


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="the Slurm jobs of a store: queued, running, done, failed")
    p.add_argument("--all", action="store_true", help="list every job (default: the open "
                   "and failed ones)")
    args.add_db(p, reads_only=True)
    p.set_defaults(func=cmd_status)


def cmd_status(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.engine.slurm.driver import counts

    jobs = api.cluster_jobs(db=a.db)
    if not jobs:
        out.print(f"no Slurm jobs recorded in {api.store_path(a.db)}")
        return 0
    c = counts(jobs)
    out.print("slurm: " + ", ".join(f"{n} {k}" for k, n in c.items()))
    for j in jobs:
        if not a.all and j.settled_at is not None and not j.failed:
            continue
        where = f"{j.partition or 'default'}{'/' + j.node if j.node else ''}"
        state = j.state if not (j.settled_at and j.failed and j.state == "COMPLETED") \
            else "RUN FAILED"
        line = f"  {j.job_id or '-':>10} {escape(where):18} {state:11} {escape(j.label)}"
        if j.reason and (j.failed or j.settled_at is None):
            line += f"  [dim]{escape(j.reason)}[/]"
        out.print(line)
    if c["failed"]:
        out.print("run the same sweep with --retry-failed to submit the failed ones again")
    return 0
