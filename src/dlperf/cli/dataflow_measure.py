"""``dlperf dataflow storage|memory|h2d``: storage bandwidth against a training rate, the
largest mini-batch under a memory limit, host-to-device copies on a GPU."""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape

from dlperf.cli.dataflow_common import base_specs, run_specs
from dlperf.cli.dataflow_common import values as values_of
from dlperf.cli.progress import out
from dlperf.core import units
from dlperf.core.errors import UsageError
from dlperf.core.spec import Measurement, RunResult, RunSpec
from dlperf.engine.config import parse_bytes
from dlperf.inputs import datasets
from dlperf.inputs.options import DEFAULT_SAMPLES
from dlperf.kinds import LoaderOptions, StepOptions
from dlperf.kinds.dataflow import plan as dplan
from dlperf.kinds.dataflow.analysis import dataflow_of
from dlperf.kinds.dataflow.options import StorageOptions, StorageOutcome

#: the memory search's timing unless flags say otherwise: one warm-up step and one timed
#: step (the memory of plain SGD peaks in the first step; each probe of a large network
#: is a worker start of its own, and its time per mini-batch is only indicative)
SEARCH_MEASUREMENT = Measurement(min_time_s=0.01, min_steps=1, warmup_min_steps=1,
                                 warmup_max_steps=1, warmup_max_time_s=60.0)


# ----------------------------------------------------------------------------- storage
def cmd_storage(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.kinds.dataflow import storage
    from dlperf.kinds.dataflow.storage_run import resolve_tool, storage_spec

    path = storage.check_path(a.path)
    size = parse_bytes(a.file_size)
    if size < storage.SEQ_BLOCK:
        raise UsageError(f"--file-size must be at least {storage.SEQ_BLOCK} bytes (one block)")
    tool = resolve_tool(a.tool)
    if a.tool == "auto" and tool == "direct":
        out.print("fio is not installed: the built-in direct reader measures")
    if a.network:
        _data_spec(a)  # a bad network or format is refused before measuring
    # measured anew each time (force): a disk's bandwidth is what it is now
    r = api.run_specs([storage_spec(path, size, tool)], db=a.db, force=True)[0]
    if not r.ok:
        out.print(f"[red]storage not measured[/]: {escape(r.failure.message)}")
        return 1
    o, where = r.outcome, r.spec.options
    assert isinstance(o, StorageOutcome) and isinstance(where, StorageOptions)
    out.print(f"[bold]{escape(o.tool)}[/] on {escape(where.path)} "
              f"({units.nbytes(o.file_bytes)}; {escape(o.method)})")
    out.print(f"  sequential  {o.seq_bytes_per_s / 1e6:8.0f} MB/s  ({units.nbytes(o.seq_block)} blocks)")
    out.print(f"  random      {o.rand_bytes_per_s / 1e6:8.0f} MB/s  ({units.nbytes(o.rand_block)} blocks)")
    if a.network:
        out.print(verdict(a, o))
    return 0


def _data_spec(a: argparse.Namespace) -> datasets.DataSpec:
    from dlperf import workloads

    _, _, cfg = workloads.resolve(a.network, None, None)
    fmt = a.data_format or ("jpeg" if dplan.is_image(cfg) else "raw")
    return datasets.for_network(cfg, DEFAULT_SAMPLES, fmt)


def verdict(a: argparse.Namespace, o: StorageOutcome) -> str:
    """'this disk reads 410 MB/s; resnet50 at this speed needs 23 MB/s of JPEGs: not a
    bottleneck'. Per-sample reads are random accesses: the random rate is the one compared."""
    from dlperf import api
    from dlperf.kinds.dataflow.storage import feeds

    data = _data_spec(a)
    if a.rate:
        rate, source = a.rate, "--rate"
    else:
        found = api.fastest_rate(a.network, a.db)
        if found is None:
            return (f"no measured training rate of {a.network} on this machine: run 'dlperf run "
                    f"--network {a.network}' first, or give --rate")
        rate, source = found[0], f"measured: {found[1]}"
    per = datasets.bytes_per_sample(data)
    need, ok = feeds(o.rand_bytes_per_s, rate, per)
    what = {"jpeg": "JPEGs", "png": "PNGs", "raw": "raw records"}[data.format]
    tail = (f"not a bottleneck ({units.percent(need / o.rand_bytes_per_s)} of it)" if ok else
            f"a bottleneck: it feeds at most {o.rand_bytes_per_s / per:.4g} samples/s")
    return (f"this storage reads {o.rand_bytes_per_s / 1e6:.0f} MB/s in random "
            f"{units.nbytes(o.rand_block)} reads; {a.network} at {rate:.4g} samples/s "
            f"({source}) needs {need / 1e6:.3g} MB/s of {what} ({units.nbytes(per)} each): {tail}")


# ----------------------------------------------------------------------------- memory
def cmd_memory(a: argparse.Namespace) -> int:
    from dlperf.core.environment import gpus
    from dlperf.inputs.options import InputOptions
    from dlperf.kinds.dataflow.memory import search

    if not a.memory_limit:
        raise UsageError("dataflow memory needs --memory-limit (e.g. 8GiB)")
    limit = parse_bytes(a.memory_limit)
    if a.device == "gpu" and not gpus():
        raise UsageError("--device gpu: no GPU is visible (nvidia-smi finds none)")
    values = values_of(a)
    if a.device == "gpu":  # the cap is the framework's; the batches come from host memory
        values.setdefault("input", "memory")
        values["device_memory_bytes"] = limit
    bases, cfg = base_specs(a, measurement=SEARCH_MEASUREMENT)
    if a.device == "gpu":
        cfg = cfg.model_copy(update={"memory_limit": None})
    base = bases[0].model_copy(update={"batch_size": a.start})
    opts = InputOptions()
    notes: list[str] = []
    if values and values != {"input": "synthetic"}:
        opts, notes = dplan.resolve(values, a.network, a.size, base.params, a.start,
                                    None if a.device == "gpu" else limit)
    max_batch = a.max_batch if opts.synthetic else min(a.max_batch, opts.samples)
    for n in notes:
        out.print(f"note: {escape(n)}")
    options = StepOptions.model_validate(
        {**opts.to_options(), **({} if a.device == "gpu" else {"memory_limit_bytes": limit})})
    tried: dict[int, RunResult] = {}

    def probe(b: int) -> tuple[bool, str | None]:
        spec = base.model_copy(update={"batch_size": b, "options": options})
        results = run_specs([spec], cfg, a, quiet=True)
        r = results[-1] if results else None
        if r is None:
            return False, "not measured"
        tried[b] = r
        return r.ok, None if r.ok else r.failure.reason

    s = search(probe, start=a.start, max_batch=max_batch)
    if a.dry_run:
        return 0
    where = "of the GPU (the framework's per-process memory fraction)" if a.device == "gpu" \
        else "resident (the launcher kills a worker over it)"
    name = base.label().replace(f" b{base.batch_size}", "")
    out.print(f"[bold]{escape(name)}[/] under {units.nbytes(limit)} {where}")
    for b, r in sorted(tried.items()):
        m = r.metrics
        state = (f"fits   {units.seconds(m.median_s):>9}  peak {units.nbytes(m.peak_rss_bytes)}"
                 if r.ok and m else f"[red]{r.failure.reason}[/]  {escape(r.failure.message[:70])}")
        out.print(f"  batch {b:>5}  {state}")
    if s.largest_ok is not None:
        beyond = f" ({s.smallest_oom} ran out of memory)" if s.smallest_oom else ""
        out.print(f"largest mini-batch that fits: [bold]{s.largest_ok}[/]{beyond}")
    else:
        out.print("no mini-batch fits" if not s.stopped else "")
    if s.stopped:
        out.print(f"search stopped: {escape(s.stopped)}")
    return 0 if s.largest_ok is not None else 1


# ----------------------------------------------------------------------------- h2d
def cmd_h2d(a: argparse.Namespace) -> int:
    from dlperf.core.environment import gpus

    if not gpus():
        raise UsageError("dataflow h2d needs a GPU; none is visible (nvidia-smi finds none)")
    bases, cfg = base_specs(a, device="gpu")
    b0 = bases[0]
    mem = {"input": "memory", "samples": a.samples}

    def with_opts(kind: str, **o: Any) -> RunSpec:
        opts, _ = dplan.resolve({**mem, **o}, a.network, a.size, b0.params, b0.batch_size)
        model = LoaderOptions if kind == "loader" else StepOptions
        return b0.model_copy(update={"kind": kind,
                                     "options": model.model_validate(opts.to_options())})

    copies = [with_opts("loader", pin_memory=False), with_opts("loader", pin_memory=True)]
    steps = [b0, with_opts("step", pin_memory=False), with_opts("step", pin_memory=True),
             with_opts("step", pin_memory=True, prefetch=2)]
    results = run_specs(copies + steps, cfg, a)
    if a.dry_run:
        return 0
    by_id = {r.spec.config_id: r for r in results}
    for spec, name in zip(copies, ("pageable", "pinned"), strict=True):
        r = by_id.get(spec.config_id)
        o = dataflow_of(r) if r is not None and r.ok else None
        if o is None or not o.h2d_s:
            out.print(f"  {name:9} copy: not measured")
            continue
        out.print(f"  {name:9} copy of a batch ({units.nbytes(o.h2d_bytes)}): "
                  f"{units.seconds(o.h2d_s)}, {o.h2d_bytes / o.h2d_s / 1e9:.3g} GB/s")
    floor = by_id.get(b0.config_id)
    t0 = floor.metrics.median_s if floor is not None and floor.ok else None
    labels = ("synthetic (on the device)", "pageable, no overlap", "pinned, non_blocking",
              "pinned, prefetched to the device")
    for spec, name in zip(steps, labels, strict=True):
        r = by_id.get(spec.config_id)
        if r is None or not r.ok:
            out.print(f"  {name:32} not measured" + (f": {r.failure.message}" if r else ""))
            continue
        o = dataflow_of(r)
        t = r.metrics.median_s
        share = ""
        if t0 and o is not None and o.compute_median_s is not None:
            share = f"; transfer {max(0.0, o.compute_median_s - t0) / t:.0%} of the step"
        out.print(f"  {name:32} {units.seconds(t)} per mini-batch{share}")
    return 0
