"""The Python API: the same operations as the command line, returning objects.

    import dlperf
    row = dlperf.run("fcn5", threads=2, batch_size=64)       # measured in fresh processes
    print(row.median_s, row.samples_per_s, row.peak_share)
    dlperf.sweep("sweep.toml")                               # resumable, stored
    dlperf.report(out="results/")                            # tables, plots, HTML
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlperf import backends, config, plan, workloads
from dlperf.dataflow import plan as dataflow_plan
from dlperf.dataflow.options import InputOptions
from dlperf.report import Filters, Report, render
from dlperf.report.analysis import Row, aggregate
from dlperf.runner import Listener, Runner
from dlperf.spec import Measurement, RunResult, RunSpec
from dlperf.store import Store


def run(
    network: str,
    *,
    framework: str = "torch",
    variant: str | None = None,
    device: str = "cpu",
    precision: str = "fp32",
    threads: int = 1,
    batch_size: int | None = None,
    size: str | None = None,
    params: dict[str, Any] | None = None,
    repeat: int = 1,
    seed: int = 0,
    measurement: Measurement | None = None,
    timeout_s: float = 1800.0,
    memory_limit: str | int | None = None,
    db: str | Path | None = None,
    listener: Listener | None = None,
    input: InputOptions | None = None,
) -> Row:
    """Measure one configuration in ``repeat`` fresh worker processes; store and return it.

    Unlike ``sweep``, ``run`` always measures (stored results of the same configuration are
    kept; the new ones are added beside them). With an ``input`` pipeline (memory or disk;
    ``dlperf.dataflow``), each step trains on its batches and the pipeline is also
    measured alone, with no training, in a process of its own.
    """
    wl = workloads.get(network)
    cfg = config.build(
        networks=[network], frameworks=[framework], variants=[variant or "default"],
        devices=[device], precisions=[precision], threads=[threads],
        batch_sizes=[wl.default_batch if batch_size is None else batch_size],
        size=size, params=params or {}, repeat=repeat, seed=seed, timeout=timeout_s,
        memory_limit=memory_limit, measurement=measurement or Measurement(),
    )
    backends.require(framework)
    specs = plan.expand(cfg)
    if input is not None:
        specs = dataflow_plan.with_loader(dataflow_plan.with_options(specs, input))
    with Store(db) as store:
        runner = Runner(store, timeout_s=cfg.timeout, memory_limit=cfg.memory_limit,
                        peak_size=cfg.peak_size, listener=listener or Listener())
        results = runner.run_all(specs)
    return aggregate(results)[0]


def sweep(
    source: str | Path | config.SweepConfig | dict[str, Any],
    *,
    db: str | Path | None = None,
    force: bool = False,
    retry_failed: bool = False,
    listener: Listener | None = None,
) -> list[RunResult]:
    """Run every configuration of a sweep not yet in the store; return the new results."""
    cfg = load_config(source)
    for fw in cfg.frameworks:
        backends.require(fw)
    with Store(db) as store:
        todo = plan.pending(plan.expand(cfg), store, force=force, retry_failed=retry_failed)
        runner = Runner(store, timeout_s=cfg.timeout, memory_limit=cfg.memory_limit,
                        peak_size=cfg.peak_size, listener=listener or Listener())
        return runner.run_all(todo, still_pending=None if force else (
            lambda s: bool(plan.pending([s], store, retry_failed=retry_failed))))


def load_config(source: str | Path | config.SweepConfig | dict[str, Any]) -> config.SweepConfig:
    if isinstance(source, config.SweepConfig):
        return source
    if isinstance(source, dict):
        return config.build(**source)
    return config.load_sweep_file(source)


def report(*, db: str | Path | None = None, out: str | Path = "dlperf-report",
           networks: list[str] | None = None, frameworks: list[str] | None = None) -> Report:
    """Render every report section from the store into ``out`` (runs nothing)."""
    with Store(db) as store:
        return render(store, out, Filters(tuple(networks or ()), tuple(frameworks or ())))


def networks(group: str | None = None) -> list[dict[str, Any]]:
    """Every workload with its parameter count and analytic FLOPs per step at its default
    batch size (the CLI adds the count from PyTorch's FLOP counter)."""
    out = []
    for wl in workloads.WORKLOADS.values():
        if group and wl.group != group:
            continue
        out.append({
            "name": wl.name, "group": wl.group, "family": wl.family, "task": wl.task,
            "description": wl.description, "sizes": list(wl.sizes),
            "default_size": wl.default_size, "default_batch": wl.default_batch,
            "params": wl.param_count(), "flops_per_step": wl.train_flops(wl.default_batch),
        })
    return out


def stored_rows(db: str | Path | None = None, kind: str = "step") -> list[Row]:
    with Store(db) as store:
        return aggregate(store.results(kind=kind))


__all__ = ["RunSpec", "load_config", "networks", "report", "run", "stored_rows", "sweep"]
