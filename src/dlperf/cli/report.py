"""``dlperf report``: tables and plots from the store; runs nothing."""

from __future__ import annotations

import argparse

from dlperf.cli import args
from dlperf.cli.progress import out


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="render tables and plots from the store (runs nothing)")
    p.add_argument("--out", default="dlperf-report", help="folder (default dlperf-report)")
    args.add_run_flags(p, network=args.LIST, framework=args.Take(many=True,
                                                                 help="comma-separated"))
    p.add_argument("--machines", default="all", help="all (default: every machine in the "
                   "store, side by side), this, or machine ids (the 8-character form the "
                   "tables show), comma-separated")
    p.add_argument("--html", action="store_true", help="print only the path of the HTML "
                   "report (report.html; report.md beside it)")
    args.add_db(p, reads_only=True)
    p.set_defaults(func=cmd_report)


def cmd_report(a: argparse.Namespace) -> int:
    from dlperf import api

    rep = api.report(db=a.db, out=a.out, networks=a.networks, frameworks=a.frameworks,
                     machines=a.machines)
    if a.html:  # the path alone, last, for 'xdg-open $(dlperf report --html)'
        print(rep.html)
        return 0
    print_report(rep)
    return 0


def print_report(rep) -> None:
    from dlperf.report.exporters import print_table

    if not rep.sections:
        out.print("the store holds no results yet: run 'dlperf sweep' or "
                  "'dlperf reproduce dlbench --quick'")
    for sec in rep.sections:
        for table in sec.tables[:sec.terminal]:
            print_table(table, out)
    out.print("wrote " + ", ".join(str(p.name) for p in rep.files) + f" in {rep.out_dir}")
