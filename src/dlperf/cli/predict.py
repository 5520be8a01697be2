"""``dlperf devices`` (the catalogue) and ``dlperf predict`` (the analytical model).
Parsing and printing only; the model lives in ``dlperf.perfmodel``, this machine's
calibration in ``dlperf.kinds.calibrate``, the measured value beside it in
``dlperf.kinds.calibrate.validate``.

    dlperf devices
    dlperf predict -n resnet50 --device a100-40gb --precision bf16 -b 256 -s sync --gpus 8
    dlperf predict -n resnet50 --framework torch --device cpu --threads 2 -b 32
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from dlperf.cli import args
from dlperf.cli.dataflow_flags import add_input_flags, given
from dlperf.cli.progress import out
from dlperf.core import units
from dlperf.core.errors import UsageError


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("devices", help="the device, link and storage catalogue of the model")
    args.add_json(p)
    p.set_defaults(func=cmd_devices)
    _add_predict(sub)


def _rate(tflops: float | None) -> str:
    return "-" if tflops is None else f"{tflops:g}"


def cmd_devices(a: argparse.Namespace) -> int:
    from dlperf.perfmodel import catalogue
    from dlperf.perfmodel.scaled import reference
    from dlperf.report.exporters import print_table
    from dlperf.report.tables import Table

    devices, links, storage = catalogue.devices(), catalogue.links(), catalogue.storage()
    ref = reference()
    if a.json:
        print(json.dumps({"devices": [d.model_dump() for d in devices.values()],
                          "links": [x.model_dump() for x in links.values()],
                          "storage": [s.model_dump() for s in storage.values()],
                          "gpu_kernels": {"reference": ref.device, "source": ref.source}
                          if ref else None}, indent=1))
        return 0
    rows = [[d.name, d.kind, d.description, _rate(d.fp32_tflops), _rate(d.tf32_tflops),
             _rate(d.fp16_tflops), _rate(d.bf16_tflops), f"{d.memory_gbps:g}",
             f"{d.memory_gb:g}", ", ".join(x for x in (d.host_link, d.peer_link) if x)]
            for d in devices.values()]
    print_table(Table(title="Devices", headers=[
        "name", "kind", "description", "fp32", "tf32", "fp16", "bf16", "GB/s", "GB", "links"],
        rows=rows, caption="Peak TFLOP/s per precision (dense; '-': no fast path), memory "
        "bandwidth and size. Sources: 'dlperf devices --json'; add your own in "
        "$DLPERF_DEVICES or ~/.config/dlperf/devices.toml."), out)
    print_table(Table(title="Links", headers=["name", "description", "GB/s", "latency"],
                      rows=[[x.name, x.description, f"{x.gbps:g}", f"{x.latency_us:g} us"]
                            for x in links.values()],
                      caption="GB/s in one direction; latency per message step."), out)
    print_table(Table(title="Storage", headers=["name", "description", "read GB/s",
                                                "random reads/s (QD1)", "reads at once"],
                      rows=[[s.name, s.description, f"{s.read_gbps:g}",
                             f"{s.random_read_iops:g}" if s.random_read_iops else "-",
                             "several" if s.concurrent_reads else "one"]
                            for s in storage.values()]), out)
    if ref is not None:
        out.print(f"GPU predictions: the {ref.device}'s calibrated kernel curves scaled to each "
                  f"GPU's peaks and bandwidth ({ref.source}); CPUs: peaks x efficiency "
                  "factors. 'dlperf validate --published' shows how far to trust them.",
                  markup=False)
    return 0


def _add_predict(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="predict time per mini-batch, on this machine (from "
                       "its calibration) or on catalogue hardware")
    args.add_run_flags(
        p, network=args.REQUIRED, size=True,
        batch_size=args.Take(help="global mini-batch (default: the network's)"),
        device=args.Take(required=True, catalogue=True, help="cpu or gpu (this machine, as "
                         "'dlperf calibrate' measured it) or a catalogue device (dlperf "
                         "devices); NAME:N is N of them (--devices N)"),
        framework=args.Take(help="whose kernels (default torch): this machine's calibrated "
                            "ones, or on a catalogue GPU the reference curves of that "
                            "framework where dlperf ships them (else PyTorch's, said so)"),
        threads=args.Take(default=None, help="threads per worker: on this machine "
                          "(default 1), or on a catalogue CPU (default all its cores)"),
        precision=args.Take(help="fp32 (default), tf32, fp16, bf16"), param=True)
    p.add_argument("--strategy", "-s", default="single",
                   help="single (default), sync, async, mixed, pipeline, fsdp")
    # -w as 'dlperf parallel' spells its workers, so a run's flags predict it
    p.add_argument("--devices", "--gpus", "--workers", "-w", dest="devices",
                   type=args.positive_int, default=1,
                   help="devices in all (workers, on this machine)")
    p.add_argument("--nodes", type=args.positive_int, default=1)
    p.add_argument("--link", help="between devices of a node (default: the device's own)")
    p.add_argument("--inter-link", help="between nodes, e.g. ib-hdr")
    p.add_argument("--collective", default="ring", help="ring (default) or tree, in a node")
    p.add_argument("--groups", type=int, help="mixed: groups of devices (default: pairs)")
    p.add_argument("--micro-batches", type=int, help="pipeline (default: min(batch, 4 x "
                   "devices))")
    p.add_argument("--straggler-delay", type=float, default=0.0,
                   help="seconds one worker is slower per step")
    p.add_argument("--layers", action="store_true", help="also print the time of each layer")
    add_input_flags(p, auto=True)
    p.add_argument("--storage", help="--input disk --cache cold on a catalogue device: "
                   "the storage read from (dlperf devices lists them; this machine's is "
                   "the one 'dlperf dataflow storage' measured)")
    p.add_argument("--host-cores", type=args.positive_int, help="--input on a catalogue GPU: "
                   "the host's cores that feed it (default: the catalogue's per GPU)")
    args.add_json(p, help="the prediction as JSON (time_s, breakdown, ...; measured_s and "
                  "error when the store has the measurement)")
    args.add_db(p)
    p.set_defaults(func=cmd_predict)


#: --device names that mean this machine
LOCAL_DEVICES = ("cpu", "gpu")


def validated_line(v) -> str:
    """How far to trust the time on this machine (``kinds.calibrate.trust``)."""
    if v is None:
        return ("validated - (fewer than two configurations of this kind measured here: "
                "'dlperf run' or 'dlperf parallel' two other networks, then 'dlperf validate')")
    return (f"validated +-{v.p90:.0%} (90th percentile |error| over {v.n} {v.basis}; "
            f"median {v.median:.0%}: dlperf validate)")


def memory_line(p) -> str:
    """The predicted peak per device, what holds it, whether it fits, and the largest
    batch that does: by the model, and leaving its validated error as margin where known
    (the batch ``dlperf advise`` advises)."""
    m = p.memory
    parts = ", ".join(f"{name} {units.nbytes(v)}" for name, v in m.model_dump().items()
                      if name != "total" and v)
    fits = ("fits" if p.fits else "does NOT fit") + f" in {_memory_of(p.device)}"
    more = " or more (the largest batch dlperf tries)" if p.max_batch_or_more else ""
    top = f"; largest batch that fits: {p.max_batch}{more}" if p.max_batch else ""
    if p.max_batch and p.memory_margin and not p.max_batch_or_more:
        spare = p.max_batch_with_margin or "none"
        top += (f" by the model, {spare} leaving {units.percent(p.memory_margin.error)} for "
                f"its error: {p.memory_margin.basis}")
    return f"peak memory {units.nbytes(m.total)} per device ({parts}); {fits}{top}"


def _memory_of(device: str) -> str:
    """Whose memory a prediction is set against: this machine's (a local device is named
    'cpu:torch:x2', ``perfmodel.local.device_name``) or a catalogue device's."""
    kind, local, _ = device.partition(":")
    if local and kind in LOCAL_DEVICES:
        return "this machine's memory" if kind == "cpu" else "this machine's GPU memory"
    return f"{device}'s memory"


def _catalogue_margin(name: str):
    """A catalogue GPU's memory margin: the model's error over the GPU peaks dlperf
    measured (``report.published_memory``); none for a CPU, where nothing was checked."""
    from dlperf.perfmodel import catalogue
    from dlperf.report.published_memory import gpu_memory_error

    if catalogue.gpu(name) is None:  # a name not in it: predict() says why
        return None
    return gpu_memory_error().margin()


def input_line(ip, measured_share: float | None) -> str:
    """The predicted stall, beside the measured one where the store has the run."""
    line = (f"input     {ip.input}: stall {units.seconds(ip.stall_s)} per mini-batch, "
            f"{units.percent(ip.stall_share)} of the step")
    if measured_share is not None:
        line += (f"; measured {units.percent(measured_share)} "
                 f"({(ip.stall_share - measured_share) * 100:+.1f} points)")
    free = ip.stall_free_workers
    return line + (f"; stall-free from {free} loader worker{'s' if free != 1 else ''}"
                   if free is not None else "; no loader-worker count removes the stall")


def _inputs(a: argparse.Namespace, params: dict[str, Any]):
    """The input pipeline the flags ask for (None: data in place) and whether
    --loader-workers is 'auto'."""
    from dlperf import workloads
    from dlperf.cli.dataflow_flags import use_data_dir
    from dlperf.kinds.dataflow.plan import resolve

    use_data_dir(a)
    auto = a.loader_workers == "auto"
    values = given(a, **({"loader_workers": 0} if auto else {}))
    if values in ({}, {"input": "synthetic"}) or (auto and "input" not in values):
        if auto or len(values) > 1:
            raise UsageError("--loader-workers and the other input flags need --input disk "
                             "or memory")
        return None, False
    batch = a.batch_size or workloads.get(a.network).default_batch
    opts, _ = resolve(values, a.network, a.size, params, batch)
    return opts, auto


def _add_shapes(a: argparse.Namespace) -> None:
    """A calibration scoped to other networks (the main job's) gets this network's layer
    shapes at the batch each process runs added first (seconds: a worker's share, a
    pipeline's micro-batch), so that its step is predicted from its own kernels; a
    pipeline's micro-batch of a few samples is added to a whole-grid calibration too,
    whose curve misses such shapes by up to a fifth (``LocalFit.timed_exactly``; they
    enter it as residuals near their own shapes: ``perfmodel.fit.grid_anchor``), and so
    are a network's convolutions or products where the grid's curves miss them
    (``fit.grid_misses``). Only for the network as defined (its shapes are the default
    size's)."""
    import sys

    from dlperf import api, workloads
    from dlperf.cli.progress import ProgressListener
    from dlperf.perfmodel.fit import grid_misses
    from dlperf.perfmodel.predict import process_batch

    if a.size or a.param:
        return
    batch = process_batch(a.batch_size or workloads.get(a.network).default_batch,
                          a.strategy, a.devices, a.micro_batches)
    if batch is None:  # a configuration the model refuses, with its reason
        return
    framework, threads = a.framework or "torch", a.threads or 1
    missed = grid_misses(framework, a.device, threads,
                         (x.op for x in workloads.get(a.network).layers()))
    fit = api.lacking_shapes(a.network, batch, framework=framework, threads=threads,
                             device=a.device, precision=a.precision, db=a.db,
                             exact=a.strategy == "pipeline" or bool(missed))
    if fit is None:
        return
    timed = (f"timed for {', '.join(fit.scope)}" if fit.scope else
             f"the whole grid, whose curves miss {framework}'s {' and '.join(missed)} at "
             f"{threads} threads" if missed else
             "the whole grid, no product at a pipeline's micro-batch")
    print(f"adding {a.network}@{batch}'s kernel shapes to the calibration of {fit.label} "
          f"({timed})", file=sys.stderr)
    with ProgressListener(to_stderr=True) as listener:
        api.calibrate([fit.framework], [fit.threads], db=a.db, device=a.device,
                      allreduce=False, listener=listener, precision=a.precision,
                      scope=[(workloads.get(a.network).name, batch)])


def _catalogue_input(a: argparse.Namespace, p, inputs, auto: bool):
    """A catalogue device's step on an input pipeline: this machine's loader costs, the
    device's host cores (a GPU's, from the catalogue or --host-cores)."""
    from dlperf import api
    from dlperf.kinds.dataflow.prediction import catalogue_storage, with_input
    from dlperf.perfmodel import catalogue

    dev = catalogue.device(a.device)
    if dev.kind == "gpu":
        cores = a.host_cores or dev.host_cores
        if cores is None:
            raise UsageError(f"the catalogue names no host CPU for {dev.name}: give its "
                             "cores with --host-cores")
        threads = 1
        link = catalogue.link(dev.host_link).bytes_per_s if dev.host_link else None
    else:
        if a.host_cores:
            raise UsageError("--host-cores applies to a GPU; a CPU's cores are its own")
        cores = dev.cores or 1
        threads, link = min(a.threads or cores, cores), None
    storage = None
    if inputs.cache == "cold" and not a.storage:
        raise UsageError(f"--cache cold on {dev.name}: give the storage it reads from with "
                         "--storage NAME ('dlperf devices' lists them)")
    if a.storage:
        try:
            storage = catalogue_storage(catalogue.storage_entry(a.storage))
        except UsageError as e:
            raise UsageError(f"--storage: {e}") from None
    p = with_input(p, inputs, api.loader_costs(db=a.db), framework=a.framework or "torch",
                   params=args.parse_params(a.param), threads=threads, cores=cores,
                   auto_workers=auto, host_link_bytes_per_s=link, storage=storage)
    return p.model_copy(update={"notes": [*p.notes, (
        f"the loader's cost per sample is this machine's, its cores taken as fast as "
        f"{dev.name}'s host's ({cores} cores feed it)")]})


def _device_count(a: argparse.Namespace) -> None:
    """--device NAME:N (as 'dlperf advise --hardware' writes it) is --device NAME --devices
    N; a count that is not a whole number of at least 1, or that another --devices
    contradicts, is one line."""
    name, sep, count = a.device.rpartition(":")
    if not sep:
        return
    if not count.isdigit() or int(count) < 1 or not name:
        raise UsageError(f"--device: '{a.device}' is not NAME:COUNT with a count of at least 1 "
                         "(for example a100-40gb:8)")
    if a.devices not in (1, int(count)):
        raise UsageError(f"--device {a.device} and --devices {a.devices} disagree; give one")
    a.device, a.devices = name, int(count)


def cmd_predict(a: argparse.Namespace) -> int:
    from dlperf.kinds.dataflow.analysis import stall_share
    from dlperf.perfmodel import predict
    from dlperf.report.exporters import print_table
    from dlperf.report.tables import Table

    _device_count(a)
    measured = None
    kw: dict[str, Any] = dict(
        size=a.size, batch_size=a.batch_size, precision=a.precision, devices=a.devices,
        nodes=a.nodes, strategy=a.strategy, link=a.link, inter_link=a.inter_link,
        collective=a.collective, groups=a.groups, micro_batches=a.micro_batches,
        straggler_s=a.straggler_delay, params=args.parse_params(a.param))
    inputs, auto = _inputs(a, kw["params"])
    row = None
    if a.device in LOCAL_DEVICES:  # this machine's calibration, and its measurement
        from dlperf import api

        if a.host_cores or a.storage:
            raise UsageError("--host-cores and --storage apply to a catalogue device; this "
                             "machine's cores and storage are its own")
        _add_shapes(a)
        p, row = api.predict_here_row(a.network, device=a.device, framework=a.framework,
                                      threads=a.threads or 1, db=a.db, inputs=inputs,
                                      auto_workers=auto, **kw)
        measured = row.median_s if row else None
    else:
        p = predict(a.network, device=a.device, threads=a.threads, framework=a.framework,
                    memory_margin=_catalogue_margin(a.device), **kw)
        if inputs is not None:
            p = _catalogue_input(a, p, inputs, auto)
    stall = stall_share(row) if row is not None else None
    if a.json:
        doc = p.model_dump()
        if measured is not None:
            doc.update(measured_s=measured, error=p.time_s / measured - 1)
        if stall is not None:
            doc["measured_stall_share"] = stall
        print(json.dumps(doc, indent=1))
        return 0
    links = ", ".join(f"{k} {v}" for k, v in p.links.items())
    print(f"{p.network} ({p.size}), batch {p.batch_size}, {p.precision}, {p.devices} x "
          f"{p.device} on {p.nodes} node{'s' if p.nodes > 1 else ''}, {p.strategy}"
          + (f" ({links})" if links else ""))
    print(f"predicted {units.seconds(p.time_s)} per mini-batch, "
          f"{p.samples_per_s:.4g} samples/s, {units.flops(p.flops_per_step)} per step")
    if measured is not None:
        print(f"measured  {units.seconds(measured)} per mini-batch (this machine, the store): "
              f"error {p.time_s / measured - 1:+.1%}")
    elif a.device in LOCAL_DEVICES:
        print("measured  - (the store has no measurement of this configuration here)")
    if a.device in LOCAL_DEVICES:
        print(validated_line(p.validated_error))
    if p.input is not None:
        print(input_line(p.input, stall))
    print(memory_line(p))
    if p.mfu is not None:
        print(f"MFU {units.percent(p.mfu)} of {p.mfu_peak}")
    elif p.mfu_peak:
        print(f"MFU {p.mfu_peak}")
    b = p.breakdown
    rows = [[name.removesuffix("_s"), units.seconds(v), units.percent(v / p.time_s)]
            for name, v in b.model_dump().items() if v]
    print_table(Table(title="Where the time goes", headers=["term", "time", "share"],
                      rows=rows), out)
    if a.layers:
        print_table(Table(title="Layers", headers=["layer", "op", "bound", "time", "FLOPs",
                                                   "bytes"],
                          rows=[[x.name, x.op, x.bound, units.seconds(x.time_s),
                                 units.flops(x.flops), units.nbytes(x.bytes)]
                                for x in p.layers]), out)
    for k, names in enumerate(p.stages or []):
        print(f"  stage {k}: {names[0]} .. {names[-1]} ({len(names)} layers)")
    for note in p.notes:
        print(f"  note: {note}")
    print(f"  calibration: {p.calibration}")
    return 0

