"""Advice for catalogue hardware (``--hardware a100-40gb:8``), from the performance model.

Each candidate network trains at its DLBench or guide default batch per device, so N
devices take N times that batch per step (the usual way to add devices); every strategy
the model knows for N devices is tried and the fastest kept. Every number here is a
prediction, shown with the model's validated error for that kind of configuration from
the ``errors`` lookup (``report.published_time.catalogue_error``: the catalogue's error
over the GPU steps dlperf ships), or "error not validated yet" without one. The framework
is not a term of the model: the framework advice is what this machine measured, said as
such.
"""

from __future__ import annotations

from dlperf import workloads
from dlperf.advice import common
from dlperf.advice.hardware import Hardware
from dlperf.advice.local import measured
from dlperf.advice.records import ErrorLookup, HardwareAdvice, Predicted, Recommendation, Unknown
from dlperf.advice.tasks import Task
from dlperf.core import units
from dlperf.core.aggregate import ConfigResult
from dlperf.core.errors import UsageError
from dlperf.kinds.dataflow.transfer import transfer_time
from dlperf.perfmodel import catalogue, predict
from dlperf.perfmodel.predict import training_memory
from dlperf.perfmodel.result import Prediction
from dlperf.report.published_memory import GpuMemoryError
from dlperf.report.published_time import BASIS as ERROR_BASIS
from dlperf.report.published_time import scaled

BASIS = "datasheet rates x public efficiency factors (dlperf predict --json shows them)"
#: a catalogue GPU's basis (``perfmodel.scaled``): its prediction carries a note saying so
SCALED_BASIS = ("a calibrated GPU's kernel curves scaled to this one's datasheet (dlperf "
                "predict --json shows them)")


def basis(p: Prediction) -> str:
    """What the prediction stands on: scaled kernel curves or the datasheet roofline."""
    return SCALED_BASIS if scaled(p) else BASIS


def strategies(devices: int) -> list[str]:
    """What the model can run on this many devices: one device alone, or the data-parallel
    strategies (mixed needs groups of two), the pipeline and fully sharded data
    parallelism."""
    if devices == 1:
        return ["single"]
    return ["sync", "async", *(["mixed"] if devices > 2 and devices % 2 == 0 else []),
            "pipeline", "fsdp"]


def best_prediction(net: str, size: str, hw: Hardware) -> tuple[Prediction | None, str]:
    """The fastest strategy (most samples per second) that fits the devices' memory for
    ``hw`` (the fastest of all when none fits), or None and why not."""
    wl = workloads.get(net)
    batch = wl.default_batch * hw.count
    found, why = [], ""
    for s in strategies(hw.count):
        try:
            found.append(predict(net, device=hw.device, size=size, batch_size=batch,
                                 devices=hw.count, strategy=s))
        except UsageError as e:
            why = str(e)
    if not found:
        return None, why
    return fastest_that_fits(found), ""


def fastest_that_fits(found: list[Prediction]) -> Prediction:
    """The most samples per second among the predictions that fit their devices' memory
    (a prediction without a memory verdict counts as fitting), else among all."""
    return max(found, key=lambda p: (p.fits is not False, p.samples_per_s))


def _source(p: Prediction, errors: ErrorLookup | None) -> Predicted:
    cfg = (f"{p.network} [{p.size}] batch {p.batch_size}, {p.devices} x {p.device}, "
           f"{p.strategy}, {p.precision}")
    error = errors(p) if errors else None
    return Predicted(cfg, error, basis(p) + (f"; {ERROR_BASIS}" if error is not None else ""))


def advise_catalogue(task: Task, hw: Hardware, here: list[ConfigResult], samples: int, epochs: float,
                     errors: ErrorLookup | None = None,
                     gpu_memory_error: GpuMemoryError | None = None) -> HardwareAdvice:
    """``here``: this machine's step rows, for the framework advice only."""
    dev = catalogue.device(hw.device)
    recs: list[Recommendation] = []
    best: list[tuple[float, str, str, Prediction]] = []
    for cand in task.candidates:
        for size in common.sizes(cand.network):
            name = common.name(cand.network, size)
            p, why = best_prediction(cand.network, size, hw)
            if p is None:
                recs.append(Recommendation("network", name, f"{name}: the model cannot "
                                           f"predict it ({why})", None, "h", Unknown(
                                               f"dlperf predict -n {cand.network} --size {size} "
                                               f"-d {hw.device}", why="not predicted")))
                continue
            h = common.hours(samples, epochs, p.samples_per_s)
            recs.append(Recommendation("network", name, f"{name}: {common.duration(h)} for "
                                       f"{epochs:g} epochs at {p.samples_per_s:.4g} samples/s "
                                       f"({p.strategy})", h, "h", _source(p, errors)))
            recs.append(_batch(cand.network, size, dev, gpu_memory_error))
            best.append((h, cand.network, size, p))
        recs.append(_framework(cand.network, here))
    if best:  # devices and data for the task's first candidate the model predicts
        h, net, size, p = best[0]
        recs += _devices(net, size, hw, samples, epochs, errors)
        recs.append(_data(net, size, p, dev, errors))
    notes = [f"{dev.description}: {dev.fp32_tflops:g} TFLOP/s fp32, {dev.memory_gb:g} GB; "
             f"batch per device: each network's default"]
    return HardwareAdvice(hw.label(), tuple(recs), tuple(notes))


def _framework(net: str, here: list[ConfigResult]) -> Recommendation:
    mine = [r for r in here if r.spec.network == net and r.measured]
    if not mine:
        return Recommendation("framework", net, f"{net}: the model has no framework term, "
                              "and no framework was measured on it here", None, "s",
                              Unknown(common.sweep_command(net, None, "all", [1])))
    top = min(mine, key=lambda r: r.median_s / r.spec.batch_size)
    return Recommendation("framework", net, f"{net}: the model has no framework term; on "
                          f"this machine {top.framework_label} was fastest", top.median_s, "s",
                          measured(top))


def _batch(net: str, size: str, dev: catalogue.Device,
           gpu_error: GpuMemoryError | None) -> Recommendation:
    """The largest batch that fits the device; on a GPU with the memory model's error
    over the GPU peaks dlperf measured (``report.published_memory``) left as margin, its
    90th percentile, as this machine's largest batch leaves its own (``local._batch``)."""
    gpu = dev.kind == "gpu"
    limit = dev.memory_gb * 1e9
    error, basis = (gpu_error.p90, gpu_error.describe()) if gpu and gpu_error else (None, "")
    b = common.largest_fitting(lambda b: training_memory(
        net, size=size, batch_size=b, on_device=gpu), limit, error)
    name = common.name(net, size)
    more = " or more" if b == common.MAX_BATCH else ""
    spare = f", leaving {error:.0%} for the model's error" if error is not None else ""
    return Recommendation("batch", name, f"{name}: about {b}{more} per device fit in "
                          f"{dev.memory_gb:g} GB{spare} (weights, gradients, kept activations)",
                          float(b), "samples",
                          Predicted(f"memory estimate of {name} at batch {b}", error, basis))


def _devices(net: str, size: str, hw: Hardware, samples: int, epochs: float,
             errors: ErrorLookup | None) -> list[Recommendation]:
    """Each strategy on all the devices, against one device at the same batch per device."""
    one, _ = best_prediction(net, size, Hardware(hw.device, 1))
    if hw.count == 1 or one is None:
        return []
    wl = workloads.get(net)
    out = []
    for s in strategies(hw.count):
        try:
            p = predict(net, device=hw.device, size=size, batch_size=wl.default_batch * hw.count,
                        devices=hw.count, strategy=s)
        except UsageError:
            continue
        eff = p.samples_per_s / (hw.count * one.samples_per_s)
        h = common.hours(samples, epochs, p.samples_per_s)
        comm = p.breakdown.communication_s / p.time_s
        out.append((h, Recommendation(
            "devices", common.name(net, size), f"{hw.count} devices, {s}: "
            f"{common.duration(h)} to train, efficiency {units.percent(eff)} against one "
            f"device, communication {units.percent(comm)} of the step"
            + (f"; needs {units.nbytes(p.memory_bytes)} per device: does not fit"
               if p.fits is False else ""), h, "h",
            _source(p, errors))))
    out.sort(key=lambda x: x[0])
    return [r for _, r in out]


def _data(net: str, size: str, p: Prediction, dev: catalogue.Device,
          errors: ErrorLookup | None) -> Recommendation:
    """Storage against the predicted rate, and the input's host-to-device copy against the
    predicted step (prefetching hides a copy shorter than the step)."""
    per_sample = common.sample_bytes(net, size)
    text = common.storage_verdict(p.samples_per_s * per_sample)
    if dev.kind == "gpu" and dev.host_link:
        link = catalogue.link(dev.host_link)
        copy = transfer_time(per_sample * p.batch_size / p.devices, link.gbps)
        text += (f"; copying a step's input over {link.name} takes {units.seconds(copy)}, "
                 f"{units.percent(copy / p.time_s)} of the step"
                 + (" (prefetching hides it)" if copy < p.time_s else " (longer than the "
                    "step: the copy is the bottleneck)"))
    return Recommendation("data", common.name(net, size), text,
                          p.samples_per_s * per_sample / 1e6, "MB/s", _source(p, errors))
