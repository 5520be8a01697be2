"""GPU paths: the framework's own device handling, timed with device synchronisation.
Skipped on a machine without a GPU."""

from __future__ import annotations

import pytest

from dlperf.launch import run_isolated
from dlperf.spec import RunSpec
from tests.conftest import FAST

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


def test_torch_gpu_run_reports_device_memory():
    r = run_isolated(RunSpec(network="fcn5", size="tiny", device="gpu", batch_size=8,
                             measurement=FAST), timeout_s=300)
    assert r.ok, r.failure
    assert r.metrics.device_peak_bytes > 0
    assert r.software["gpu"]


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16", "fp16"])
def test_torch_gpu_runs_at_each_precision_and_records_it(precision):
    r = run_isolated(RunSpec(network="fcn5", size="tiny", device="gpu", batch_size=8,
                             precision=precision, measurement=FAST), timeout_s=300)
    assert r.ok, r.failure
    flags = r.precision_in_force
    assert flags["cuda.matmul.allow_tf32"] == flags["cudnn.allow_tf32"] == (precision == "tf32")
    assert flags["grad_scaler"] == (precision == "fp16")
