"""What each kind of run takes and gives: its typed options (part of a run's identity)
and its typed outcome (what the worker found besides the metrics).

Adding a kind: one module here with its options and outcome, its line in ``KINDS``, and
what the worker does with it (``dlperf.worker``). Nothing here imports a framework.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlperf.kinds.base import Diagnostics, Frozen, Payload
from dlperf.kinds.dataflow import DataflowOutcome, LoaderOptions, StorageOptions, StorageOutcome
from dlperf.kinds.inference import InferenceOptions, InferenceOutcome
from dlperf.kinds.kernel import KernelOptions, KernelOutcome
from dlperf.kinds.parallel import ParallelOptions, ParallelOutcome
from dlperf.kinds.peak import KernelRate, Peak, PeakOptions
from dlperf.kinds.profile import ProfileOptions, ProfileOutcome
from dlperf.kinds.step import StepOptions, StepOutcome
from dlperf.kinds.train import TrainOptions, TrainOutcome


@dataclass(frozen=True)
class KindInfo:
    options: type[Frozen]
    outcome: type[Payload] | None  # None: the metrics say everything


#: kind -> its options and outcome
KINDS: dict[str, KindInfo] = {
    "step": KindInfo(StepOptions, StepOutcome),
    "peak": KindInfo(PeakOptions, None),
    "train": KindInfo(TrainOptions, TrainOutcome),
    "parallel": KindInfo(ParallelOptions, ParallelOutcome),
    "inference": KindInfo(InferenceOptions, InferenceOutcome),
    # data flow: an input pipeline alone; a storage's read bandwidth (dlperf.dataflow)
    "loader": KindInfo(LoaderOptions, DataflowOutcome),
    "storage": KindInfo(StorageOptions, StorageOutcome),
    # the performance model's calibration kernels (dlperf.calibrate)
    "kernel": KindInfo(KernelOptions, KernelOutcome),
    # one network's steps under the framework's profiler (dlperf explain)
    "profile": KindInfo(ProfileOptions, ProfileOutcome),
}

Options = (StepOptions | PeakOptions | TrainOptions | ParallelOptions | InferenceOptions
           | LoaderOptions | StorageOptions | KernelOptions | ProfileOptions)
Outcome = (StepOutcome | TrainOutcome | ParallelOutcome | InferenceOutcome | DataflowOutcome
           | StorageOutcome | KernelOutcome | ProfileOutcome)

__all__ = ["KINDS", "DataflowOutcome", "Diagnostics", "LoaderOptions", "StorageOptions",
           "StorageOutcome", "InferenceOptions", "InferenceOutcome", "KernelOptions", "KernelOutcome", "KernelRate",
           "KindInfo", "Options", "Outcome",
           "ParallelOptions", "ParallelOutcome", "Peak", "PeakOptions", "ProfileOptions",
           "ProfileOutcome", "StepOptions",
           "StepOutcome", "TrainOptions", "TrainOutcome"]
