"""The precision axis on the CPU: each backend's settings are applied and read back, the
mixed precisions really compute in bf16/fp16, and what a CPU cannot run is 'unsupported'
with its reason. The GPU side is in test_gpu.py."""

from __future__ import annotations

import pytest

from dlperf import workloads
from dlperf.backends.base import UnsupportedError
from dlperf.core.spec import RunSpec
from dlperf.engine.launch import run_isolated
from tests.conftest import FAST

torch = pytest.importorskip("torch")
from dlperf.backends import torch_backend  # noqa: E402


@pytest.fixture
def torch_be():
    be = torch_backend.TorchBackend()
    yield be
    be.set_precision("fp32", "cpu")  # the flags are process-wide: leave them as fp32


def test_torch_fp32_turns_tf32_and_reduced_reductions_off_and_tf32_on(torch_be):
    on = torch_be.set_precision("tf32", "gpu")  # the flags can be set without a GPU
    assert on["cuda.matmul.allow_tf32"] and on["cudnn.allow_tf32"]
    assert on["float32_matmul_precision"] == "high"
    off = torch_be.set_precision("fp32", "cpu")
    assert off == {
        "cuda.matmul.allow_tf32": False, "cudnn.allow_tf32": False,
        "cuda.matmul.allow_fp16_reduced_precision_reduction": False,
        "cuda.matmul.allow_bf16_reduced_precision_reduction": False,
        "float32_matmul_precision": "highest", "autocast": None, "grad_scaler": False,
    }
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32


def test_tf32_on_a_cpu_is_unsupported(torch_be):
    with pytest.raises(UnsupportedError, match="no TF32"):
        torch_be.set_precision("tf32", "cpu")


@pytest.mark.parametrize("precision, dtype", [("bf16", "bfloat16"), ("fp16", "float16")])
def test_torch_mixed_precision_computes_in_the_reduced_type(torch_be, precision, dtype):
    torch_be.set_precision(precision, "cpu")
    cfg = workloads.get("fcn5").config("tiny")
    trainer = torch_be.build("fcn5", cfg, 4, "eager", "cpu", 0)
    seen = []
    trainer.model.fc1.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    before = trainer.model.fc1.weight.detach().clone()
    trainer.step()
    assert seen == [getattr(torch, dtype)]
    assert trainer.model.fc1.weight.dtype == torch.float32  # fp32 master weights
    assert not torch.equal(before, trainer.model.fc1.weight)  # the update happened
    assert (trainer._scaler is not None) == (precision == "fp16")


def test_the_families_refuse_mixed_precision(torch_be):
    torch_be.set_precision("bf16", "cpu")
    with pytest.raises(UnsupportedError, match="DLBench networks only"):
        torch_be.build("rbm", workloads.get("rbm").config("tiny"), 4, "eager", "cpu", 0)


def test_jax_runs_fp32_only_and_says_why():
    pytest.importorskip("jax")
    from dlperf.backends import jax_backend

    be = jax_backend.JaxBackend()
    assert be.set_precision("fp32", "cpu") == {"jax_default_matmul_precision": "highest"}
    for p in ("bf16", "fp16"):
        with pytest.raises(UnsupportedError, match="not built for the jax backend"):
            be.set_precision(p, "cpu")
    with pytest.raises(UnsupportedError, match="no TF32"):
        be.set_precision("tf32", "cpu")


def test_a_bf16_run_records_its_precision_and_tf32_on_the_cpu_fails_cleanly():
    spec = RunSpec(network="fcn5", size="tiny", batch_size=8, precision="bf16", measurement=FAST)
    r = run_isolated(spec, timeout_s=120)
    assert r.ok, r.failure
    assert r.spec.precision == "bf16" and r.precision_in_force["autocast"] == "torch.bfloat16"
    r = run_isolated(spec.model_copy(update={"precision": "tf32"}), timeout_s=120)
    assert r.failure.reason == "unsupported" and "no TF32" in r.failure.message


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_tensorflow_mixed_precision_policy_and_loss_scale(precision):
    pytest.importorskip("tensorflow")
    import keras

    from dlperf.backends import tf_backend

    be = tf_backend.TensorFlowBackend()
    try:
        flags = be.set_precision(precision, "cpu")
        assert flags["keras_policy"] == tf_backend.POLICIES[precision]
        assert flags["tensor_float_32_execution"] is False
        trainer = be.build("fcn5", workloads.get("fcn5").config("tiny"), 4, "graph", "cpu", 0)
        dense = trainer.model.get_layer("fc1")
        assert dense.compute_dtype == {"bf16": "bfloat16", "fp16": "float16"}[precision]
        assert dense.kernel.dtype == "float32"
        assert isinstance(trainer.opt, keras.mixed_precision.LossScaleOptimizer) == (
            precision == "fp16")
        trainer.step()
        assert trainer.loss() == trainer.loss()  # finite, not nan
    finally:
        assert be.set_precision("fp32", "cpu")["keras_policy"] == "float32"
