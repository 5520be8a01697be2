"""DLBench's Table 4 on the model's side: which framework stands beside each of the
paper's tools, today's model of the paper's machines (``predicted``), and this machine's
measurements at the paper's batches (``here_times``)."""

from __future__ import annotations

from functools import cache

from dlperf.core import environment
from dlperf.core.aggregate import ConfigResult, aggregate
from dlperf.core.errors import UsageError
from dlperf.core.store import Store
from dlperf.kinds.step.plain import fullest
from dlperf.perfmodel.predict import predict
from dlperf.reference import Table4, table4_machine

#: the paper's tool -> the framework measured beside it here
FRAMEWORK = {"torch": "torch", "tensorflow": "tensorflow"}
#: why a tool of the paper has no measurement here (docs/frameworks.md)
ABSENT = {"caffe": "Caffe: nothing installable here (docs/frameworks.md)",
          "cntk": "CNTK: no release for this Python (docs/frameworks.md)"}
CLASSES = {"FCN": ("fcn5", "fcn8"), "CNN": ("alexnet", "resnet50"), "RNN": ("lstm32", "lstm64")}
#: the paper's columns set beside the model: its desktop on all 4 cores, its GPU
DESKTOP, GPU = "d4", "gtx1080"


@cache
def predicted(network: str, column: str, batch: int) -> float | None:
    """Today's model of the paper's machine for a column ('d4': the desktop at 4 threads)."""
    device, threads = table4_machine(column)
    try:
        return predict(network, device=device, threads=threads, batch_size=batch).time_s
    except UsageError:
        return None


def here_times(store: Store, t4: Table4) -> dict[tuple[str, str], dict[int, ConfigResult]]:
    """This machine's CPU steps at the paper's batches: (network, framework) -> threads ->
    the measured row (the fullest settings where several were measured)."""
    rows = aggregate(store.results(kind="step", network=t4.networks, device="cpu",
                                   machine_id=environment.machine_id()))
    return fullest((r for r in rows if r.spec.batch_size == t4.batch.get(r.spec.network)),
                   lambda r: (r.spec.network, r.spec.framework))
