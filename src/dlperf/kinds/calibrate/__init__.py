"""This machine's calibration of the performance model: the kernel runs (``plan``), what a
worker does with one (``worker``), and the prediction of a measured configuration from
the fitted curves (``prediction``). The model itself (``dlperf.perfmodel``) imports none
of this: it takes plain samples and fitted curves."""

from __future__ import annotations

import functools

from dlperf.kinds.calibrate.options import KernelOptions, KernelOutcome
from dlperf.kinds.kind import Kind


def _run(*args):
    from dlperf.kinds.calibrate.run import run_kernels  # the model's calibration kernels

    return run_kernels(*args)


def _salvage(events):
    from dlperf.kinds.calibrate.resume import salvage

    return salvage(events)


def _resume_from(last):
    from dlperf.kinds.calibrate.resume import resume_from

    return resume_from(last)


def _beside(result):
    from dlperf.core.spec import RunResult

    o = result.outcome
    if not isinstance(o, KernelOutcome) or not o.peak_runs:
        return result, []
    runs = [RunResult.model_validate(r) for r in o.peak_runs]
    return result.model_copy(update={"outcome": o.model_copy(update={"peak_runs": ()})}), runs


def _sections(predictor):
    from dlperf.kinds.calibrate.section import prediction_section

    return [functools.partial(prediction_section, predictor=predictor)]


def _label(spec, label):
    from dlperf.kinds.calibrate.plan import RETIMED_RUN

    return spec.options.label(spec.framework, spec.device, spec.threads,
                              again=spec.network == RETIMED_RUN)


KIND = Kind(options=KernelOptions, outcome=KernelOutcome, label=_label,
            run=_run, sections=_sections, salvage=_salvage, resume_from=_resume_from,
            beside=_beside)
