"""GPU paths: the framework's own device handling, timed with device synchronisation.
Skipped on a machine without a GPU."""

from __future__ import annotations

import pytest

from dlperf.core.spec import RunSpec
from dlperf.engine.launch import run_isolated
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


def test_device_clock_times_the_device_not_the_host():
    """A batch-norm step's host side (autograd's start) outlasts its device work on a
    small input: the device clock must time less than the wall clock, and a spin of known
    length queued with the calls must show in it."""
    from dlperf.backends.torch_kernels import kernel
    from dlperf.core.spec import Measurement
    from dlperf.core.timing import measure
    from dlperf.kinds.calibrate.run import GPU_CALLS, Queued

    m = Measurement(min_time_s=0.05, min_steps=5, warmup_min_steps=2, warmup_max_steps=6)
    bn = Queued(kernel("bn", (8, 64, 8), "gpu"), GPU_CALLS)
    assert bn.elapsed() is not None
    device = measure(bn.step, bn.sync, m, clock=bn.elapsed()).steps_s
    wall = measure(bn.step, bn.sync, m).steps_s
    assert min(device) < min(wall)
    clock = bn.clock
    clock.start()
    torch.cuda._sleep(int(0.005 * clock._cycles_per_s))  # 5 ms of device work
    clock.stop()
    torch.cuda.synchronize()
    assert 0.004 < clock.elapsed() < 0.008
    assert Queued(kernel("dispatch", (4,), "gpu"), GPU_CALLS).elapsed() is None


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_gpu_run_over_its_memory_limit_is_out_of_memory(framework):
    """--memory-limit on a GPU is the device's: a limit under a run's device peak is
    recorded as out of memory (PyTorch's allocator capped, JAX's judged by its peak), and
    one over it runs."""
    if framework == "jax":
        pytest.importorskip("flax")
    # JAX's is judged by its peak, exact to the byte: a tiny network compiles in seconds
    # (a full one took over a minute on one core); PyTorch's allocator reserves 2 MiB
    # segments, which a tiny network's peak would not fill
    size = "tiny" if framework == "jax" else "full"
    spec = RunSpec(network="fcn5", size=size, device="gpu", framework=framework,
                   batch_size=64, measurement=FAST)
    free = run_isolated(spec, timeout_s=300)
    assert free.ok, free.failure
    peak = free.metrics.device_peak_bytes
    assert peak > (400 * 2**20 if size == "full" else 0)  # full: weights and gradients
    over = run_isolated(spec, timeout_s=300, memory_limit_bytes=int(peak * 0.8))
    assert not over.ok and over.failure.reason == "oom", over.failure
    under = run_isolated(spec, timeout_s=300, memory_limit_bytes=int(peak * 1.5))
    assert under.ok, under.failure
