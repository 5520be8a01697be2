"""An interrupted calibration keeps what it measured: the shapes a killed kernel run had
timed come back from its progress events (``salvage``), are kept on its stored failure,
and the next run of the same spec starts from them (``resume_from``) instead of timing
them again."""

from __future__ import annotations

from typing import Any

from dlperf.core.spec import RunResult
from dlperf.kinds.calibrate.options import KernelOutcome, KernelSample


def salvage(events: list[dict[str, Any]]) -> KernelOutcome | None:
    """The calibration shapes a killed kernel run had timed (its progress events); None
    when it had timed none."""
    samples = tuple(KernelSample.model_validate(e["sample"]) for e in events
                    if e.get("phase") == "kernel" and "sample" in e)
    return KernelOutcome(samples=samples) if samples else None


def resume_from(last: RunResult) -> KernelOutcome | None:
    """What the latest run of a spec hands the next one: the shapes it timed, if it did
    not finish (a run that finished is measured anew, ``--force``)."""
    if last.ok or not isinstance(last.outcome, KernelOutcome):
        return None
    return last.outcome if last.outcome.samples else None
