"""The stored step results a section shows, one ``ConfigResult`` per configuration and
machine, and the subset a thread curve or a ranking may compare."""

from __future__ import annotations

from dlperf.core.aggregate import ConfigResult, aggregate
from dlperf.kinds.dataflow.plan import has_pipeline
from dlperf.report.base import Filters


def plain_steps(rows: list[ConfigResult]) -> list[ConfigResult]:
    """The rows a thread curve or a framework ranking may compare: on synthetic data (an
    input pipeline adds the wait for data) and with the workload's own parameters (an
    experiment's variants, such as the input-size sides, are other workloads)."""
    return [r for r in rows if not r.spec.params and not has_pipeline(r.spec)]


def step_rows(store, filters: Filters = Filters()) -> list[ConfigResult]:
    """The stored DLBench-style step results the filters select, one ConfigResult per configuration
    and machine."""
    return aggregate(store.results(kind="step", **filters.where()))
