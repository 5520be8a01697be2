"""The model's prediction for a RunSpec measured on this machine: what the report puts
beside every measured DLBench cell and ``dlperf validate`` compares.

    from dlperf.kinds.calibrate.prediction import predict_for_spec
    p = predict_for_spec(row.spec, calibration)     # Prediction, or None
    p.time_s, p.breakdown

``calibration`` is this machine's ``MachineFits``
(``dlperf.kinds.calibrate.plan.local_calibration(store)`` reads and fits it once; reuse
it for every spec). A step run is predicted from
the kernel curves of its framework at its thread count; a parallel run (PyTorch workers on
loopback) from PyTorch's curves at its threads per worker, the compute slowed where the
workers share cores, and the all-reduce link measured among that many processes. Imports
no framework.
"""

from __future__ import annotations

from dlperf.core import framework_table
from dlperf.core.errors import UsageError
from dlperf.core.spec import RunSpec
from dlperf.kinds.parallel.options import THROUGH_A_SERVER, ParallelOptions
from dlperf.perfmodel import predict
from dlperf.perfmodel.machine_fits import MachineFits
from dlperf.perfmodel.result import Prediction

#: the kinds of run the model predicts
PREDICTED_KINDS = ("step", "parallel")
#: the strategies the model has a formula for (``dlperf.perfmodel.predict``)
STRATEGIES = ("sync", "async", "mixed", "pipeline", "fsdp")


def why_not(spec: RunSpec, calibration: MachineFits) -> str | None:
    """None when ``predict_for_spec`` can predict ``spec``, else the reason it cannot."""
    if spec.kind not in PREDICTED_KINDS:
        return f"kind '{spec.kind}' is not predicted"
    if spec.kind == "step" and spec.variant != framework_table.info(spec.framework).default_variant:
        return f"the kernels are timed the default way, not as variant '{spec.variant}'"
    if spec.kind == "step" and spec.options.model_dump(exclude_defaults=True):
        return "the kernels know no input pipeline (a run on synthetic data only)"
    if isinstance(spec.options, ParallelOptions):
        o = spec.options
        if o.strategy not in STRATEGIES:
            return f"strategy '{o.strategy}' has no formula in the model"
        if o.push_every != 1 or o.servers or o.target_accuracy is not None:
            return "the model times steps of the plain strategies only"
    framework = "torch" if spec.kind == "parallel" else spec.framework
    fit = calibration.find(framework, spec.threads, spec.device, spec.precision)
    if fit is None:
        at = "" if spec.precision == "fp32" else f" at {spec.precision}"
        return f"{framework} at {spec.threads} thread(s){at} is not calibrated"
    if isinstance(spec.options, ParallelOptions) and spec.options.strategy == "fsdp" \
            and not (fit.allgather and fit.reducescatter):
        return ("gloo's all-gather and reduce-scatter, which fsdp's time rests on, are not "
                "calibrated ('dlperf calibrate --frameworks torch' times them)")
    return None


def predict_for_spec(spec: RunSpec, calibration: MachineFits) -> Prediction | None:
    """The predicted time per mini-batch of ``spec`` on this machine, or None when the
    model does not cover it (``why_not`` says why) or the workload cannot be predicted."""
    if why_not(spec, calibration) is not None:
        return None
    try:
        if spec.kind == "step":
            m = calibration.model(spec.framework, spec.threads, spec.device,
                                  precision=spec.precision, network=spec.network)
            return predict(spec.network, size=spec.size, params=dict(spec.params),
                           batch_size=spec.batch_size, device=m.device,
                           efficiencies=m.efficiencies, precision=spec.precision,
                           baseline_bytes=m.baseline_bytes or 0.0)
        o = spec.options
        assert isinstance(o, ParallelOptions)
        m = calibration.model("torch", spec.threads, spec.device, workers=o.workers,
                              precision=spec.precision, strategy=o.strategy,
                              network=spec.network)
        return predict(spec.network, size=spec.size, params=dict(spec.params),
                       batch_size=spec.batch_size, device=m.device, efficiencies=m.efficiencies,
                       precision=spec.precision,
                       strategy=o.strategy, devices=o.workers, nodes=o.nodes,
                       groups=o.groups if o.strategy == "mixed" else None,
                       micro_batches=o.micro_batches if o.strategy == "pipeline" else None,
                       straggler_s=o.straggler_delay_s, link=m.link, inter_link=m.link,
                       baseline_bytes=m.baseline_bytes or 0.0, cores=calibration.cores,
                       server_drift=o.strategy in THROUGH_A_SERVER)
    except UsageError:
        return None
