"""Data flow: input pipelines, how long training waits for its data, storage bandwidth,
host-to-device transfer, memory limits. Framework-free (the pipelines themselves live in
backends/<framework>_input.py)."""

from __future__ import annotations

from dlperf.kinds.dataflow.options import (
    DataflowOutcome,
    LoaderOptions,
    StorageOptions,
    StorageOutcome,
)
from dlperf.kinds.kind import Kind


def _labelled(spec, label):
    return spec.options.labelled(label)


def _run_loader(spec, backend, emit, base, resume=None):
    from dlperf.kinds.dataflow.run import run_dataflow  # a real input pipeline

    return run_dataflow(spec, backend, emit, base)


def _run_storage(spec, backend, emit, base, resume=None):
    from dlperf.kinds.dataflow.storage_run import run_storage

    return run_storage(spec)


def _sections(predictor):
    from dlperf.kinds.dataflow.section import dataflow_section

    return [dataflow_section]


#: kind "loader": an input pipeline alone, no training
LOADER = Kind(options=LoaderOptions, outcome=DataflowOutcome, label=_labelled,
              run=_run_loader, sections=_sections)
#: kind "storage": a storage's read bandwidth, measured in the dlperf process itself
#: (fio is a process of its own; no framework is needed)
STORAGE = Kind(options=StorageOptions, outcome=StorageOutcome, label=_labelled,
               run=_run_storage, launcher="in_process")
