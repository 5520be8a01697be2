"""The Python API: the same operations as the command line, returning objects.

    import dlperf
    result = dlperf.run("fcn5", threads=2, batch_size=64)    # measured in fresh processes
    print(result.median_s, result.samples_per_s, result.peak_share)
    dlperf.sweep("sweep.toml")                               # resumable, stored
    dlperf.report(out="results/")                            # tables, plots, HTML
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlperf import workloads
from dlperf.core import environment, framework_table, separate_envs
from dlperf.core.aggregate import ConfigResult, aggregate
from dlperf.core.spec import Measurement, RunResult, RunSpec
from dlperf.core.store import Store, names_no_store
from dlperf.engine import config, plan
from dlperf.engine.runner import Listener, Runner
from dlperf.engine.slurm.settings import SlurmSettings
from dlperf.inputs.options import InputOptions
from dlperf.kinds import KINDS
from dlperf.kinds import report_sections as report_sections_of_kinds
from dlperf.kinds.dataflow import plan as dataflow_plan
from dlperf.kinds.explain.analysis import Explanation
from dlperf.kinds.peak import rates as peak
from dlperf.perfmodel.input_pipeline import LoaderCost
from dlperf.perfmodel.machine_fits import MachineFits
from dlperf.report import Filters, Predictor, Report, SectionBuilder, render

if TYPE_CHECKING:
    from dlperf.advice import Advice
    from dlperf.core.store_import import Imported
    from dlperf.kinds.calibrate.validate import Case, MemoryCase
    from dlperf.kinds.dataflow.section import Group
    from dlperf.perfmodel.fit import LocalFit
    from dlperf.perfmodel.result import Prediction


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
) -> ConfigResult:
    """Measure one configuration in ``repeat`` fresh worker processes; store and return it.

    Unlike ``sweep``, ``run`` always measures (stored results of the same configuration are
    kept; the new ones are added beside them). With an ``input`` pipeline (memory or disk;
    ``dlperf.kinds.dataflow``), each step trains on its batches and the pipeline is also
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
    specs = plan.expand(cfg)
    if input is not None:
        specs = dataflow_plan.with_loader(dataflow_plan.with_options(specs, input))
    results = run_specs(specs, db=db, force=True, timeout_s=cfg.timeout,
                        memory_limit=cfg.memory_limit, peak_size=cfg.peak_size,
                        listener=listener)
    return aggregate(results)[0]


def inference(
    network: str,
    *,
    batch_sizes: Sequence[int] = (1,),
    threads: Sequence[int] = (1,),
    framework: str = "torch",
    variant: str | None = None,
    device: str = "cpu",
    precision: str = "fp32",
    size: str | None = None,
    params: dict[str, Any] | None = None,
    repeat: int = 1,
    seed: int = 0,
    measurement: Measurement | None = None,
    timeout_s: float = 1800.0,
    memory_limit: str | int | None = None,
    db: str | Path | None = None,
    listener: Listener | None = None,
) -> list[ConfigResult]:
    """Latency per query (forward only, the framework's inference mode) at every batch
    size and thread count, each in fresh worker processes; stored and returned, one
    ConfigResult per (threads, batch). Like ``run``, it always measures."""
    cfg = config.build(
        networks=[network], mode="inference", frameworks=[framework],
        variants=[variant or "default"], devices=[device], precisions=[precision],
        threads=list(threads), batch_sizes=list(batch_sizes), size=size,
        params=params or {}, repeat=repeat, seed=seed, timeout=timeout_s,
        memory_limit=memory_limit, measurement=measurement or Measurement(),
    )
    results = run_specs(plan.expand(cfg), db=db, force=True, timeout_s=cfg.timeout,
                        memory_limit=cfg.memory_limit, listener=listener)
    return aggregate(results)


def sweep(
    source: str | Path | config.SweepConfig | dict[str, Any],
    *,
    db: str | Path | None = None,
    force: bool = False,
    retry_failed: bool = False,
    listener: Listener | None = None,
    slurm: SlurmSettings | None = None,
) -> list[RunResult]:
    """Run every configuration of a sweep not yet in the store; return the new results.
    With ``slurm`` (or the sweep file's ``[slurm]`` table and ``executor = "slurm"``), each
    runs as a Slurm job (``dlperf.engine.slurm``)."""
    cfg = load_config(source)
    for fw in cfg.frameworks:
        framework_table.require(fw)
    return run_specs(plan.expand(cfg), db=db, force=force, retry_failed=retry_failed,
                     timeout_s=cfg.timeout, memory_limit=cfg.memory_limit,
                     peak_size=cfg.peak_size, listener=listener,
                     slurm=slurm or cfg.slurm_settings)


@dataclass(frozen=True)
class Planned:
    """What a list of runs would do against a store: ``todo`` is what is not stored yet
    (all of it with ``force``)."""

    specs: list[RunSpec]
    todo: list[RunSpec]
    store_path: Path

    @property
    def stored(self) -> int:
        return len(self.specs) - len(self.todo)


def plan_runs(specs: Sequence[RunSpec], *, db: str | Path | None = None, force: bool = False,
              retry_failed: bool = False, slurm: SlurmSettings | None = None) -> Planned:
    """Which of ``specs`` the store already has (the resume rule; a dry run prints this).
    With ``slurm``: which (run, partition) pairs no job was submitted for yet."""
    with Store(db) as store:
        if slurm is not None:
            from dlperf.engine.slurm.driver import partitions_of, pending

            todo = [s for _, s in pending(store, specs, slurm, force=force,
                                          retry_failed=retry_failed)]
            return Planned(list(specs) * len(partitions_of(slurm)), todo, store.path)
        todo = plan.pending(list(specs), store, force=force, retry_failed=retry_failed)
        return Planned(list(specs), todo, store.path)


def run_specs(
    specs: Sequence[RunSpec],
    *,
    db: str | Path | None = None,
    force: bool = False,
    retry_failed: bool = False,
    timeout_s: float = 1800.0,
    memory_limit: int | None = None,
    peak_size: int = peak.DEFAULT_SIZE,
    torchrun: dict[str, Any] | None = None,
    listener: Listener | None = None,
    slurm: SlurmSettings | None = None,
) -> list[RunResult]:
    """The one place that runs a list of RunSpecs, whatever their kind: the frameworks
    checked, what the store has skipped (unless ``force``), each run claimed, launched
    (one worker, or a torchrun job for kind 'parallel'), stored as it finishes. Returns
    the new results; raises ``runner.Interrupted`` on Ctrl-C with what was stored.

    With ``slurm``, the runs go to a Slurm cluster instead (``engine.slurm.driver``): each
    group of them an array task on each partition, whose node runs them through this same
    runner; the store's record of jobs is the resume rule, and the results are merged
    here, with their machines, as the jobs end."""
    for fw in sorted({s.framework for s in specs if KINDS[s.kind].launcher != "in_process"}):
        framework_table.require(fw)
    if slurm is not None:
        from dlperf.engine.slurm.driver import SlurmDriver

        with Store(db) as store:
            return SlurmDriver(store, slurm, timeout_s=timeout_s, memory_limit=memory_limit,
                               peak_size=peak_size, torchrun=dict(torchrun or {}),
                               listener=listener or Listener()).run(
                                   specs, force=force, retry_failed=retry_failed)
    # here: each environment made, a GPU visible (a cluster's nodes have their own)
    for env in sorted({s.env for s in specs if s.env}):
        separate_envs.require(env)
    if any(s.device == "gpu" for s in specs):
        environment.require_gpu()
    with Store(db) as store:
        todo = plan.pending(list(specs), store, force=force, retry_failed=retry_failed)
        runner = Runner(store, timeout_s=timeout_s, memory_limit=memory_limit,
                        peak_size=peak_size, listener=listener or Listener(),
                        torchrun=dict(torchrun or {}))
        return runner.run_all(todo, still_pending=None if force else (
            lambda s: bool(plan.pending([s], store, retry_failed=retry_failed))))


def calibrate(frameworks: Sequence[str] | None = None, threads: Sequence[int] | None = None,
              *, db: str | Path | None = None, device: str = "cpu", fine: bool = False,
              allreduce: bool = True, force: bool = False, timeout_s: float = 900.0,
              listener: Listener | None = None, repeat: int = 1,
              precision: str = "fp32", slurm: SlurmSettings | None = None,
              scope: Sequence[tuple[str, int]] = (), skeleton: str = "all") -> MachineFits:
    """Time this machine's calibration kernels (``dlperf.kinds.calibrate.plan``: every installed
    framework at 1, 2, 4, ... threads up to the physical cores unless given, at
    ``precision``) through the normal runner, ``repeat`` times each (each kernel's median
    over them counts), and return the fitted calibration. A kernel run that failed is run
    again: a calibration is only usable whole. ``scope``: (network, batch) pairs whose
    layers' shapes to time instead of the whole grid (added to what is stored), beside a
    skeleton of the grid at every thread count (``skeleton='all'``), at the one the
    advice predicts other networks at ('cores': ``plan.skeleton_threads``), or there in
    the first framework alone ('once'); a scoped run whose shapes a stored run holds
    already is not run again (``plan.uncovered``)."""
    from dlperf.kinds.calibrate import plan as calibration
    from dlperf.kinds.calibrate import retime

    chosen = list(frameworks or calibration.default_frameworks())
    counts = list(threads or calibration.default_threads(device))
    todo = calibration.specs(chosen, counts, device=device, fine=fine, allreduce=allreduce,
                             repeat=repeat, precision=precision, scope=scope,
                             skeleton=skeleton)
    if not force:  # a stored run with more shapes (its skeleton) covers a scoped one
        with Store(db) as store:
            todo = calibration.uncovered(todo, store)
    run_specs(todo, db=db, force=force, retry_failed=True, timeout_s=timeout_s,
              listener=listener, slurm=slurm)
    # a shape far slower at more threads than at fewer, timed again once
    # (``perfmodel.thread_consistency``): what stays so is said with the quality; the ops
    # that runs at these thread counts timed at other speeds, timed again in one run each
    with Store(db) as store:
        again = retime.specs(store, chosen, device, precision, threads=counts)
    if again:
        run_specs(again, db=db, force=True, timeout_s=timeout_s, listener=listener,
                  slurm=slurm)
    return local_calibration(db=db, device=device)


def calibrate_dataflow(frameworks: Sequence[str], networks: Sequence[str] | None = None, *,
                       db: str | Path | None = None, force: bool = False,
                       listener: Listener | None = None) -> dict[tuple[str, str], LoaderCost]:
    """Time the loaders' cost per sample (``kinds.dataflow.calibration``: each framework's
    loader alone on each data shape and source the networks need, the DLBench networks
    when None) and return every calibrated cost, by (framework, data)."""
    from dlperf.kinds.dataflow import calibration

    run_specs(calibration.specs(frameworks, networks), db=db, force=force,
              retry_failed=True, timeout_s=600.0, listener=listener)
    return loader_costs(db=db)


def loader_costs(*, db: str | Path | None = None) -> dict[tuple[str, str], LoaderCost]:
    """This machine's calibrated loader costs per sample, by (framework, data)."""
    from dlperf.kinds.dataflow import calibration

    with Store(db) as store:
        return calibration.costs(store)


def lacking_shapes(network: str, batch_size: int | None, *, framework: str, threads: int,
                   device: str = "cpu", precision: str = "fp32",
                   db: str | Path | None = None, exact: bool = False) -> LocalFit | None:
    """The calibration of ``framework`` at ``threads`` when it was scoped to other networks
    than ``network`` at ``batch_size`` (its default when None): the one that a scoped run
    for it would add to; None when it covers them, or there is none to add to. ``exact``:
    also when it timed the whole grid but not those shapes themselves
    (``LocalFit.timed_exactly``: a pipeline's micro-batch)."""
    fit = local_calibration(db=db, device=device).find(framework, threads, device, precision)
    batch = batch_size or workloads.get(network).default_batch
    if fit is None:
        return None
    covered = fit.timed_exactly(network, batch) if exact else fit.covers(network, batch)
    return None if covered else fit


def local_calibration(*, db: str | Path | None = None, device: str = "cpu") -> MachineFits:
    """This machine's fitted kernel curves from the store (empty when never calibrated)."""
    from dlperf.kinds.calibrate import plan as calibration

    with Store(db) as store:
        return calibration.local_calibration(store, device=device)


def explain(network: str, *, framework: str = "torch", threads: int = 1,
            batch_size: int | None = None, size: str | None = None,
            params: dict[str, Any] | None = None, device: str = "cpu", steps: int = 5,
            measurement: Measurement | None = None, db: str | Path | None = None,
            listener: Listener | None = None, precision: str = "fp32") -> Explanation:
    """Profile ``network``'s training step with the framework's own profiler (a fresh run of
    kind 'profile', stored) and set each op group beside the model calibrated here at
    ``precision``. One-line UsageError when this machine has no calibration for the
    framework, thread count and precision, or the framework cannot be profiled."""
    from dlperf.core.errors import UsageError
    from dlperf.kinds.calibrate.plan import check_precision
    from dlperf.kinds.explain.analysis import explain as explained
    from dlperf.kinds.explain.options import ProfileOptions

    wl, size, _ = workloads.resolve(network, size, params)  # a bad name first, in one line
    fw = framework_table.info(framework).name
    if device == "gpu":
        environment.require_gpu("dlperf explain --device gpu")
    check_precision(precision, device, [fw])  # no calibration there to explain it against
    cal = local_calibration(db=db, device=device)
    cal.model(fw, threads, device, precision=precision)  # calibrated? (else: what to run)
    spec = RunSpec(kind="profile", network=wl.name, size=size, precision=precision,
                   framework=fw, device=device, threads=threads,
                   batch_size=batch_size or wl.default_batch, params=params or {},
                   options=ProfileOptions(steps=steps),
                   measurement=measurement or Measurement(min_time_s=1.0))
    (result,) = run_specs([spec], db=db, force=True, listener=listener)
    if not result.ok:
        assert result.failure is not None
        raise UsageError(f"{spec.label()} could not be profiled: {result.failure.reason}: "
                         f"{result.failure.message}")
    return explained(result, cal)


@dataclass(frozen=True)
class Peaks:
    """The machine's fp32 peak per thread count (and on the GPU), with the software that
    measured it."""

    by_threads: dict[int | str, peak.Peak]
    software: dict[str, Any]


def measure_peaks(threads: Sequence[int], *, gpu: bool = False, remeasure: bool = False,
                  peak_size: int = peak.DEFAULT_SIZE, db: str | Path | None = None,
                  listener: Listener | None = None) -> Peaks:
    """The peak at each thread count (past the CPUs: the all-CPU peak), reusing what the
    store has unless ``remeasure``; ``gpu`` adds the GPU's (key 'gpu')."""
    from dlperf.engine.runner import peak_threads

    counts = sorted({peak_threads(t) for t in threads})
    with Store(db) as store:
        runner = Runner(store, peak_size=peak_size, listener=listener or Listener())
        found: dict[int | str, peak.Peak] = {
            t: runner.ensure_peak(t, "cpu", remeasure=remeasure) for t in counts}
        if gpu:
            found["gpu"] = runner.ensure_peak(1, "gpu", remeasure=remeasure)
        latest = store.results(kind="peak", threads=counts[0], framework="torch", status="ok")
    return Peaks(found, latest[-1].software if latest else {})


def load_config(source: str | Path | config.SweepConfig | dict[str, Any]) -> config.SweepConfig:
    if isinstance(source, config.SweepConfig):
        return source
    if isinstance(source, dict):
        return config.build(**source)
    return config.load_sweep_file(source)


def report(*, db: str | Path | None = None, out: str | Path = "dlperf-report",
           networks: list[str] | None = None, frameworks: list[str] | None = None,
           size: str | None = None, machines: str | None = None,
           predictor: Predictor | None = None, predictions: bool = True) -> Report:
    """Render every report section from the store into ``out`` (runs nothing).
    ``machines``: 'all' (default), 'this' or machine ids, comma-separated; ``predictor``
    adds the model's time beside every measured cell (``report.tables.Predictor``); by
    default (``predictions``) the model calibrated on this machine, when the store holds
    its calibration (``dlperf calibrate``)."""
    from dlperf.kinds.calibrate import validate
    from dlperf.report.machines import resolve_machines

    with Store(db) as store:
        if predictor is None and predictions:
            predictor = validate.predictor(store)
        return render_report(store, out, Filters(
            tuple(networks or ()), tuple(frameworks or ()), size,
            machines=resolve_machines(store, machines)), predictor=predictor)


def report_sections(predictor: Predictor | None = None) -> list[SectionBuilder]:
    """Every section builder, in report order: this machine and the others, each kind's
    sections in the order of ``KINDS``, the advice, the failures. ``predictor`` (a
    performance model, see ``report.tables.Predictor``) adds predicted times beside the
    measured ones and a section comparing the two; without one neither appears."""
    from dlperf.advice.section import advice_section
    from dlperf.report.failures import failures_section
    from dlperf.report.machines import environment_section

    def advice_here(store: Store, out: Path, filters: Filters):
        # what 'dlperf advise' reads: the model (this report's), the validated errors
        return advice_section(store, out, filters,
                              inputs=advice_inputs(store, store.path, model=predictor))

    return [environment_section, *report_sections_of_kinds(predictor), advice_here,
            failures_section]


def render_report(store: Store, out: str | Path, filters: Filters | None = None,
                  predictor: Predictor | None = None) -> Report:
    """Every section with data, from ``store`` into ``out`` (``report.render``)."""
    return render(store, out, report_sections(predictor), filters or Filters())


def experiment_report(name: str, out: str | Path, db: str | Path | None = None):
    """The table(s) and plot of one experiment from the store, written into ``out`` in every
    export format: (section or None when nothing is stored, files written)."""
    from dlperf.kinds.train import experiments_section as report_experiments
    from dlperf.report.exporters import EXPORTERS

    out = Path(out)
    with Store(db) as store:
        sec = report_experiments.section(name, store, out)
    if sec is None:
        return None, []
    files = []
    for t in sec.tables:
        for ex in EXPORTERS:
            path = out / f"{sec.name}.{ex.suffix}"
            path.write_text(ex.render(t))
            files.append(path)
    return sec, files + list(sec.images)


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


def counted_flops(names: list[str]) -> dict[str, float]:
    """FLOPs per step at the default batch from PyTorch's own counter (in a child process,
    cached); empty without torch."""
    if not framework_table.installed("torch"):
        return {}
    from dlperf.engine.flopcache import counted_flops as count

    return count(names)


def other_framework_rates(spec: RunSpec, db: str | Path | None = None) -> dict[str, float]:
    """FLOP/s of the same configuration in the other frameworks measured on this machine
    (for the limit message of ``dlperf run``)."""
    from dlperf.core.aggregate import other_framework_rates as rates

    with Store(db) as store:
        return rates(store, spec)


def stored_results(specs: Sequence[RunSpec], db: str | Path | None = None, *,
                   any_machine: bool = False) -> list[RunResult]:
    """This machine's stored results (newest per run) of these specs, whatever their kind;
    with ``any_machine``, every machine's (a cluster's nodes)."""
    from dlperf.core.environment import machine_id

    ids = {s.run_id for s in specs}
    with Store(db) as store:
        found = store.results(kind=None, machine_id=None if any_machine else machine_id(),
                              network=sorted({s.network for s in specs}))
    return [r for r in found if r.spec.run_id in ids]


def stored_rows(db: str | Path | None = None, kind: str = "step") -> list[ConfigResult]:
    with Store(db) as store:
        return aggregate(store.results(kind=kind))


__all__ = ["ConfigResult", "Planned", "RunSpec", "inference", "load_config", "measure_peaks",
           "networks", "plan_runs", "report", "run", "run_specs", "stored_rows", "sweep"]


# ---- reading and writing the store for the command line
def store_path(db: str | Path | None = None) -> Path:
    """The path of the results store ``db`` names (None: $DLPERF_DB, else the user's)."""
    from dlperf.core.store import resolve_path

    return resolve_path(db)


def store_size(db: str | Path | None = None) -> tuple[Path, int]:
    """The store's path and the number of results it holds."""
    with Store(db) as store:
        return store.path, store.count()


def import_results(files: Sequence[str | Path], db: str | Path | None = None
                   ) -> Iterator[tuple[str | Path, Imported]]:
    """Merge each file (a dlperf store or a report's results.json) into the store, without
    duplicates; yields each file with what its import did, as it is done. A bad file is
    one UsageError line naming it (the files before it stay imported)."""
    from dlperf.core.store_import import import_file

    with Store(db) as store:
        for f in files:
            yield f, import_file(store, f)


def compare(a: str, b: str, *, db: str | Path | None = None, method: str = "welch",
            level: float = 0.95, threshold: float = 0.05):
    """B against A (``dlperf.compare``): each a side ('old.db', 'torch=2.13.0',
    'results.json,machine=abc'); a side without a file reads the store ``db`` names.
    Returns (outcome, side A, side B); bad input is one UsageError line."""
    from dlperf.compare import sides, verdicts

    la, lb = sides.load_pair(*(sides.parse(s, store_path(db)) for s in (a, b)))
    return verdicts.compare(la, lb, method=method, level=level, threshold=threshold), la, lb


def advise(task: str, *, samples: int | str, epochs: float = 1.0, hardware: str = "this",
           db: str | Path | None = None) -> Advice:
    """The advice for ``task`` (``dlperf.advice.advise``) from the rows this machine has
    stored and the model. Bad input is one UsageError line, found before the store opens;
    a ``db`` with no store behind it is read as an empty store, and no file is made."""
    from dlperf.advice import advise as advice_for
    from dlperf.advice.hardware import parse_hardware, parse_samples
    from dlperf.advice.tasks import task as known_task

    known_task(task)
    if isinstance(samples, str):
        samples = parse_samples(samples)
    parse_hardware(hardware)
    from dlperf.kinds.calibrate import validate

    # advice needs no store (a catalogue device's, or a new machine's, says what to run)
    # and only reads one: a ``db`` with no store behind it is read as an empty store made
    # aside and removed, so that a mistyped path leaves no file behind
    with tempfile.TemporaryDirectory(prefix="advise-empty-") as empty:
        if names_no_store(db):
            db = Path(empty) / "results.db"
        with Store(db) as store:
            inputs = advice_inputs(store, db, model=validate.predictor(store))
    return advice_for(task, samples=samples, epochs=epochs, hardware=hardware, **inputs)


def advice_inputs(store: Store, db: str | Path | None, *, model: Any = None
                  ) -> dict[str, Any]:
    """What advice reads beside the task (``dlperf.advice.advise``'s keywords): this
    machine's rows, the calibrated ``model`` (None: never calibrated), the memory model's
    validated error over this machine's CPU steps (per framework, ``memory_margins``), the
    published GPU memory error, the catalogue's time error (``report.published_time``,
    computed only when catalogue hardware is advised on), the input-pipeline model and each
    framework's calibrated runtime memory on this CPU; ``db`` is ``store``'s path, for the
    loader validation that opens it."""
    from dlperf.advice.section import rows_here
    from dlperf.kinds.calibrate import validate
    from dlperf.kinds.calibrate.plan import runtime_baselines
    from dlperf.perfmodel.machine_fits import runtime_baseline
    from dlperf.report.published_memory import gpu_memory_error
    from dlperf.report.published_time import catalogue_error

    # the runtimes read once (every kernel run's samples), for the validation and the advice
    runtimes = runtime_baselines(store)
    # this machine's memory: its CPU steps' resident peaks (a GPU's steps are its own)
    memory_error = validate.device_margins(store, "cpu", runtimes)
    # per framework the least runtime its training took here (the batch advice is per
    # network, the runtime a framework's; ``runtime_baseline``)
    baselines = {fw: b for fw in {key[0] for key in runtimes if key[1] == "cpu"}
                 if (b := runtime_baseline(fw, "cpu", None, runtimes)) is not None}
    return dict(rows=rows_here(store), memory_error=memory_error,
                gpu_memory_error=gpu_memory_error(), model=model, loader=_loader_model(db),
                baselines=baselines, errors=catalogue_error)


def _loader_model(db: str | Path | None):
    """The input-pipeline model for advice (``advice.data.LoaderModel``): this machine's
    loader costs beside a measured step, and the model's validated stall error on the
    measured floor where this machine has stalled pipelines (``dataflow_validation``)."""
    from dlperf.kinds.dataflow.prediction import pipeline_advice

    costs = loader_costs(db=db)
    if not costs:
        return None
    cases, _ = dataflow_validation(db=db)
    floor = [abs(c.floor_points) for c in cases if c.stalled and c.floor_points is not None]
    validated = (f"+-{statistics.median(floor):.1f} points of stall share (median over "
                 f"{len(floor)} stalled steps here)" if floor else "")
    cores = len(environment.usable_cpus())

    def advise(row: ConfigResult):
        s = row.spec
        return pipeline_advice(s.network, s.size, s.params, s.framework, s.batch_size,
                               s.threads, row.median_s, costs, cores) if row.median_s else None

    return advise, validated


def fastest_rate(network: str, db: str | Path | None = None) -> tuple[float, str] | None:
    """The fastest training rate of ``network`` (its default size) measured on this
    machine, in samples/s, with the label of the configuration that reached it; None
    when the store has none."""
    from dlperf.core.environment import machine_id

    with Store(db) as store:
        rows = [r for r in aggregate(store.results(
            kind="step", status="ok", network=network, machine_id=machine_id(),
            size=workloads.get(network).default_size)) if r.samples_per_s]
    best = max(rows, key=lambda r: r.samples_per_s or 0.0, default=None)
    return None if best is None else (best.samples_per_s or 0.0, best.spec.label())


def dataflow_groups(config_ids: Collection[str], db: str | Path | None = None) -> list[Group]:
    """This machine's data-flow sweep groups (``kinds.dataflow.section.groups``) that hold
    a configuration of ``config_ids``, each with those configurations' points only."""
    from dlperf.core.environment import machine_id
    from dlperf.kinds.dataflow.section import groups

    here = machine_id()
    with Store(db) as store:
        found = [g for g in groups(store) if g.machine_id == here]
    for g in found:
        g.points = [p for p in g.points if p.step.spec.config_id in config_ids]
    return [g for g in found if g.points]


def predict_here(network: str, *, db: str | Path | None = None, **kw: Any
                 ) -> tuple[Prediction, float | None]:
    """The model's prediction on this machine's cpu or gpu from its calibration, and the
    stored median time of the same configuration (None when not measured); ``kw``: as
    ``kinds.calibrate.validate.predict_here`` (device, framework, threads, strategy, ...)."""
    p, row = predict_here_row(network, db=db, **kw)
    return p, row.median_s if row else None


def predict_here_row(network: str, *, db: str | Path | None = None, **kw: Any
                     ) -> tuple[Prediction, ConfigResult | None]:
    """``predict_here`` with the stored configuration itself (its processes, its
    input pipeline's measured stall) instead of its median time."""
    from dlperf.core import framework_table
    from dlperf.kinds.calibrate import trust, validate
    from dlperf.kinds.calibrate.plan import local_calibration as plan_calibration

    device = kw.get("device") or "cpu"
    with Store(db) as store:
        cal = plan_calibration(store, device=device)  # loaded once, for both
        p, row = validate.predict_here(store, network, calibration=cal, **kw)
        fw = framework_table.info(kw.get("framework") or "torch").name
        return trust.with_time_error(store, cal, p, framework=fw, device=device,
                                     threads=kw.get("threads") or 1,
                                     params=kw.get("params")), row


def validation(mode: str, *, kinds: Sequence[str] = ("step", "parallel"),
               catalogue: str | None = None, machine: str | None = None,
               networks: Sequence[str] = (), frameworks: Sequence[str] = (),
               db: str | Path | None = None) -> tuple[list[Case], list[tuple[ConfigResult, str]]]:
    """The model against what the store has measured (``kinds.calibrate.validate
    .validation``): the cases and the rows left out with the reason. ``machine``, with
    ``catalogue``: whose measurements (None: this machine's, 'all', or one machine id,
    the short form is enough)."""
    from dlperf.kinds.calibrate import validate

    with Store(db) as store:
        mid = _one_machine(store, machine) if catalogue else None
        return validate.validation(store, mode, kinds=kinds, catalogue=catalogue,
                                   machine_id=mid, networks=networks, frameworks=frameworks)


def dataflow_validation(*, db: str | Path | None = None, networks: Sequence[str] = (),
                        frameworks: Sequence[str] = ()) -> tuple[list, list]:
    """Every step measured here on an input pipeline with the model's stall beside its
    measured one (``kinds.dataflow.validate.cases``), and the steps left out."""
    from dlperf.kinds.calibrate.plan import local_calibration
    from dlperf.kinds.dataflow import validate

    with Store(db) as store:
        return validate.cases(store, local_calibration(store), networks=networks,
                              frameworks=frameworks)


def _one_machine(store: Store, given: str | None) -> str | None:
    """--machine: None (this machine), 'all', or the one machine id ``given`` starts."""
    from dlperf.core.errors import UsageError
    from dlperf.report.machines import resolve_machines

    if given in (None, "all"):
        return given
    try:
        ids = resolve_machines(store, given)
    except UsageError as e:
        raise UsageError(str(e).replace("--machines:", "--machine:", 1)) from None
    if len(ids) != 1:
        raise UsageError(f"--machine takes one machine, got '{given}'")
    return ids[0]


def memory_validation(db: str | Path | None = None, *, networks: Sequence[str] = (),
                      frameworks: Sequence[str] = ()
                      ) -> tuple[list[MemoryCase], list[tuple[ConfigResult, str]]]:
    """Every step measured on this machine (of ``networks`` and ``frameworks``, all when
    empty) with the memory model's peak beside its measured one
    (``kinds.calibrate.validate.memory_cases``), and the steps left out."""
    from dlperf.kinds.calibrate import validate
    from dlperf.kinds.calibrate.plan import runtime_memory, worker_runtimes

    with Store(db) as store:
        baselines, files = runtime_memory(store)
        return validate.memory_cases(store, baselines, networks=networks,
                                     frameworks=frameworks, workers=worker_runtimes(store),
                                     files=files)


def check_slurm(settings: SlurmSettings) -> None:
    """Slurm's commands on the PATH, its controller answering, the partitions known: else
    one UsageError line (before anything is planned or submitted)."""
    from dlperf.engine.slurm.commands import check

    check(settings)


def cluster_jobs(db: str | Path | None = None, *, live: bool = True) -> list[Any]:
    """The Slurm jobs the store sent runs to (``core.store_jobs.ClusterJob``), those still
    open with their state as Slurm says it now (``live``, when Slurm answers; nothing is
    imported: the sweep's driver does that)."""
    from dlperf.engine.slurm.driver import live_states

    with Store(db) as store:
        jobs = store.jobs()
    return live_states(jobs) if live else jobs
