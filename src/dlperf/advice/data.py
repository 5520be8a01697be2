"""Data advice for this machine: whether the input pipeline and the storage keep up with
the fastest training rate measured here, each from what the store measured on this
machine (``dlperf run --input ...``, ``dlperf dataflow sweep|loader|storage``), the
catalogue's storage where this machine's was not measured, and the command that measures
what is missing."""

from __future__ import annotations

from collections.abc import Callable

from dlperf import workloads
from dlperf.advice import common
from dlperf.advice.records import Measured, Predicted, Recommendation, Unknown
from dlperf.advice.tasks import Task
from dlperf.core import units
from dlperf.core.aggregate import ConfigResult
from dlperf.kinds.dataflow.analysis import GONE, dataflow_of, loader_rate, stall_share
from dlperf.kinds.dataflow.calibration import is_calibration
from dlperf.kinds.dataflow.options import StorageOutcome
from dlperf.kinds.dataflow.plan import has_pipeline, input_of
from dlperf.kinds.dataflow.prediction import PipelineAdvice

#: how a measured row becomes a recommendation's source (``advice.local.measured``)
Source = Callable[[ConfigResult], Measured]
#: this machine's input-pipeline model: for a step measured on data in place, the
#: pipeline it would want (None: its loader is not calibrated here), and the model's
#: validated error in words ('' where not validated)
LoaderModel = tuple[Callable[[ConfigResult], "PipelineAdvice | None"], str]


def data_advice(best_of: dict[tuple[str, str], ConfigResult], rows: list[ConfigResult],
                task: Task, cores: int, measured: Source,
                loader: LoaderModel | None = None) -> list[Recommendation]:
    """The input pipeline's and the storage's recommendation. ``best_of``: the fastest
    run of each (network, size) of the task measured here on synthetic data, candidates
    in the task's order; ``rows``: this machine's rows of every kind; ``measured``: a
    row's Measured source; ``loader``: the input-pipeline model, for a pipeline not
    measured here. Input pipelines exist for the DLBench networks only, so a task with
    none among its candidates gets the storage's recommendation alone."""
    first = next(iter(best_of.values()), None)
    recs = []
    dlbench = [c.network for c in task.candidates if workloads.get(c.network).group == "dlbench"]
    if dlbench:
        net = next((n for (n, _), r in best_of.items() if n in dlbench), dlbench[0])
        best = next((r for (n, _), r in best_of.items() if n == net), None)
        recs.append(_pipeline(net, best, rows, cores, measured, loader))
    net = first.spec.network if first else task.candidates[0].network
    return recs + [_storage(net, first, rows, cores, measured)]


def _pipeline(net: str, first: ConfigResult | None, rows: list[ConfigResult], cores: int,
              measured: Source, loader: LoaderModel | None = None) -> Recommendation:
    """The pipeline configuration that trained ``net`` fastest here and the share of its
    step spent waiting for data; else the loader alone against the training rate; else
    the model's prediction for the fastest step on data in place."""
    # at the size the step advice compares (``compared``): a tiny network's step waits a
    # far larger share for its far smaller images
    sizes = compared(net, first)
    steps = [r for r in rows if r.spec.kind == "step" and r.measured and r.spec.network == net
             and r.spec.size in sizes and has_pipeline(r.spec) and stall_share(r) is not None]
    sweep = (f"dlperf dataflow sweep --network {net} --loader-workers "
             f"0,1,{max(2, cores)} --prefetch 0,2")
    if steps:
        best = min(steps, key=lambda r: r.median_s)
        share = stall_share(best)
        o = input_of(best.spec)
        verdict = ("keeps up" if share < GONE else
                   "is a bottleneck: more loader workers, prefetching or a record format "
                   f"without decoding would help (compare them: {sweep})")
        return Recommendation(
            "data", f"input pipeline for {net}",
            f"input pipeline: {o.describe()} waits {units.percent(share)} of each step "
            f"({units.seconds(best.median_s)} per mini-batch, {best.framework_label}): it "
            f"{verdict}", 100 * share, "% of the step", measured(best))
    # a user's loader runs; the calibration's are the model's (below)
    loaders = [(rate, r) for r in rows if r.spec.kind == "loader" and r.measured
               and r.spec.network == net and r.spec.size in sizes and not is_calibration(r.spec)
               and (rate := loader_rate(r))]
    if loaders and first is not None:
        rate, r = max(loaders, key=lambda x: x[0])
        need = first.samples_per_s
        verdict = ("keeps up" if rate >= need else
                   "cannot keep up: more loader workers or a cheaper format")
        return Recommendation(
            "data", f"input pipeline for {net}",
            f"input pipeline: the loader alone ({input_of(r.spec).describe()}) delivers "
            f"{rate:.4g} samples/s, the fastest training here consumes {need:.4g}: it "
            f"{verdict} (training beside the loader not measured: {sweep})",
            rate, "samples/s", measured(r))
    got = loader[0](first) if loader is not None and first is not None else None
    if got is not None:
        return _predicted_pipeline(net, first, got, loader[1], sweep)  # type: ignore[index,arg-type]
    # why the input-pipeline model cannot answer: no loader calibrated here, or none on
    # this network's data
    calibrate = f"dlperf calibrate --dataflow --networks {net}"
    why = ("not measured here" if first is None else
           f"not measured here, and no loader is calibrated here to predict it ({calibrate})"
           if loader is None else
           f"not measured here, and the loaders calibrated here do not cover {net}'s data "
           f"({calibrate})")
    return Recommendation("data", f"input pipeline for {net}", f"input pipeline: {why}",
                          None, "% of the step", Unknown(sweep, why))


def _predicted_pipeline(net: str, first: ConfigResult, got: PipelineAdvice, validated: str,
                        sweep: str) -> Recommendation:
    """The model's pipeline for the fastest step measured here on data in place."""
    loop = got.in_loop
    head = (f"input pipeline ({got.input}): in the training loop {net} would wait "
            f"{units.percent(loop.stall_share)} of each step")
    if got.ahead is None:
        text, value = head + "; no loader-worker count keeps up here", None
    else:
        w = got.ahead.workers
        text = head + (f"; {w} loader worker{'s' if w != 1 else ''} keep it within 5% "
                       f"(predicted stall {units.percent(got.ahead.stall_share)})")
        value = float(w)
    return Recommendation(
        "data", f"input pipeline for {net}", text + f"; measure it: {sweep}", value,
        "loader workers", Predicted(
            f"the loader's calibrated cost per sample beside {first.spec.label()} measured "
            "here", None, f"{units.seconds(loop.loader.per_sample_s)} a sample",
            validated=validated))


def _storage(net: str, first: ConfigResult | None, rows: list[ConfigResult], cores: int,
             measured: Source) -> Recommendation:
    """Whether this machine's measured storage (else the catalogue's) reads the bytes the
    fastest training rate needs. A sample's bytes are those of the data set on disk where
    a pipeline run measured one (JPEG, PNG or records), else its fp32 tensor."""
    if first is None:
        return Recommendation("data", "storage", "storage: no training rate measured here "
                              "to compare with", None, "MB/s",
                              Unknown(common.run_command(net, None, threads=cores)))
    per_sample, kind = on_disk_bytes(first.spec.network, first.spec.size, rows)
    need = first.samples_per_s * (per_sample or common.sample_bytes(net, first.spec.size))
    what = kind or "fp32 tensors"
    # storage results carry an outcome and no step metrics: the newest good one
    disks = [(res, r) for r in rows if r.spec.kind == "storage" for res in r.results
             if res.ok and isinstance(res.outcome, StorageOutcome)]
    if not disks:
        return Recommendation(
            "data", "storage", f"{common.storage_verdict(need)} ({what}); measure this "
            "machine's: dlperf dataflow storage --path DIR", need / 1e6, "MB/s", measured(first))
    res, disk = max(disks, key=lambda x: x[0].finished_at or 0.0)
    o = res.outcome
    path = getattr(disk.spec.options, "path", "")
    # a shuffled epoch reads its sample files in random order: the random rate is the one
    # that must keep up; the sequential one is what a record format read in order gets
    verdict = ("not a bottleneck" if o.rand_bytes_per_s >= need else
               "a bottleneck for files read in random order" +
               ("; read in order (records) it keeps up" if o.seq_bytes_per_s >= need else
                "; keep the data in memory"))
    text = (f"storage: {path} reads {o.seq_bytes_per_s / 1e6:.4g} MB/s in "
            f"order and {o.rand_bytes_per_s / 1e6:.4g} MB/s at random ({o.tool}, cold); "
            f"{net} at {first.samples_per_s:.4g} samples/s needs {need / 1e6:.3g} MB/s of "
            f"{what}: {verdict}")
    src = Measured(f"dlperf dataflow storage --path {path} ({o.tool})",
                   f"one cold pass each way, {o.method}")
    return Recommendation("data", "storage", text, need / 1e6, "MB/s", src)


def compared(net: str, best: ConfigResult | None) -> set[str]:
    """The sizes of ``net`` whose pipeline runs speak for the task: the size of its fastest
    step on synthetic data where measured (``best``), else those the advice compares
    (``common.sizes``: never the tiny smoke-test size)."""
    return {best.spec.size} if best is not None else set(common.sizes(net))


def on_disk_bytes(net: str, size: str, rows: list[ConfigResult]) -> tuple[float | None, str]:
    """Bytes per sample of ``net``'s data set on disk at ``size`` (its images' size), from
    the newest pipeline run that read one, and its format ('jpeg files'); (None, '') where
    none did."""
    found = []  # (finished, bytes per sample, format)
    for r in rows:
        if r.spec.kind not in ("step", "loader") or (r.spec.network, r.spec.size) != (net, size):
            continue
        opts = input_of(r.spec)
        if opts.input != "disk":
            continue
        for res in r.ok:
            o = dataflow_of(res)
            if o is not None and o.data_set_bytes:
                found.append((res.finished_at or 0.0, o.data_set_bytes / opts.samples,
                              opts.data_format))
    if not found:
        return None, ""
    _, b, fmt = max(found, key=lambda x: x[0])
    return b, f"{fmt} files"
