"""What a kind of run is to the rest of dlperf: one ``Kind`` per kind, listed in ``KINDS``.

Core reads a kind's types (``KindTypes``: options, outcome, label); the engine's worker
runs its body in a fresh process (``run``), or the engine runs it in its own process
(``launcher="in_process"``, a run that needs no framework) or under torchrun
(``launcher="torchrun"``); the report takes its sections (``sections``), in the order of
``KINDS``. A kind's entry (``kinds/<name>/__init__.py``) imports its options eagerly and
its run body and sections only when they are called, so reading a spec loads neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dlperf.core.kind_table import KindTypes
from dlperf.core.spec import RunResult, RunSpec

#: (spec, backend, emit, base, resume) -> RunResult: the body a worker runs. ``base`` holds
#: what every result carries (CPUs, threads and precision in force, software); ``resume``
#: what an interrupted run of the same spec had measured (calibration kernels), or None.
RunBody = Callable[[RunSpec, Any, Callable[[dict[str, Any]], None], dict[str, Any], Any],
                   RunResult]
#: (store, output folder, filters) -> a report section, or None without data
SectionBuilder = Callable[[Any, Path, Any], Any]


@dataclass(frozen=True)
class Kind(KindTypes):
    #: the body a fresh worker process runs (launcher "worker"), or the engine itself
    #: ("in_process": no framework, no backend: ``run(spec, None, emit, {}, None)``)
    run: RunBody | None = None
    launcher: Literal["worker", "torchrun", "in_process"] = "worker"
    #: predictor -> the kind's report sections, in report order (predictor: a
    #: performance model for the predicted cells, or None)
    sections: Callable[[Any], list[SectionBuilder]] | None = None
    #: spec -> the thread count whose fp32 peak the run's achieved FLOP/s is a share of
    #: (None: no share); the engine measures or finds that peak before the runs
    share_threads: Callable[[RunSpec], int | None] | None = None
    #: whether --memory-limit applies (a peak kernel needs tens of MB beside its
    #: framework: a framework killed under a workload's limit would lose the peak)
    memory_limited: bool = True
    #: a killed worker's progress events -> the outcome it had measured, kept on its
    #: stored failure (None: nothing worth keeping)
    salvage: Callable[[list[dict[str, Any]]], Any] | None = None
    #: the latest stored result of a spec -> what its next run starts from (``resume``)
    resume_from: Callable[[RunResult], Any] | None = None
    #: a result -> (the result without them, the runs of other kinds its worker measured
    #: besides: a calibration's peak kernels), each stored as a run of its own
    beside: Callable[[RunResult], tuple[RunResult, list[RunResult]]] | None = None
