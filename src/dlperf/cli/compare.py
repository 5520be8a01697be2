"""``dlperf compare A B``: is B faster or slower than A, configuration by configuration,
and is the difference real? Parsing and printing only (``dlperf.compare``).

    dlperf compare old.db new.db
    dlperf compare torch=2.12.0 torch=2.13.0 --fail-on-slowdown 5%
    dlperf compare machine=laptop machine=server --out cmp/
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dlperf.cli import args
from dlperf.cli.progress import out
from dlperf.core.errors import UsageError


def _fraction(text: str) -> float:
    """'5%' or '0.05' -> 0.05 (above 0, below 10 = 1000%)."""
    t = text.strip()
    if t.endswith("%"):
        return args.number(float, above=0, below=1000)(t[:-1]) / 100
    return args.number(float, above=0, below=10)(t)


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare", help="is B faster or slower than A? (two stores, result files or "
        "selections)", description="Match the configurations two sides have in common (the "
        "same network, framework, threads, batch, precision and settings; the machine or the "
        "software may differ) and judge each: faster, slower or no significant change, from "
        "a confidence interval over the worker processes of each side. A side is a store, a "
        "report's results.json, or a selection of the store --db names, as comma-separated "
        "items: PATH, machine=ID, since=DATE, until=DATE, PACKAGE=VERSION (torch=2.13.0).",
        epilog="exit status: 0, or 1 with --fail-on-slowdown when a configuration is "
        "significantly slower by more than the threshold; 2 on bad input")
    p.add_argument("a", metavar="A", help="the baseline side")
    p.add_argument("b", metavar="B", help="the side judged against it")
    p.add_argument("--method", choices=["welch", "bootstrap"], default="welch",
                   help="the interval: Welch's t on log per-process medians (default) or "
                   "Kalibera and Jones's hierarchical bootstrap")
    p.add_argument("--level", type=args.number(float, at_least=0.5, below=1), default=0.95,
                   help="confidence level (default 0.95)")
    p.add_argument("--threshold", type=_fraction, default=None, help="the smallest change "
                   "that matters (default 5%%, or --fail-on-slowdown's): where an interval is "
                   "wider, the output says how many processes would resolve it")
    p.add_argument("--fail-on-slowdown", type=_fraction, metavar="PCT", help="exit 1 when a "
                   "configuration is significantly slower by more than this (5%%, 0.05)")
    p.add_argument("--out", help="also write compare.md, .csv, .json and compare.png here")
    args.add_json(p, "print the comparison as JSON")
    args.add_db(p, reads_only=True)
    p.set_defaults(func=cmd_compare)


def cmd_compare(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.compare import output
    from dlperf.report.exporters import EXPORTERS, print_table

    threshold = a.threshold or a.fail_on_slowdown or 0.05
    outcome, side_a, side_b = api.compare(a.a, a.b, db=a.db, method=a.method, level=a.level,
                                          threshold=threshold)
    t = output.table(outcome, side_a, side_b)
    if a.json:
        print(json.dumps(output.to_json(outcome, side_a, side_b), indent=2))
    else:
        print_table(t)
    if a.out:
        folder = Path(a.out)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for e in EXPORTERS:
                (folder / f"compare.{e.suffix}").write_text(e.render(t))
            output.plot(outcome, folder / "compare.png")
        except OSError as e:
            raise UsageError(f"cannot write to {folder}: {e.strerror}") from None
        if not a.json:
            out.print(f"written to {folder}/ (compare.md, .csv, .json, .png)", style="dim")
    if a.fail_on_slowdown is not None:
        slow = outcome.slowdowns(a.fail_on_slowdown)
        if slow:
            worst = max(slow, key=lambda c: c.interval.ratio)
            print(f"dlperf: {len(slow)} configuration{'s' if len(slow) > 1 else ''} slower by "
                  f"more than {a.fail_on_slowdown:.0%} (worst: {worst.label}, "
                  f"{worst.interval.ratio:.3f}x)", file=sys.stderr)
            return 1
    return 0
