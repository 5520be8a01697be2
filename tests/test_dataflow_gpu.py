"""Data flow on a GPU: host-to-device copies (pageable, pinned), prefetching to the
device, and the framework's per-process memory cap. Skipped without a CUDA GPU."""

from __future__ import annotations

import pytest

from dlperf.core.spec import RunSpec
from dlperf.engine.launch import run_isolated
from dlperf.kinds.dataflow import plan as dplan
from dlperf.kinds.dataflow.analysis import dataflow_of
from tests.conftest import FAST

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")]


def gpu_spec(kind: str = "step", batch: int = 8, **values) -> RunSpec:
    opts, _ = dplan.resolve({"input": "memory", "samples": 32, **values}, "alexnet", "tiny",
                            None, batch)
    return RunSpec(kind=kind, network="alexnet", size="tiny", device="gpu", batch_size=batch,
                   measurement=FAST, options=opts.to_options())


@pytest.mark.parametrize("pin", [False, True])
def test_a_loader_run_on_the_gpu_times_the_copy_of_each_batch(pin):
    r = run_isolated(gpu_spec("loader", pin_memory=pin), timeout_s=300)
    assert r.ok, r.failure
    o = dataflow_of(r)
    assert o.h2d_s > 0 and o.h2d_bytes == 8 * 3 * 32 * 32 * 4 + 8 * 8


def test_prefetching_to_the_device_trains():
    r = run_isolated(gpu_spec(pin_memory=True, prefetch=2), timeout_s=300)
    assert r.ok, r.failure
    assert dataflow_of(r).compute_median_s > 0


def test_a_device_memory_cap_makes_a_large_batch_run_out_of_memory():
    r = run_isolated(gpu_spec(batch=32, device_memory_bytes=1 << 20), timeout_s=300)
    assert not r.ok and r.failure.reason == "oom"
