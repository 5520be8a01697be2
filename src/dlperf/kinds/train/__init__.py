"""Training to a quality target: the rule (``rules``: goals, budget, options in force), the
quality measures on held-out data (``quality``) and the single-process loop run inside a
worker (``loop``). ``dlperf train`` and ``dlperf parallel --target-accuracy`` share the
rule; nothing here but ``loop`` runs a framework, and ``loop`` only through the backend
it is handed.
"""

from __future__ import annotations

from dlperf.kinds.kind import Kind
from dlperf.kinds.train.options import TrainOptions, TrainOutcome


def _run(spec, backend, emit, base, resume=None):
    from dlperf.kinds.train.run import run_training

    return run_training(spec, backend, emit, base)


def _check(spec):
    """A spec built anywhere is checked as ``dlperf train`` checks it: the network has a
    target and every option applies to it (``resolve.check_options``)."""
    from dlperf.core.errors import UsageError
    from dlperf.kinds.train.resolve import check_options

    try:
        check_options(spec.network, spec.options)
    except UsageError as e:
        raise ValueError(str(e)) from None


def _sections(predictor):
    from dlperf.kinds.train.experiments_section import sections

    return sections()


KIND = Kind(options=TrainOptions, outcome=TrainOutcome, check=_check, run=_run,
            sections=_sections)
