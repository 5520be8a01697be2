"""Helpers shared by the ``dlperf dataflow`` subcommands: the configuration flags, the
synthetic specs they name, running specs through the runner like ``dlperf sweep``."""

from __future__ import annotations

import argparse
from typing import Any

from dlperf.cli import args
from dlperf.cli.dataflow_flags import given, use_data_dir
from dlperf.cli.progress import ProgressListener, out, print_plan
from dlperf.core.spec import RunResult, RunSpec
from dlperf.inputs import datasets
from dlperf.kinds.dataflow import plan as dplan


def config_flags(p: argparse.ArgumentParser, network_default: str | None = None) -> None:
    """The configuration a dataflow subcommand measures (the run group's flags)."""
    network = args.Take(default=network_default) if network_default else args.REQUIRED
    args.add_run_flags(p, network=network, framework=True, variant=True, device=True,
                       threads=True, batch_size=True, size=True, param=True, repeat=True)


def base_specs(a: argparse.Namespace, device: str | None = None,
               measurement: Any = None) -> tuple[list[RunSpec], Any]:
    """The synthetic step specs of the configuration the flags name (one per repeat);
    ``measurement``: the timing settings when no timing flag was given."""
    from dlperf import workloads
    from dlperf.core import framework_table
    from dlperf.engine import config, plan

    wl = workloads.get(a.network)
    cfg = config.build(networks=[a.network], frameworks=[a.framework],
                       variants=[a.variant or "default"], devices=[device or a.device],
                       threads=[a.threads], batch_sizes=[a.batch_size or wl.default_batch],
                       size=a.size, params=args.parse_params(a.param), repeat=a.repeat,
                       timeout=getattr(a, "timeout", None) or 1800.0,
                       memory_limit=getattr(a, "memory_limit", None),
                       measurement=args.measurement_from(a, measurement)
                       if hasattr(a, "min_time") else measurement)
    framework_table.require(a.framework)
    return plan.expand(cfg), cfg


def run_specs(specs: list[RunSpec], cfg: Any, a: argparse.Namespace,
              quiet: bool = False) -> list[RunResult]:
    """Run what the store lacks (all with --force) through ``api.run_specs``, like
    ``dlperf sweep`` (resumable), and return the newest stored result of each spec on this
    machine, in the specs' order."""
    from dlperf import api

    force, retry = getattr(a, "force", False), getattr(a, "retry_failed", False)
    dry = getattr(a, "dry_run", False)
    planned = api.plan_runs(specs, db=a.db, force=force, retry_failed=retry)
    if not quiet or dry:
        print_plan("dataflow", planned, describe=(lambda s: s.label()) if dry else None)
    if dry:
        return []
    _prepare(planned.todo)
    with ProgressListener() as listener:
        api.run_specs(specs, db=a.db, force=force, retry_failed=retry, timeout_s=cfg.timeout,
                      memory_limit=cfg.memory_limit, peak_size=cfg.peak_size,
                      listener=listener)
    latest = {r.spec.run_id: r for r in api.stored_results(specs, db=a.db)}
    return [latest[s.run_id] for s in specs if s.run_id in latest]


def _prepare(specs: list[RunSpec]) -> None:
    """Generate the data sets before the first worker starts (once per shape)."""
    def progress(name: str, done: int, total: int) -> None:
        out.print(f"  generating {name}: {done}/{total} samples", end="\r")

    made = dplan.prepare(specs, progress)
    if made:
        out.print(f"data sets in {datasets.root()}: {', '.join(made)}" + " " * 20)


def values(a: argparse.Namespace, **override: Any) -> dict[str, Any]:
    use_data_dir(a)
    return given(a, **override)
