"""``dlperf run``: measure one configuration and print it at a glance."""

from __future__ import annotations

import argparse
import json

from rich.markup import escape

from dlperf.cli import args
from dlperf.cli.dataflow_flags import add_input_flags, input_for_run
from dlperf.cli.progress import ProgressListener, console, out
from dlperf.core import units
from dlperf.core.environment import DEFAULT_ALLOCATOR
from dlperf.core.errors import UsageError


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="measure one configuration (or inference queries)")
    p.add_argument("--mode", default="train", choices=["train", "inference"],
                   help="train: time per mini-batch (default); inference: latency per query, "
                   "forward only in the framework's inference mode (then --batch-size and "
                   "--threads take comma-separated lists)")
    args.add_run_flags(
        p, network=args.REQUIRED, framework=True, variant=True, device=True, precision=True,
        threads=args.Take(many=True, default=[1], help="threads (default 1)"),
        batch_size=args.Take(many=True, help="default: the network's DLBench default"),
        size=True, param=True, repeat=True, seed=True)
    args.add_json(p)
    args.add_limits(p)
    add_input_flags(p)  # --input, --loader-workers, ... (docs/dataflow.md)
    args.add_db(p)
    p.set_defaults(func=cmd_run)


def _one(values: list[int] | str | None, flag: str, many: bool) -> list[int] | None:
    """A list of counts as parsed (or 'default'); one value unless in inference mode."""
    if values == "sweep":
        raise UsageError(f"{flag} sweep: only 'dlperf sweep' sweeps the batch sizes")
    if values is None or values == "default":
        return None
    assert isinstance(values, list)
    if len(values) > 1 and not many:
        raise UsageError(f"{flag} takes one value in train mode (lists: --mode inference, "
                         "or 'dlperf sweep')")
    return values


def cmd_run(a: argparse.Namespace) -> int:
    from dlperf import api

    m = args.measurement_from(a)
    many = a.mode == "inference"
    threads = _one(a.threads, "--threads", many) or [1]
    batches = _one(a.batch_size, "--batch-size", many)
    params = args.parse_params(a.param)
    inp, notes = input_for_run(a, params, batches[0] if batches else None)
    if many:
        return cmd_inference(a, m, threads, batches)
    for note in notes:
        console(a.json).print(f"note: {escape(note)}")
    with ProgressListener(to_stderr=a.json) as listener:
        row = api.run(a.network, framework=a.framework, variant=a.variant, device=a.device,
                      precision=a.precision, threads=threads[0],
                      batch_size=batches[0] if batches else None,
                      size=a.size, params=params, repeat=a.repeat,
                      seed=a.seed, measurement=m,
                      timeout_s=1800.0 if a.timeout is None else a.timeout,
                      memory_limit=a.memory_limit, db=a.db, listener=listener, input=inp)
    if a.json:
        print(json.dumps([r.model_dump() for r in row.results], default=str))
        return 0 if row.measured else 1
    print_run(row, a.db)
    return 0 if row.measured else 1


def cmd_inference(a: argparse.Namespace, m, threads: list[int], batches: list[int] | None) -> int:
    from dlperf import api, workloads
    from dlperf.kinds.inference.section import finding, latency_table
    from dlperf.report.exporters import print_table

    with ProgressListener(to_stderr=a.json) as listener:
        rows = api.inference(
            a.network, batch_sizes=batches or [workloads.get(a.network).default_batch],
            threads=threads, framework=a.framework, variant=a.variant, device=a.device,
            precision=a.precision, size=a.size, params=args.parse_params(a.param),
            repeat=a.repeat, seed=a.seed, measurement=m,
            timeout_s=1800.0 if a.timeout is None else a.timeout,
            memory_limit=a.memory_limit, db=a.db, listener=listener)
    if a.json:
        print(json.dumps([r.model_dump() for row in rows for r in row.results], default=str))
    else:
        print_table(latency_table(rows), out)
        if text := finding(rows):
            out.print(escape(text))
    return 0 if all(row.measured for row in rows) else 1


def print_run(row, db) -> None:
    from dlperf import api

    s = row.spec
    out.print(f"[bold]{escape(s.label())}[/]  ({row.processes} process{'es' if row.processes != 1 else ''})")
    if not row.measured:
        out.print(f"  [red]not measured[/]: {row.failure}")
        return
    r0 = row.ok[0]
    m = r0.metrics
    steps = sum(r.metrics.steps for r in row.ok)
    out.print(f"  time per mini-batch  {units.seconds(row.median_s)}  +- {units.seconds(row.mad_s)} MAD"
              f"  (IQR {units.seconds(m.iqr_s)}, CV {units.percent(row.within_cv)}, "
              f"min {units.seconds(m.min_s)}, max {units.seconds(m.max_s)}; {steps} timed steps "
              f"after {m.warmup_steps} warm-up)")
    if row.between_cv is not None:
        out.print(f"  between processes    CV {units.percent(row.between_cv)} of the per-process medians")
    out.print(f"  samples/s            {row.samples_per_s:.4g}")
    if row.achieved_flops:
        out.print(f"  achieved             {units.flops(row.achieved_flops, '/s')} "
                  f"({units.flops(row.flops_per_step)}/step)")
        for line in peak_lines(row, db):
            out.print(escape(line))
    if row.utilisation_peak:
        out.print(escape(utilisation_line(row)))
    # the libraries' files are part of the peak, and more of them are resident right after
    # an install than later (docs/measurement.md, 'Files' pages')
    files = f"; the libraries' files {units.nbytes(row.file_rss_bytes)}" \
        if row.file_rss_bytes else ""
    out.print(f"  peak memory          {units.nbytes(row.peak_rss_bytes)} resident"
              f" (model, data and activations {units.nbytes(m.model_rss_bytes)}{files})"
              + (f"; device {units.nbytes(m.device_peak_bytes)}" if m.device_peak_bytes else ""))
    busy = f" (CPU busy {row.cpu_util:.2f} cores)" if row.cpu_util is not None else ""
    out.print(f"  threads in force     {r0.threads_in_force} on CPUs {r0.cpus}{busy}")
    if (faults := faults_line(row)) is not None:
        out.print(escape(faults))
    if (allocators := row.allocators) and allocators != [DEFAULT_ALLOCATOR]:
        out.print(escape(f"  memory allocator     {' | '.join(allocators)}"))
    from dlperf.kinds.dataflow.section import dataflow_lines

    for line in dataflow_lines(row, db):  # stall, preparation, loader alone
        out.print(escape(line))
    for w in row.warnings:
        out.print(f"  [yellow]warning[/]: {escape(w)}")
    out.print(f"  stored in {api.store_path(db)}", style="dim")


def faults_line(row) -> str | None:
    """The new pages the timed steps touched (minor page faults, at the base page size)
    and the kernel's CPU time per step, as a share of the step; None where not measured
    (an older dlperf's run)."""
    faults, system = row.minor_faults_per_step, row.system_s_per_step
    if faults is None or system is None or not row.median_s:
        return None
    pages = units.nbytes(row.new_page_bytes_per_step)
    return (f"  new pages per step   {faults:,.0f} minor faults ({pages}); the kernel's CPU "
            f"time {units.seconds(system)}, {units.percent(system / row.median_s)} of the step")


def utilisation_line(row) -> str:
    """MFU and HFU, and the peak they divide by (or why it is unknown)."""
    if row.mfu is None:
        return f"  MFU                  {row.utilisation_peak}"
    hfu = f", HFU {units.percent(row.hfu)}" if row.hfu is not None else ""
    return (f"  MFU                  {units.percent(row.mfu)}{hfu} of {row.utilisation_peak}")


def peak_lines(row, db) -> list[str]:
    """The share of peak of a measured row, against the best measured rate and the
    theoretical one, and what limits it (``dlperf.kinds.peak.rates.limit_message``)."""
    from dlperf import api
    from dlperf.kinds.peak import rates as peak

    prov = row.peak_provenance
    if prov is None:
        return []
    pk, s, achieved = prov, row.spec, row.achieved_flops
    best = pk.best
    if best is None or not best.flops:
        return []
    where = f"{pk.threads} thread{'s' if pk.threads != 1 else ''}" if pk.device == "cpu" else "GPU"
    if pk.device == "cpu" and pk.threads < s.threads:
        where += f" (all CPUs; {s.threads} threads oversubscribe them)"
    share = (f"  share of peak        {units.percent(row.peak_share)} of {units.flops(best.flops, '/s')},"
             f" this machine's best measured rate at {where} ({best.source})")
    if pk.theoretical_flops:
        theory = units.flops(pk.theoretical_flops, "/s")
        share += (f"; {units.percent(achieved / pk.theoretical_flops)} of the theoretical {theory}"
                  if achieved <= pk.theoretical_flops else
                  f"; above the theoretical {theory}: the clock, the cores in use or the "
                  "FLOP count differ from what dlperf assumes")
    elif pk.device == "cpu":
        share += f"; theoretical peak {pk.theoretical}"
    others = api.other_framework_rates(s, db=db)
    limit = peak.limit_message(s.label(), s.network, s.framework, achieved, pk, others)
    return [share, f"  limit                {limit}"]
