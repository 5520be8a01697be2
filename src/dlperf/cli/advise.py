"""``dlperf advise``: advice for a task, a data size and some hardware, from the store and
the performance model. Parsing and printing only; the advice lives in ``dlperf.advice``.

    dlperf advise --task image-classification --samples 1.2M --epochs 90 --hardware this
    dlperf advise --task sequences --samples 500k --epochs 20 --hardware this,a100-40gb:8
"""

from __future__ import annotations

import argparse

from dlperf.cli import args
from dlperf.cli.progress import err, out


def add(sub: argparse._SubParsersAction) -> None:
    from dlperf.advice import TASKS

    p = sub.add_parser("advise", help="which network, framework, threads, devices and "
                       "strategy for a task, each with its number and its source")
    p.add_argument("--task", required=True, help=", ".join(TASKS))
    p.add_argument("--samples", required=True, help="training samples, e.g. 60000, 50k, 1.2M")
    p.add_argument("--epochs", type=args.positive_float, default=1.0, help="passes over the "
                   "data (default 1)")
    p.add_argument("--hardware", default="this", help="'this' (default), a catalogue device "
                   "with a count ('a100-40gb:8'; see 'dlperf devices'), or several, "
                   "comma-separated, to compare")
    args.add_json(p, help="print the recommendations as JSON")
    args.add_db(p)
    p.set_defaults(func=cmd_advise)


def cmd_advise(a: argparse.Namespace) -> int:
    import dataclasses
    import json

    from dlperf import api
    from dlperf.advice.section import comparison_table
    from dlperf.core import store
    from dlperf.report.exporters import print_table

    adv = api.advise(a.task, samples=a.samples, epochs=a.epochs, hardware=a.hardware, db=a.db)
    if store.names_no_store(a.db):  # read as an empty store (api.advise)
        err.print(f"advise: no results store at {a.db}: nothing measured here is used "
                  "('dlperf run', 'sweep' and 'calibrate' make one)", soft_wrap=True, markup=False)
    if a.json:  # each source with its kind (measured, predicted, unknown) and in words
        data = dataclasses.asdict(adv)
        for h, hd in zip(adv.hardware, data["hardware"], strict=True):
            for r, rd in zip(h.recommendations, hd["recommendations"], strict=True):
                rd["source"] = {"kind": r.kind, **rd["source"], "text": r.source.describe()}
        print(json.dumps(data, indent=1, default=str))
        return 0
    print(f"{adv.task}: {adv.samples:,} samples x {adv.epochs:g} epochs")
    comparison = comparison_table(adv)
    if comparison:
        print_table(comparison, out)
    for h in adv.hardware:
        print_advice(h)
    return 0


def print_advice(h) -> None:
    """One hardware's advice by topic, each recommendation on a line of its own and its
    number and source on the next (plain lines: commands stay whole for copying)."""
    from dlperf.advice.section import TOPICS, number

    print(f"\nAdvice for {h.hardware}" + (f" ({'; '.join(h.notes)})" if h.notes else ""))
    for topic, title in TOPICS.items():
        recs = h.of(topic)
        if recs:
            print(f"  {title}")
        for r in recs:
            print(f"    - {r.advice}")
            print(f"        {number(r)}; {r.source.describe()}")

