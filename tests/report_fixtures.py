"""Results made by the tests (no benchmark runs): stores for report, import and advice
tests, and a stand-in for another machine."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from dlperf import workloads
from dlperf.core import environment
from dlperf.core.spec import FailureReason, Metrics, RunResult, RunSpec

OTHER_ID = "bbbb2222cccc3333"
OTHER_MACHINE = {"hostname": "server", "cpu_model": "Other CPU 9000", "cpu_vendor": "x",
                 "physical_cores": 16, "logical_cpus": 32, "usable_cpus": 32, "cpu_flags": [],
                 "hypervisor": False, "memory_bytes": 64 * 2**30, "gpus": [],
                 "os": "Linux", "python": "3.11"}


def result(network: str, threads: int, median: float | None = None, *, framework: str = "torch",
           batch: int | None = None, size: str = "full", fail: FailureReason | None = None,
           cv: float = 0.02, started: float | None = None) -> RunResult:
    spec = RunSpec(network=network, framework=framework, threads=threads, size=size,
                   batch_size=batch or workloads.get(network).default_batch)
    t0 = started if started is not None else time.time()
    if fail:
        return RunResult.failed(spec, fail, f"{fail} in a test", started_at=t0,
                                finished_at=t0 + 1)
    m = Metrics(steps=5, median_s=median, mean_s=median, std_s=median * cv, min_s=median * 0.98,
                max_s=median * 1.03, mad_s=median * cv, iqr_s=median * cv, cv=cv,
                samples_per_s=spec.batch_size / median, flops_per_step=1e9)
    return RunResult(spec=spec, status="ok", metrics=m, step_times_s=[median] * 5,
                     threads_in_force=threads, started_at=t0, finished_at=t0 + 1)


def fcn5_table(store, scale: float = 1.0) -> None:
    """fcn5 and alexnet, torch and tensorflow at 1, 2, 4 threads (4 slower than 2, as on a
    2-core machine), one alexnet failure."""
    for fw, times in (("torch", (1.0, 0.6, 0.9)), ("tensorflow", (0.8, 0.5, 0.45))):
        for t, s in zip((1, 2, 4), times, strict=True):
            store.add(result("fcn5", t, s * scale, framework=fw))
    store.add(result("alexnet", 1, 2.0 * scale))
    store.add(result("alexnet", 2, fail="timeout"))


@contextlib.contextmanager
def other_machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Results stored inside are those of another machine (16 cores, 'Other CPU 9000')."""
    with monkeypatch.context() as m:
        m.setattr(environment, "machine", lambda: dict(OTHER_MACHINE))
        m.setattr(environment, "machine_id", lambda: OTHER_ID)
        yield
