"""How far to trust a prediction of this machine: the model's validated error for the
kind of configuration predicted, read from what the store measured here.

The error is taken over other networks only, as the DLBench table's 'validated error'
column takes it (``validate.predictor``), so that it says how the model does on a network
it was not checked on, which is what a prediction of an unmeasured configuration is:

- one step: the steps measured here with the same framework, device and precision, of
  other networks; where the calibration did not time the predicted network's layer
  shapes (a calibration scoped to other networks), the steps predicted with their own
  shapes held out (``validate.untimed_cases``), the same kind of prediction;
- a parallel run: the runs measured here with the same strategy and number of workers,
  of other networks at the same size (the tiny networks' runs are a regime of their own:
  their steps are milliseconds of fixed costs).

The figure is the 90th percentile of the absolute error, beside its median and the
count; none from fewer than two configurations.
"""

from __future__ import annotations

import statistics

from dlperf.core.spec import RunSpec
from dlperf.core.store import Store
from dlperf.kinds.calibrate import validate
from dlperf.perfmodel.machine_fits import MachineFits
from dlperf.perfmodel.result import Prediction, ValidatedError

#: the fewest configurations a validated error is read from
AT_LEAST = 2


def _size(spec: RunSpec) -> str:
    return spec.size or "full"


def with_time_error(store: Store, calibration: MachineFits, p: Prediction, *, framework: str,
                    device: str, threads: int, params: dict | None = None) -> Prediction:
    """``p``, a prediction of this machine's ``device`` from ``calibration`` by
    ``validate.predict_here`` (of the network with ``params``), with its validated error
    (``time_error``)."""
    spec = RunSpec(network=p.network, size=p.size, framework=framework, device=device,
                   threads=threads, precision=p.precision, batch_size=p.batch_size,
                   params=params or {})
    return p.model_copy(update={"validated_error": time_error(
        store, calibration, spec, p.strategy, p.devices)})


def time_error(store: Store, calibration: MachineFits, spec: RunSpec,
               strategy: str = "single", workers: int = 1) -> ValidatedError | None:
    """The validated error of a prediction of ``spec`` (module docstring); None where the
    store holds fewer than ``AT_LEAST`` configurations of that kind."""
    net, fw = spec.network, validate.framework(spec)
    if strategy == "single":
        timed = validate.step_shapes_timed(calibration, spec)
        pool = (validate.cases(store, calibration, kinds=("step",))[0] if timed
                else validate.untimed_cases(store))
        what = (f"steps of other networks measured here with {fw} at {spec.precision}"
                + ("" if timed else ", predicted with their own layer shapes held out"))
        errors = validate.other_steps_errors(pool, spec)
    else:
        pool = validate.cases(store, calibration, kinds=("parallel",))[0]
        errors = [abs(c.error) for c in pool
                  if c.prediction.strategy == strategy and c.prediction.devices == workers
                  and c.row.spec.network != net and _size(c.row.spec) == _size(spec)]
        what = f"{strategy} runs of other networks on {workers} workers measured here"
    if len(errors) < AT_LEAST:
        return None
    return ValidatedError(p90=validate.p90(errors), median=statistics.median(errors),
                          n=len(errors), basis=what)
