"""``dlperf explain``: one network's step under the framework's profiler (``worker``), each
op group set beside the performance model's time for it from this machine's calibrated
kernel curves (``dlperf.perfmodel.ops``), and the diagnosis (``analysis``)."""

from __future__ import annotations

from dlperf.kinds.explain.options import ProfileOptions, ProfileOutcome
from dlperf.kinds.kind import Kind


def _run(spec, backend, emit, base, resume=None):
    from dlperf.kinds.explain.run import run_profile  # a step under the profiler

    return run_profile(spec, backend, emit, base)


def _sections(predictor):
    from dlperf.kinds.explain.section import profile_section

    return [profile_section]


KIND = Kind(options=ProfileOptions, outcome=ProfileOutcome, run=_run, sections=_sections)
