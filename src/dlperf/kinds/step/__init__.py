"""Kind "step": time per mini-batch of one network (DLBench's measure): the options
(``options``), the worker's body (``run``), the rows and sections of the report (the
DLBench table, thread scaling, framework ranking, the guide's published thread table)."""

from __future__ import annotations

import functools

from dlperf.kinds.kind import Kind
from dlperf.kinds.step.options import StepOptions, StepOutcome


def _run(*args):
    from dlperf.kinds.step.run import run_step

    return run_step(*args)


def _sections(predictor):
    from dlperf.kinds.step import guide_section, paper_section, section, threads_section

    return [functools.partial(section.dlbench_section, predictor=predictor),
            paper_section.paper_section, threads_section.thread_section,
            threads_section.ranking_section, guide_section.guide_section]


KIND = Kind(options=StepOptions, outcome=StepOutcome,
            label=lambda spec, label: spec.options.labelled(label), run=_run,
            sections=_sections, share_threads=lambda spec: spec.threads)
