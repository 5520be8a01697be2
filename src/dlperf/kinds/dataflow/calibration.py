"""The loaders' cost per sample on this machine, for the input-pipeline model
(``perfmodel.input_pipeline``): one loader-alone run (kind "loader") per framework, data
shape and source, with no workers and no prefetch, so that its wall time is one core's
work. Small batches of a small data set (``CALIBRATION_BATCH`` of ``CALIBRATION_SAMPLES``)
keep each run to seconds and apart from every run a user measures (their identity
differs), so the model is never fitted on a pipeline run it is compared with. Imports no
framework.

    dlperf calibrate --dataflow --frameworks torch       # measures them (resumable)
    costs(store)                                         # {(framework, data): LoaderCost}
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from dlperf import workloads
from dlperf.core import environment
from dlperf.core.errors import UsageError
from dlperf.core.spec import Measurement, RunSpec
from dlperf.core.store import Store
from dlperf.inputs import datasets
from dlperf.inputs.options import InputOptions
from dlperf.kinds.dataflow.options import DataflowOutcome, LoaderOptions
from dlperf.perfmodel.input_pipeline import LoaderCost

CALIBRATION_BATCH = 8
CALIBRATION_SAMPLES = 64
#: the frameworks with an input pipeline in dlperf (docs/dataflow.md)
FRAMEWORKS = ("torch", "tensorflow", "jax")
MEASUREMENT = Measurement(min_time_s=0.5, min_steps=5, warmup_max_steps=6,
                          warmup_max_time_s=10.0)


def sources(config: Any) -> list[dict[str, Any]]:
    """The input settings a network's data can come in: image files of each format and
    raw records for images, raw records for the rest, and the decoded set in memory."""
    formats = ["jpeg", "png", "raw"] if datasets.for_network(config, 1, "raw").kind == "image" \
        else ["raw"]
    return [*({"input": "disk", "data_format": f} for f in formats), {"input": "memory"}]


def data_key(config: Any, opts: InputOptions) -> str:
    """What a loader's cost per sample depends on: the sample's shape and where it comes
    from ('image 224x224x3 jpeg', 'tokens 32 memory')."""
    fmt = opts.data_format if opts.input == "disk" else "raw"
    spec = datasets.for_network(config, 1, fmt)
    shape = "x".join(map(str, spec.shape))
    return f"{spec.kind} {shape} {fmt if opts.input == 'disk' else 'memory'}"


def specs(frameworks: Sequence[str], networks: Sequence[str] | None = None) -> list[RunSpec]:
    """One calibration run per framework, data shape and source the networks need (the
    DLBench networks when None); networks whose data share a shape share the run."""
    dlbench = [n for n, w in workloads.WORKLOADS.items() if w.group == "dlbench"]
    out: dict[tuple[str, str], RunSpec] = {}
    for net in networks or dlbench:
        if net not in dlbench:
            raise UsageError(f"--dataflow: input pipelines are built for the DLBench "
                             f"networks ({', '.join(dlbench)}), not {net}")
        _, size, cfg = workloads.resolve(net, None, None)
        for values in sources(cfg):
            opts = LoaderOptions.model_validate({**values, "samples": CALIBRATION_SAMPLES})
            for fw in frameworks:
                if fw not in FRAMEWORKS:
                    continue
                key = (fw, data_key(cfg, opts))
                out.setdefault(key, RunSpec(
                    kind="loader", network=net, size=size, framework=fw, threads=1,
                    batch_size=CALIBRATION_BATCH, measurement=MEASUREMENT, options=opts))
    return list(out.values())


def key_of(spec: RunSpec) -> tuple[str, str]:
    """(framework, data key) of a loader run."""
    _, _, cfg = workloads.resolve(spec.network, spec.size, spec.params)
    return spec.framework, data_key(cfg, spec.options)


def is_calibration(spec: RunSpec) -> bool:
    o = spec.options
    return (spec.kind == "loader" and isinstance(o, LoaderOptions)
            and spec.batch_size == CALIBRATION_BATCH and spec.threads == 1
            and o.samples == CALIBRATION_SAMPLES and o.loader_workers == 0
            and o.prefetch == 0 and not o.sample_delay_s and o.cache == "warm"
            and not o.autotune)


def costs(store: Store, machine_id: str | None = None) -> dict[tuple[str, str], LoaderCost]:
    """(framework, data key) -> the newest calibrated cost per sample on this machine."""
    out: dict[tuple[str, str], tuple[float, LoaderCost]] = {}
    for r in store.results(kind="loader", status="ok", batch_size=CALIBRATION_BATCH,
                           threads=1, machine_id=machine_id or environment.machine_id()):
        o = r.outcome
        if not is_calibration(r.spec) or not isinstance(o, DataflowOutcome) \
                or not o.loader_samples_per_s or r.metrics is None:
            continue
        key = key_of(r.spec)
        when = r.finished_at or 0.0
        if key in out and out[key][0] >= when:
            continue
        stages = ({k: v / CALIBRATION_BATCH for k, v in o.prep.model_dump().items()}
                  if o.prep is not None and o.prep.total_s > 0 else {})
        out[key] = (when, LoaderCost(
            framework=r.spec.framework, data=key[1], per_sample_s=1.0 / o.loader_samples_per_s,
            stages=stages, sample_bytes=o.data_set_bytes / CALIBRATION_SAMPLES
            if r.spec.options.input == "disk" else 0.0, source=(
                f"{r.spec.framework}'s loader alone, {CALIBRATION_BATCH}-sample batches of "
                f"{CALIBRATION_SAMPLES} samples, no workers, "
                f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(when))}")))
    return {k: v for k, (_, v) in out.items()}


def cost_for(table: dict[tuple[str, str], LoaderCost], framework: str, network: str,
             size: str | None, params: dict[str, Any] | None, opts: InputOptions
             ) -> LoaderCost:
    """The calibrated cost of ``framework``'s loader on ``network``'s data as ``opts``
    bring it; one UsageError line naming the command that measures it when missing."""
    if framework not in FRAMEWORKS:
        raise UsageError(f"{framework} has no input pipeline in dlperf (those of "
                         f"{', '.join(FRAMEWORKS)} do)")
    _, _, cfg = workloads.resolve(network, size, params)
    key = data_key(cfg, opts)
    got = table.get((framework, key))
    if got is None:
        raise UsageError(f"{framework}'s loader is not calibrated here for {key}: run "
                         f"'dlperf calibrate --dataflow --frameworks {framework} --networks "
                         f"{network}' (seconds per data set)")
    return got
