"""Advice: which network, framework, processing unit and thread count, how many devices
and which synchronisation, whether the data path or memory limits, for a task, a data
size and some hardware; each recommendation with its number and that number's source
(``records``). Framework-free: it reads the rows the caller passes (from the store) and
the performance model.

    advise("image-classification", samples=1_200_000, epochs=90, hardware="this,a100-40gb:8",
           rows=rows_of_this_machine)
"""

from __future__ import annotations

from collections.abc import Mapping

from dlperf.advice.data import LoaderModel
from dlperf.advice.hardware import parse_hardware, parse_samples
from dlperf.advice.local import LocalModel, MemoryMargins, advise_here
from dlperf.advice.predicted import advise_catalogue
from dlperf.advice.records import (
    Advice,
    ErrorLookup,
    HardwareAdvice,
    Measured,
    Predicted,
    Recommendation,
    Unknown,
)
from dlperf.advice.tasks import TASKS, task
from dlperf.core.aggregate import ConfigResult
from dlperf.core.errors import UsageError
from dlperf.report.published_memory import GpuMemoryError


def advise(task_name: str, *, samples: int | str, epochs: float, hardware: str = "this",
           rows: list[ConfigResult] | None = None, errors: ErrorLookup | None = None,
           memory_error: MemoryMargins | None = None,
           gpu_memory_error: GpuMemoryError | None = None,
           model: LocalModel | None = None, loader: LoaderModel | None = None,
           baselines: Mapping[str, float] | None = None) -> Advice:
    """Advice for ``task_name`` on each piece of ``hardware`` ('this', a catalogue device
    with a count, or several, comma-separated). ``rows``: this machine's aggregated step
    and parallel rows, failures included. ``errors``: the model's validated error for a
    prediction's kind of configuration (None: every prediction says "error not validated
    yet"). ``memory_error``: the memory model's validated error per framework
    (``local.MemoryMargins``), the margin of this machine's largest batch;
    ``gpu_memory_error``: its error over the GPU peaks dlperf measured, for a catalogue
    GPU's largest batch.
    ``model``: this machine's calibrated model, for what it did not measure; ``loader``:
    its input-pipeline model, for a pipeline it did not measure. ``baselines``: each
    framework's runtime memory on this CPU as calibrated here. Bad input raises
    UsageError (one line)."""
    t = task(task_name)
    n = parse_samples(samples) if isinstance(samples, str) else int(samples)
    if n < 1:
        raise UsageError(f"--samples must be at least 1, got {samples}")
    if not epochs > 0 or epochs == float("inf"):
        raise UsageError(f"--epochs must be a number above 0, got {epochs}")
    rows = rows or []
    out = []
    for hw in parse_hardware(hardware):
        if hw.is_this:
            out.append(advise_here(t, rows, n, epochs, memory_error, model, loader,
                                   baselines))
        else:
            steps = [r for r in rows if r.spec.kind == "step"]
            out.append(advise_catalogue(t, hw, steps, n, epochs, errors, gpu_memory_error))
    return Advice(t.name, n, epochs, tuple(out))


__all__ = ["TASKS", "Advice", "ErrorLookup", "HardwareAdvice", "Measured", "Predicted",
           "Recommendation", "Unknown", "advise"]
