"""Kind "inference": latency per query in each framework's inference mode (``options``,
``run``, and the report's ``section``)."""

from __future__ import annotations

from dlperf.kinds.inference.options import InferenceOptions, InferenceOutcome
from dlperf.kinds.kind import Kind


def _run(*args):
    from dlperf.kinds.inference.run import run_inference

    return run_inference(*args)


def _sections(predictor):
    from dlperf.kinds.inference.section import inference_section

    return [inference_section]


KIND = Kind(options=InferenceOptions, outcome=InferenceOutcome, run=_run, sections=_sections)
