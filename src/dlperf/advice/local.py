"""Advice for this machine, from what the store measured on it.

Every number is a measured one (with its dispersion) except the largest batch where no
run ran out of memory, which is the model's memory estimate against this machine's
memory. What was not measured becomes the command that measures it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping

from dlperf import workloads
from dlperf.advice import common
from dlperf.advice.data import LoaderModel, data_advice
from dlperf.advice.records import HardwareAdvice, Measured, Predicted, Recommendation, Unknown
from dlperf.advice.tasks import Task
from dlperf.core import environment, units
from dlperf.core.aggregate import ConfigResult, direction
from dlperf.core.errors import UsageError
from dlperf.core.settings import settings_name
from dlperf.core.spec import RunSpec
from dlperf.kinds.calibrate.plan import halving_threads
from dlperf.kinds.dataflow.plan import has_pipeline
from dlperf.perfmodel.fit import allocates_per_tensor
from dlperf.perfmodel.predict import training_memory


def dispersion(r: ConfigResult) -> str:
    steps = sum(x.metrics.steps for x in r.ok if x.metrics)
    cv = units.percent(r.within_cv)
    procs = f" in {r.processes} processes" if r.processes > 1 else ""
    return (f"+-{units.seconds(r.mad_s)} MAD, CV {cv} over {steps} timed steps{procs} "
            f"({settings_name(r.spec.measurement)} settings)")


def measured(r: ConfigResult) -> Measured:
    return Measured(configuration=r.spec.label(), dispersion=dispersion(r))


#: this machine's calibrated model, as the report's predictor takes it: a configuration
#: -> (predicted seconds per mini-batch, validated relative error or None), or None where
#: the calibration cannot predict it
LocalModel = Callable[[ConfigResult], tuple[float, float | None] | None]
#: the memory model's validated error as advice reads it: framework (None: all of them)
#: -> (its 90th-percentile |error| over the steps measured here, their number)
#: (``kinds.calibrate.validate.memory_margins``)
MemoryMargins = Mapping[str | None, tuple[float, int]]


#: the frameworks the model is asked for a network not measured here, the fastest kept
MODEL_FRAMEWORKS = ("torch", "tensorflow", "jax")


def advise_here(task: Task, rows: list[ConfigResult], samples: int, epochs: float,
                memory_error: MemoryMargins | None = None,
                model: LocalModel | None = None,
                loader: LoaderModel | None = None,
                baselines: Mapping[str, float] | None = None) -> HardwareAdvice:
    """``rows``: this machine's aggregated rows (step, parallel, loader and storage;
    failures included); ``memory_error``: the memory model's validated error per framework
    (``MemoryMargins``, ``dlperf validate --memory``), None where not known;
    ``model``: this machine's calibrated model, which predicts a network not measured
    here (None: no calibration; the advice gives the command that measures it);
    ``loader``: the input-pipeline model, for a pipeline not measured here;
    ``baselines``: framework -> its runtime memory on this CPU (``dlperf calibrate``), part
    of the largest batch's memory."""
    cores = environment.physical_cores()
    # training on synthetic data: the processor's own rate (runs on an input pipeline,
    # which add the wait for data, are what the data advice reads)
    steps = [r for r in rows if r.spec.kind == "step" and r.spec.network in workloads.WORKLOADS
             and not has_pipeline(r.spec)]
    recs: list[Recommendation] = []
    best_of: dict[tuple[str, str], ConfigResult] = {}
    for cand in task.candidates:
        for size in common.sizes(cand.network):
            mine = [r for r in steps if r.spec.network == cand.network and r.spec.size == size]
            best = max((r for r in mine if r.measured), key=lambda r: r.samples_per_s,
                       default=None)
            recs.append(_network(cand.network, size, best, samples, epochs, cores, model))
            if best is not None:
                best_of[(cand.network, size)] = best
                recs += _framework(cand.network, size, mine, best, cores)
                recs.append(_threads(cand.network, size, mine, best, cores))
                if (kept := _allocator(cand.network, size, best)) is not None:
                    recs.append(kept)
            recs.append(_batch(cand.network, size, mine, memory_error,
                               _runtime(best, baselines or {})))
    # devices and data for the task's first candidate measured here (the candidates are
    # listed most representative first; the guide's families run on 8x8 digits)
    first = next(iter(best_of.values()), None)
    recs.append(_devices(first, rows, task, samples, epochs, cores, model))
    recs += data_advice(best_of, rows, task, cores, measured, loader)
    notes = [f"{cores} physical cores; no GPU" if not environment.gpus() else
             f"{cores} physical cores; GPUs: {', '.join(g['name'] for g in environment.gpus())}"]
    return HardwareAdvice("this machine", tuple(recs), tuple(notes))


def _network(net: str, size: str, best: ConfigResult | None, samples: int, epochs: float,
             cores: int, model: LocalModel | None = None) -> Recommendation:
    from dlperf.kinds.calibrate.validate import as_defined

    name = common.name(net, size)
    if best is None:
        guess = _predicted(net, size, cores, model) if model else None
        if guess is None:
            return Recommendation("network", name, f"{name}: not measured here", None, "h",
                                  Unknown(common.run_command(net, size, threads=cores)))
        spec, seconds, error = guess
        rate = spec.batch_size / seconds
        hours = common.hours(samples, epochs, rate)
        bad = (getattr(model, "disturbed", {}) or {}).get((spec.framework, spec.threads))
        timed = getattr(model, "timed", lambda _: True)(spec)
        times_them = (f": 'dlperf calibrate --networks {net}' times them"
                      if as_defined(spec) else "; a calibration times a network as defined")
        basis = ("the error: the model's 90th percentile on the other networks measured here "
                 "with the same framework (dlperf validate)" if timed else
                 f"{name}'s layer shapes were not timed (a skeleton of the grid stands in"
                 f"{times_them}); the error: the model's 90th percentile on the networks "
                 "measured here with the same framework, each predicted with its own shapes "
                 "held out of the calibration")
        fewer = (f" at {spec.threads} thread{'s' if spec.threads != 1 else ''}, the most "
                 f"calibrated here of {cores} cores" if spec.threads != cores else "")
        return Recommendation(
            "network", name, f"{name}: {common.duration(hours)} for {epochs:g} epochs of "
            f"{units.count(samples)} samples at {rate:.4g} samples/s (the calibrated "
            f"model's prediction{f', +-{error:.0%}' if error is not None else ''}{fewer})",
            hours, "h",
            Predicted(
                spec.label(), error, "this machine's calibrated kernels (dlperf calibrate); "
                + basis + (f"; the calibration was disturbed: {bad}" if bad else "")))
    hours = common.hours(samples, epochs, best.samples_per_s)
    return Recommendation("network", name, f"{name}: {common.duration(hours)} for {epochs:g} "
                          f"epochs of {units.count(samples)} samples at "
                          f"{best.samples_per_s:.4g} samples/s", hours, "h", measured(best))


def _predicted(net: str, size: str, cores: int, model: LocalModel
               ) -> tuple[RunSpec, float, float | None] | None:
    """The fastest calibrated framework's prediction at the network's default batch, at
    all the physical cores where that thread count is calibrated, else at the most threads
    it is (halving from the cores: a calibration of one thread still predicts), or None
    where the calibration predicts none."""
    found = []
    for fw in MODEL_FRAMEWORKS:
        for threads in halving_threads(cores):
            spec = RunSpec(network=net, size=size, framework=fw, threads=threads,
                           batch_size=workloads.get(net).default_batch)
            got = model(ConfigResult(spec=spec))
            if got is not None:
                found.append((spec, *got))
                break
    return min(found, key=lambda x: x[1], default=None)


def _framework(net: str, size: str, mine: list[ConfigResult], best: ConfigResult, cores: int) -> list[Recommendation]:
    """The fastest framework at the best configuration's batch, device and threads."""
    same = [r for r in mine if r.measured and (r.spec.batch_size, r.spec.device, r.spec.threads)
            == (best.spec.batch_size, best.spec.device, best.spec.threads)]
    by_fw: dict[str, ConfigResult] = {}
    for r in same:
        if r.framework_label not in by_fw or r.median_s < by_fw[r.framework_label].median_s:
            by_fw[r.framework_label] = r
    order = sorted(by_fw.values(), key=lambda r: r.median_s)
    name = common.name(net, size)
    top = order[0]
    if len(order) == 1:
        return [Recommendation(
            "framework", name, f"{name}: only {top.framework_label} measured "
            f"({units.seconds(top.median_s)} per mini-batch); compare with: "
            f"{common.sweep_command(net, size, 'all', [best.spec.threads])}",
            top.median_s, "s", measured(top))]
    rest = ", ".join(f"{r.framework_label} {units.seconds(r.median_s)} "
                     f"({r.median_s / top.median_s:.2f}x)" for r in order[1:])
    return [Recommendation("framework", name, f"{name}: {top.framework_label} is fastest here, "
                           f"{units.seconds(top.median_s)} per mini-batch; {rest}",
                           top.median_s, "s", measured(top))]


def _threads(net: str, size: str, mine: list[ConfigResult], best: ConfigResult, cores: int) -> Recommendation:
    """The thread count of the fastest configuration, and what threads past the physical
    cores did, where measured."""
    curve = {r.spec.threads: r for r in mine if r.measured and r.spec.device == "cpu"
             and r.framework_label == best.framework_label
             and r.spec.batch_size == best.spec.batch_size
             and r.spec.measurement == best.spec.measurement}
    name = common.name(net, size)
    fw = best.spec.framework
    if best.spec.device != "cpu":
        return Recommendation("threads", name, f"{name}: the GPU ({best.spec.label()})",
                              best.median_s, "s", measured(best))
    if len(curve) < 2:
        return Recommendation("threads", name, f"{name}: only {best.spec.threads} thread"
                              f"{'s' if best.spec.threads > 1 else ''} measured", None,
                              "threads", Unknown(common.sweep_command(
                                  net, size, fw, [1, cores, 2 * cores], best.spec.batch_size)))
    t_best = min(curve, key=lambda t: curve[t].median_s)
    text = (f"{name}: {t_best} thread{'s' if t_best > 1 else ''} on the CPU "
            f"({units.seconds(curve[t_best].median_s)} per mini-batch, {fw})")
    beyond = [t for t in curve if t > cores]
    if cores in curve and beyond:
        t = max(beyond)
        ratio = curve[t].median_s / curve[cores].median_s
        effect = {"slower": "slow it down", "faster": "still help",
                  "no change": "change nothing"}[direction(ratio)]
        text += (f"; {t} threads on {cores} physical cores took {ratio:.2f}x the time at "
                 f"{cores}: more threads than cores {effect}")
    elif not beyond:
        text += (f"; past the {cores} physical cores not measured ("
                 f"{common.sweep_command(net, size, fw, [cores, 2 * cores], best.spec.batch_size)})")
    return Recommendation("threads", name, text, float(t_best), "threads",
                          measured(curve[t_best]))


#: the kernel's share of a step past which the allocator's pages are worth advice: the
#: run-to-run spread a measurement warns of (``core.timing``'s 5% robust CV)
ALLOCATOR_SHARE = 0.05


def _allocator(net: str, size: str, best: ConfigResult) -> Recommendation | None:
    """Where the fastest run spent a share of its step in the kernel (``ALLOCATOR_SHARE``
    or more of ``Metrics.system_s_per_step``; on a CPU), nearly all of it mapping new
    pages: the framework's allocator gave its memory back and took it again at every step,
    and one that keeps it saves up to that share. Measured (2-vCPU AMD EPYC, PyTorch's
    ResNet-50 at batch 16 on one thread, two processes each): 5.74-6.29 s a step with
    glibc's defaults, 12.7-19.9% of it the kernel's and 1.5-2.7 GiB of new pages; 5.01-5.08
    s and no new page with glibc keeping its memory (``GLIBC_TUNABLES=glibc.malloc.
    mmap_max=0:glibc.malloc.trim_threshold=...``), the same peak memory. Only where the
    framework takes each tensor from the C library's malloc (``allocates_per_tensor``):
    JAX's LSTM at 128 kept 472 of its 525 MiB of new pages a step under that setting and
    its time (1.78-1.79 s against 1.82-1.83), so elsewhere the share is said with no fix.
    None where not measured (an older dlperf's run) or below the share."""
    pages, system = best.new_page_bytes_per_step, best.system_s_per_step
    if best.spec.device != "cpu" or pages is None or system is None or not best.median_s:
        return None
    share = system / best.median_s
    if share < ALLOCATOR_SHARE:
        return None
    name = common.name(net, size)
    limit = 2 ** math.ceil(math.log2(max(best.peak_rss_bytes or 2**30, 2**20)))
    fw = best.spec.framework
    said = (f"{name}: {units.percent(share)} of each step is the kernel's, mapping "
            f"{units.nbytes(pages)} of new pages")
    if not allocates_per_tensor(fw, best.spec.device):
        return Recommendation(
            "allocator", name, f"{said} ({fw}'s runtime maps them itself at every step; no "
            "allocator setting is known to keep them)", share * 100, "% of the step",
            measured(best))
    return Recommendation(
        "allocator", name,
        f"{said} ({fw} gives its memory back and takes it again at every step); an "
        "allocator that keeps it saves up to that: glibc's own, "
        f"GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold={limit}, "
        "or jemalloc or tcmalloc preloaded (LD_PRELOAD)",
        share * 100, "% of the step", measured(best))


def _runtime(best: ConfigResult | None, baselines: Mapping[str, float]
             ) -> tuple[str, float] | None:
    """The framework whose runtime memory the largest batch counts, and its bytes: the
    fastest measured one's where calibrated, else the largest calibrated (the batch that
    fits beside it fits beside the others); None where none is calibrated."""
    fw = best.spec.framework if best is not None else None
    if fw in baselines:
        return fw, baselines[fw]
    return max(baselines.items(), key=lambda kv: kv[1], default=None)


def _batch(net: str, size: str, mine: list[ConfigResult],
           memory_error: MemoryMargins | None = None,
           runtime: tuple[str, float] | None = None) -> Recommendation:
    """The largest batch that fits: from runs that ran out of memory where there are any,
    else the model's memory estimate against this machine's memory, with ``runtime``'s
    framework's memory (``_runtime``) as the memory model's validation counts it, and that
    framework's validated error (all frameworks' where it has too few steps) left as
    margin: a batch advised to fit must fit where the model errs as it did here. Only
    runs on this machine's CPU and under no memory limit of their own say what its memory
    holds (an out-of-memory run under ``--memory-limit`` answered a smaller memory's
    question)."""
    name = common.name(net, size)
    mine = [r for r in mine if r.spec.device == "cpu" and r.spec.memory_limit is None]
    oom = [r.spec.batch_size for r in mine if r.failure_reason == "oom"]
    ok = [r for r in mine if r.measured]
    if oom:
        fits = [r for r in ok if r.spec.batch_size < min(oom)]
        top = max(fits, key=lambda r: r.spec.batch_size, default=None)
        if top is not None:
            return Recommendation("batch", name, f"{name}: batch {top.spec.batch_size} ran; "
                                  f"{min(oom)} ran out of memory", float(top.spec.batch_size),
                                  "samples", measured(top))
    from dlperf.kinds.calibrate.validate import margin_for

    memory = environment.machine()["memory_bytes"]
    held = runtime[1] if runtime else 0.0
    margin = margin_for(memory_error, runtime[0] if runtime else None)
    error = margin.error if margin else None
    b = common.largest_fitting(
        lambda b: training_memory(net, size=size, batch_size=b) + held, memory, error)
    more = " or more" if b == common.MAX_BATCH else ""
    beside = (f"and {runtime[0]}'s runtime, "
              f"{units.nbytes(held)} as calibrated here" if runtime
              else "without the framework's own memory, not calibrated here")
    spare = f", leaving {error:.0%} for the model's error here" if error is not None else ""
    return Recommendation(
        "batch", name, f"{name}: about {b}{more} fit in this machine's "
        f"{units.nbytes(memory)}{spare} (the memory model's weights, gradients, activations "
        f"and largest transient, {beside})", float(b),
        "samples", Predicted(
            f"memory estimate of {name} at batch {b}", error,
            "no run here ran out of memory"
            + (f"; {margin.basis}, left as margin" if margin else "")))


#: the strategies advice asks the model for, where none was measured here
PREDICTED_STRATEGIES = ("sync", "async", "mixed", "pipeline", "fsdp")


def _devices(first: ConfigResult | None, rows: list[ConfigResult], task: Task, samples: int, epochs: float,
             cores: int, model: LocalModel | None = None) -> Recommendation:
    """Several worker processes on this machine: the measured parallel strategies of the
    network and size the step advice put first (``first``), else of another of the
    task's candidates at a size the advice compares (``common.sizes``: a tiny network's
    rate says nothing of the task's time), else the calibrated model's fastest
    (``_predicted_parallel``)."""
    from dlperf.kinds.parallel.analysis import opts, speedup

    par = [r for r in rows if r.spec.kind == "parallel" and r.measured]
    wanted = {(c.network, s) for c in task.candidates for s in common.sizes(c.network)}
    mine = [r for r in par if (r.spec.network, r.spec.size) in wanted]
    if first is not None:  # strategies compared on one network, not networks on their rate
        mine = [r for r in mine if (r.spec.network, r.spec.size) ==
                (first.spec.network, first.spec.size)] or mine
    net = first.spec.network if first else task.candidates[0].network
    if not mine:
        size = first.spec.size if first else None
        guess = _predicted_parallel(net, size, cores, model) if model else None
        if guess is None:
            why = ("not measured here, and this machine's calibration does not predict it "
                   "(a parallel run needs its collectives: dlperf calibrate --frameworks "
                   "torch, without --no-allreduce)" if model else "not measured here")
            return Recommendation("devices", net, f"workers and synchronisation: {why}",
                                  None, "h", Unknown(common.parallel_command(net, cores), why))
        spec, seconds, error = guess
        o = opts(ConfigResult(spec=spec))
        rate = spec.batch_size / seconds
        hours = common.hours(samples, epochs, rate)
        return Recommendation(
            "devices", common.name(net, spec.size), f"{o.workers} workers, {o.strategy}: "
            f"{common.duration(hours)} to train at {rate:.4g} samples/s (the calibrated "
            f"model's prediction{f', +-{error:.0%}' if error is not None else ''}; the "
            "fastest of the strategies it predicts)"
            + (f"; one process measured {first.samples_per_s:.4g} samples/s"
               if first and first.samples_per_s else ""), hours, "h",
            Predicted(spec.label(), error, "this machine's calibrated kernels and gloo's "
                      "collectives (dlperf calibrate); the error: the model's 90th percentile "
                      "on the other networks measured here with PyTorch (dlperf validate)"))
    scored = defaultdict(list)
    for r in mine:
        s, eff = speedup(r, par)
        scored[r.spec.network].append((r.spec.batch_size / r.median_s, s, eff, r))
    rate, s, eff, r = max((x for v in scored.values() for x in v), key=lambda x: x[0])
    o = opts(r)
    hours = common.hours(samples, epochs, rate)
    sp = (f", speed-up {s:.2f}x and efficiency {units.percent(eff)} against one worker"
          if s else "")
    return Recommendation("devices", common.name(r.spec.network, r.spec.size),
                          f"{o.workers} worker{'s' if o.workers > 1 else ''}, {o.strategy}: "
                          f"{common.duration(hours)} to train at {rate:.4g} samples/s{sp}",
                          hours, "h", measured(r))


def _predicted_parallel(net: str, size: str | None, cores: int, model: LocalModel
                        ) -> tuple[RunSpec, float, float | None] | None:
    """The fastest strategy the calibrated model predicts for ``net`` on as many one-thread
    worker processes as physical cores (at least two) at its default mini-batch in all, as
    ``common.parallel_command`` would measure it; None where it predicts none."""
    from dlperf.kinds.parallel.make import make_spec

    found = []
    for strategy in PREDICTED_STRATEGIES:
        try:
            spec = make_spec(net, strategy=strategy, workers=max(2, cores), size=size)
        except UsageError:  # a strategy these workers cannot run (mixed on an odd count)
            continue
        got = model(ConfigResult(spec=spec))
        if got is not None:
            found.append((spec, *got))
    return min(found, key=lambda x: x[1], default=None)
