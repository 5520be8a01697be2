"""``dlperf import FILE...``: merge results measured on other machines (their stores, or
the results.json of their reports) into this store, without duplicates. Parsing and
printing only; the merge lives in ``dlperf.core.store_import`` (``dlperf.api.import_results``).

    dlperf import server.db laptop/results.json
    dlperf report --machines all --html
"""

from __future__ import annotations

import argparse

from dlperf.cli import args
from dlperf.cli.progress import out


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="merge results of other machines (a dlperf store or "
                       "a report's results.json) into this store")
    p.add_argument("files", nargs="+", metavar="FILE")
    args.add_db(p)
    p.set_defaults(func=cmd_import)


def cmd_import(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.report.machines import describe
    from dlperf.report.tables import machine_label

    for f, got in api.import_results(a.files, db=a.db):
        total = sum(got.added.values())
        out.print(f"{f}: {total} result{'s' if total != 1 else ''} added, "
                  f"{sum(got.present.values())} already here")
        for mid in dict.fromkeys([*got.added, *got.present]):
            m = got.machines.get(mid)
            out.print(f"  machine {machine_label(mid)} ({describe(m) if m else 'unknown'}):"
                      f" {got.added.get(mid, 0)} added, {got.present.get(mid, 0)} already here")
        for why in dict.fromkeys(got.skipped):
            out.print(f"  [yellow]skipped[/] {got.skipped.count(why)}: {why}")
    path, count = api.store_size(a.db)
    out.print(f"store {path}: {count} results", style="dim")
    return 0

