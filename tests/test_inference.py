"""Inference mode (kind "inference"): forward passes only, in each framework's inference
mode. No backward pass runs (counted), batch normalisation uses its running statistics
(the same answer in every framework from the same weights), latency quantiles and
throughput are recorded, and the command sweeps batch sizes and threads."""

from __future__ import annotations

import numpy as np
import pytest

from dlperf import workloads
from dlperf.cli import main
from dlperf.core.spec import RunSpec
from dlperf.core.store import Store
from dlperf.kinds import InferenceOutcome
from dlperf.kinds.inference.options import latency_outcome
from tests.conftest import FAST

BATCH = 4


def _cfg(name: str):
    return workloads.get(name).config("tiny")


def test_latency_quantiles_and_throughput():
    times = [0.01 * k for k in range(1, 101)]  # 10 ms .. 1 s
    o = latency_outcome(times, batch_size=8, mode="m", grad_free=True)
    assert o.queries == 100
    assert o.p50_s == pytest.approx(0.505)  # numpy's linear interpolation
    assert o.p95_s == pytest.approx(np.quantile(times, 0.95))
    assert o.p99_s == pytest.approx(np.quantile(times, 0.99))
    assert o.queries_per_s == pytest.approx(1 / np.mean(times))
    assert o.samples_per_s == pytest.approx(8 * o.queries_per_s)
    with pytest.raises(ValueError):
        latency_outcome([], 1)


def test_an_inference_spec_is_its_own_configuration():
    train = RunSpec(network="fcn5", size="tiny", batch_size=4)
    infer = RunSpec(kind="inference", network="fcn5", size="tiny", batch_size=4)
    assert train.config_id != infer.config_id
    back = RunSpec.model_validate_json(infer.model_dump_json())
    assert back.kind == "inference" and back.config_id == infer.config_id


# ----------------------------------------------------------------------------- torch
def test_torch_inference_runs_no_backward_and_evaluates_in_eval_mode(monkeypatch):
    import torch

    from dlperf.backends import torch_backend as tb

    calls = []
    real = torch.autograd.backward
    monkeypatch.setattr(torch.autograd, "backward",
                        lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    cfg = _cfg("resnet50")  # batch normalisation: eval mode matters
    inf = tb.build_inference(cfg, BATCH, "eager", torch.device("cpu"), seed=0)
    for _ in range(3):
        out = inf.step()
    assert calls == []  # no backward pass
    assert not inf.model.training
    assert out.grad_fn is None and not out.requires_grad and torch.is_inference(out)
    assert inf.grad_free()
    # the same network and batch as the training build, in eval mode (running statistics)
    tr = tb.build_trainer(cfg, BATCH, "eager", torch.device("cpu"), seed=0)
    tr.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(out, tr.model(tr.x))
        tr.model.train()
        assert not torch.allclose(out, tr.model(tr.x))  # batch statistics differ
    # and the check can fail: a training step runs a backward pass and leaves gradients
    tr.step()
    assert calls == [1]
    assert any(p.grad is not None for p in tr.model.parameters())


def test_worker_times_queries_and_records_the_outcome():
    from dlperf.engine.worker import execute

    r = execute(RunSpec(kind="inference", network="resnet50", size="tiny", batch_size=BATCH,
                        measurement=FAST))
    assert r.ok, r.failure
    o = r.outcome
    assert isinstance(o, InferenceOutcome)
    assert o.queries == r.metrics.steps == len(r.step_times_s) >= FAST.min_steps
    assert min(r.step_times_s) <= o.p50_s <= o.p95_s <= o.p99_s <= max(r.step_times_s)
    assert o.samples_per_s == pytest.approx(BATCH * o.queries_per_s)
    assert o.grad_free is True and "inference_mode" in o.mode
    # forward FLOPs only: a third of a training step's for all layers past the first
    cfg = _cfg("resnet50")
    assert o.forward_flops == BATCH * sum(layer.fwd_flops for layer in cfg.layers())
    assert r.metrics.flops_per_step == o.forward_flops


def test_a_family_without_a_query_is_unsupported():
    from dlperf.engine.worker import execute

    r = execute(RunSpec(kind="inference", network="rbm", size="tiny", batch_size=4,
                        measurement=FAST))
    assert not r.ok and r.failure.reason == "unsupported"
    ok = execute(RunSpec(kind="inference", network="cnn", size="tiny", batch_size=4,
                         measurement=FAST))
    assert ok.ok and ok.outcome.grad_free


# ----------------------------------------------------------------------------- parity
def _torch_reference(name: str):
    """The torch inference output on its own batch, and its weights (neutral layout)."""
    import torch

    from dlperf.backends import torch_backend as tb

    inf = tb.build_inference(_cfg(name), BATCH, "eager", torch.device("cpu"), seed=0)
    return inf.step().numpy(), inf.x.numpy(), tb.export_weights(inf.model)


def _nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if x.ndim == 4 else x


@pytest.mark.parametrize("name", ["fcn5", "resnet50"])
def test_jax_inference_matches_torch_from_the_same_weights(name):
    jax = pytest.importorskip("jax")
    pytest.importorskip("flax")
    from dlperf.backends import jax_backend as jb

    ref, x, w = _torch_reference(name)
    inf = jb.JaxBackend().build_inference(name, _cfg(name), BATCH, "jit", "cpu", 0)
    params = jb.import_weights(inf.variables["params"], _cfg(name), w)
    inf.variables = {**inf.variables, "params": jax.device_put(params, inf.device)}
    inf.x = jax.device_put(_nhwc(x), inf.device)
    inf.step()
    inf.sync()
    np.testing.assert_allclose(np.asarray(inf._out), ref, rtol=2e-4, atol=2e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fcn5", "resnet50"])
def test_tensorflow_inference_matches_torch_and_traces_no_gradient(name):
    tf = pytest.importorskip("tensorflow")
    from dlperf.backends import tf_backend

    ref, x, w = _torch_reference(name)
    be = tf_backend.TensorFlowBackend()
    tr = be.build(name, _cfg(name), BATCH, "graph", "cpu", 0)
    tr.set_weights(w)
    inf = tf_backend.TFInference(tr.model, tf.constant(_nhwc(x)), "graph", tr.device)
    np.testing.assert_allclose(inf.step().numpy(), ref, rtol=2e-4, atol=2e-5)
    assert inf.grad_free()
    # the check can fail: the training step's graph holds gradient ops
    graph = tr._step.get_concrete_function(tr.x, tr.y).graph
    assert any("Grad" in op.type for op in graph.get_operations())


@pytest.mark.slow
def test_keras_serves_queries_with_predict_on_batch():
    pytest.importorskip("keras")
    from dlperf.engine.launch import run_isolated

    r = run_isolated(RunSpec(kind="inference", framework="keras", variant="torch",
                             network="fcn5", size="tiny", batch_size=BATCH, measurement=FAST),
                     timeout_s=300)
    assert r.ok, r.failure
    assert "predict_on_batch" in r.outcome.mode and r.outcome.grad_free is True
    assert r.outcome.p50_s <= r.outcome.p99_s


# ----------------------------------------------------------------------------- command
@pytest.mark.slow
def test_command_sweeps_batch_sizes_and_threads_and_reports(tmp_path, db, capsys):
    args = ["run", "--mode", "inference", "-n", "fcn5", "--size", "tiny", "-b", "1,4",
            "-t", "1,2", "--min-time", "0.05", "--min-steps", "3", "--warmup-time", "2",
            "--db", str(db)]
    assert main(args) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "latency per query" in text and "Found:" in text
    with Store(db) as st:
        rs = st.results(kind="inference")
    assert sorted((r.spec.threads, r.spec.batch_size) for r in rs) == [(1, 1), (1, 4), (2, 1),
                                                                        (2, 4)]
    assert all(r.ok and r.outcome.grad_free for r in rs)
    assert _report_has_inference(db, tmp_path)


def _report_has_inference(db, tmp_path) -> bool:
    rep = tmp_path / "rep"
    assert main(["report", "--db", str(db), "--out", str(rep)]) == 0
    md = (rep / "inference.md").read_text()
    return "p99" in md and (rep / "inference_latency.png").stat().st_size > 0


@pytest.mark.parametrize("args, message", [
    (["-b", "1,8"], "takes one value in train mode"),
    (["--mode", "inference", "-b", "0"], "at least 1"),
    (["--mode", "inference", "-t", "x"], "not a comma-separated list"),
])
def test_bad_input_is_one_line(args, message, capsys):
    assert main(["run", "-n", "fcn5", "--size", "tiny", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dlperf: error:") and message in err[0], err
