"""A predicted step on an input pipeline: the model's step on data in place
(``perfmodel.predict``) with the pipeline's stall and stretch
(``perfmodel.input_pipeline``) from this machine's calibrated loader costs
(``kinds.dataflow.calibration``). Imports no framework.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dlperf import workloads
from dlperf.core import units
from dlperf.core.errors import UsageError
from dlperf.inputs.options import InputOptions
from dlperf.kinds.dataflow.calibration import cost_for
from dlperf.perfmodel.input_pipeline import (
    MAX_WORKERS,
    InputPrediction,
    LoaderCost,
    predict_input,
    stall_free_workers,
)
from dlperf.perfmodel.result import Prediction


def with_input(p: Prediction, opts: InputOptions, costs: dict[tuple[str, str], LoaderCost], *,
               framework: str, params: dict[str, Any] | None, threads: int, cores: int,
               auto_workers: bool = False, host_link_bytes_per_s: float | None = None,
               storage: Storage | None = None) -> Prediction:
    """``p`` (one device's step on data in place) on the pipeline ``opts``: the training
    on ``threads`` of ``cores`` that the loader may also use; ``auto_workers``: the
    smallest loader-worker count that removes the stall instead of ``opts``'s;
    ``host_link_bytes_per_s``: a GPU's copy of each batch from the host (None: a CPU);
    ``storage``: where a cold read of each sample comes from (a loader reads sample by
    sample)."""
    if opts.synthetic:
        return p
    if p.strategy != "single":
        raise UsageError("--input is predicted for one device's step (strategy single): "
                         "each worker of a parallel run has a loader of its own")
    if opts.autotune:
        raise UsageError("--autotune lets tf.data choose at run time: give --loader-workers "
                         "and --prefetch (or --loader-workers auto) to predict")
    cost = cost_for(costs, framework, p.network, p.size, params, opts)
    wait = opts.sample_delay_s
    shared = 0.0
    cold = ""
    if opts.cache == "cold":
        if storage is None:
            raise UsageError("--cache cold reads every sample from storage: no storage is "
                             "measured here ('dlperf dataflow storage --path DIR' measures "
                             "the disk the data lives on)")
        stream = cost.sample_bytes / storage.bytes_per_s
        wait += storage.latency_s + stream
        # the storage streams every loader's bytes; a disk with one actuator also seeks
        # for one read at a time
        shared = stream + (0.0 if storage.concurrent else storage.latency_s)
        cold = (f"; cold reads of {units.nbytes(cost.sample_bytes)} a sample from "
                f"{storage.name} ({units.nbytes(storage.bytes_per_s)}/s"
                + (f" after {units.seconds(storage.latency_s)}" if storage.latency_s else "")
                + (", one read at a time" if not storage.concurrent else "")
                + f"): {units.seconds(storage.latency_s + stream)} each")
    copy = 0.0
    if host_link_bytes_per_s:
        copy = batch_bytes(p.network, p.size, params, p.batch_size) / host_link_bytes_per_s
    workers = opts.loader_workers
    # a GPU's step keeps its host thread busy launching kernels, a CPU's its cores always
    busy = p.breakdown.overhead_s if host_link_bytes_per_s else None
    kw: dict[str, Any] = dict(threads=threads, cores=cores, busy_s=busy)
    if auto_workers:
        found = stall_free_workers(p.time_s, threads, cores,
                                   cost.per_sample_s * p.batch_size,
                                   wait * p.batch_size + copy,
                                   framework, opts.prefetch, busy, shared * p.batch_size)
        if found is None:
            slow = ("the storage cannot read" if shared * p.batch_size > p.time_s
                    else "the cores cannot prepare")
            raise UsageError(f"no loader-worker count up to {MAX_WORKERS} keeps the input "
                             f"pipeline within 5% of the step here: {slow} the samples as "
                             "fast as the step consumes them")
        workers = found
        opts = opts.model_copy(update={"loader_workers": found})
    ip = predict_input(train_s=p.time_s, batch=p.batch_size, cost=cost, workers=workers,
                       prefetch=opts.prefetch, label=opts.describe(),
                       wait_per_sample_s=wait, copy_s=copy,
                       copy_ahead=bool(opts.prefetch or workers),
                       shared_per_sample_s=shared, **kw)
    added = ip.time_s - p.time_s
    note = (f"input pipeline {ip.input}: {units.seconds(ip.loader_cpu_s)} of loader work "
            f"per batch ({cost.data}, {units.seconds(cost.per_sample_s)} a sample), "
            f"{ip.placement}; stall {units.seconds(ip.stall_s)} "
            f"({units.percent(ip.stall_share)} of the step){cold}")
    if ip.stretched_s > ip.train_s * 1.005:
        note += f", the step stretched by {units.seconds(ip.stretched_s - ip.train_s)}"
    note += ("; stall-free from " + (f"{ip.stall_free_workers} loader workers"
                                     if ip.stall_free_workers is not None else "no count")
             + (" (--loader-workers auto chose it)" if auto_workers else ""))
    scale = p.time_s / ip.time_s
    return p.model_copy(update=dict(
        time_s=ip.time_s, input=ip,
        breakdown=p.breakdown.model_copy(update={"input_s": added}),
        mfu=p.mfu * scale if p.mfu is not None else None,
        notes=[*p.notes, note, f"loader cost: {cost.source}"]))


def batch_bytes(network: str, size: str, params: dict[str, Any] | None, batch: int) -> float:
    """Bytes of one mini-batch's inputs as the step takes them (4-byte elements: images
    normalised to float32, tokens as int32)."""
    _, _, cfg = workloads.resolve(network, size, params)
    return 4.0 * batch * math.prod(cfg.input_shape())


@dataclass(frozen=True)
class Storage:
    """Where cold reads come from: each read's wait before its bytes stream, the rate
    they stream at (shared by every loader), and whether reads are served at once."""

    name: str
    bytes_per_s: float
    latency_s: float = 0.0
    concurrent: bool = True


def catalogue_storage(entry: Any) -> Storage:
    """A catalogue storage (``perfmodel/data/storage.toml``): its sequential rate, a read's
    wait from its queue-depth-1 random reads, whether it serves reads at once."""
    return Storage(entry.name, entry.read_gbps * 1e9,
                   1 / entry.random_read_iops if entry.random_read_iops else 0.0,
                   concurrent=entry.concurrent_reads)


def measured_storage(store: Any) -> Storage | None:
    """The newest storage measured on this machine (``dlperf dataflow storage``), for cold
    reads: its random reads' rate (each read's wait is in it) and its path."""
    from dlperf.core import environment
    from dlperf.kinds.dataflow.options import StorageOutcome

    rows = [r for r in store.results(kind="storage", status="ok",
                                     machine_id=environment.machine_id())
            if isinstance(r.outcome, StorageOutcome) and r.outcome.rand_bytes_per_s > 0]
    if not rows:
        return None
    r = max(rows, key=lambda r: r.finished_at or 0.0)
    return Storage(f"the storage of {r.spec.options.path}", r.outcome.rand_bytes_per_s)


@dataclass(frozen=True)
class PipelineAdvice:
    """The input pipeline a measured step would want: in the training loop, and with the
    fewest loader workers that keep up (None: none does)."""

    input: str  # the settings: 'disk:jpeg p2'
    in_loop: InputPrediction
    ahead: InputPrediction | None


def pipeline_advice(network: str, size: str, params: dict[str, Any] | None, framework: str,
                    batch: int, threads: int, step_s: float,
                    costs: dict[tuple[str, str], LoaderCost], cores: int,
                    prefetch: int = 2) -> PipelineAdvice | None:
    """For a step measured here on data in place (``step_s``), the stall its network's data
    on disk (its usual format) would add in the training loop and the fewest loader workers
    at ``prefetch`` that keep it within 5% of the step; None where the loader is not
    calibrated here."""
    from dlperf.kinds.dataflow.plan import resolve

    opts, _ = resolve({"input": "disk", "prefetch": prefetch}, network, size, params, batch)
    try:
        cost = cost_for(costs, framework, network, size, params, opts)
    except UsageError:
        return None
    kw: dict[str, Any] = dict(train_s=step_s, threads=threads, cores=cores, batch=batch,
                              cost=cost, prefetch=prefetch)
    loop = predict_input(workers=0, label=opts.describe(), **{**kw, "prefetch": 0})
    w = stall_free_workers(step_s, threads, cores, batch * cost.per_sample_s, 0.0,
                           framework, prefetch)
    ahead = None if w is None else predict_input(
        workers=w, label=opts.model_copy(update={"loader_workers": w}).describe(), **kw)
    return PipelineAdvice(opts.describe().replace(" w0", ""), loop, ahead)
