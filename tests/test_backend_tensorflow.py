"""The TensorFlow backend: parameter counts, FLOPs from TensorFlow's profiler, numerical
parity with the PyTorch backend, and the thread count a real worker runs with.

Everything runs at the ``tiny`` size except the full-size parameter counts, which build
the Keras models (no data, no step).
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from dlperf import workloads  # noqa: E402
from dlperf.backends import tf_backend  # noqa: E402
from dlperf.backends.base import UnsupportedError  # noqa: E402

NETWORKS = ("fcn5", "fcn8", "alexnet", "resnet50", "lstm32", "lstm64")
BATCH = 4


@pytest.fixture(scope="module")
def backend() -> tf_backend.TensorFlowBackend:
    return tf_backend.TensorFlowBackend()


def _tiny(name: str):
    return workloads.get(name).config("tiny")


def _batch(name: str, cfg, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A batch in the neutral layout: images NCHW, tokens (N, T), integer targets."""
    if name.startswith("lstm"):
        shape = (BATCH, cfg.seq_len)
        return rng.integers(0, cfg.vocab, shape), rng.integers(0, cfg.vocab, shape)
    x = rng.standard_normal((BATCH, *cfg.input_shape())).astype(np.float32)
    return x, rng.integers(0, cfg.classes, (BATCH,))


# ----------------------------------------------------------------------------- counts
@pytest.mark.parametrize("name", NETWORKS)
def test_tiny_params_and_flops_match_workload(backend, name):
    wl = workloads.get(name)
    trainer = backend.build(name, _tiny(name), BATCH, "graph", "cpu", 0)
    assert trainer.param_count == wl.param_count("tiny")
    assert trainer.batch_size == BATCH
    flops = trainer.flops_per_step()
    expected = wl.train_flops(BATCH, "tiny")
    assert flops == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("name", NETWORKS)
def test_full_size_param_count(name):
    wl = workloads.get(name)
    model, _ = tf_backend.build_model(wl.config("full"))
    try:
        assert tf_backend.trainable_params(model) == wl.param_count("full")
    finally:
        del model
        tf_backend.keras.backend.clear_session()


def test_profiler_counts_are_adjusted_not_replaced(backend):
    """The raw profiler overcounts AlexNet's convolution gradients (padded inputs) and
    holds conv1's pruned input gradient; the adjusted count keeps only what runs."""
    cfg = _tiny("alexnet")
    trainer = backend.build("alexnet", cfg, BATCH, "graph", "cpu", 0)
    graph = trainer._step.get_concrete_function(trainer.x, trainer.y).graph
    by_type = tf_backend.profile_flops(graph)
    assert set(by_type) == {"MatMul", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"}
    # weight gradients cost what the forward products cost; input gradients skip conv1
    assert by_type["Conv2DBackpropFilter"] == by_type["Conv2D"]
    conv1 = next(layer for layer in cfg.layers() if layer.name == "conv1")
    assert by_type["Conv2DBackpropInput"] == by_type["Conv2D"] - BATCH * conv1.fwd_flops


# ----------------------------------------------------------------------------- trainer
def test_step_trains_and_set_batch_converts_layout(backend):
    cfg = _tiny("alexnet")
    trainer = backend.build("alexnet", cfg, BATCH, "graph", "cpu", 0)
    x, y = _batch("alexnet", cfg, np.random.default_rng(1))
    trainer.set_batch(x, y)
    assert tuple(trainer.x.shape) == (BATCH, cfg.image, cfg.image, cfg.channels_in)
    np.testing.assert_array_equal(trainer.x.numpy()[1, 2, 3, :], x[1, :, 2, 3])
    losses = []
    for _ in range(5):
        trainer.step()
        trainer.sync()
        losses.append(trainer.loss())
    assert all(np.isfinite(losses))
    assert losses[-1] < losses[0]  # the same batch again and again: SGD must fit it


def _alexnet_2x2():
    """Tiny AlexNet on 64x64 images: its last feature map is 2x2, not 1x1 as at the tiny
    size, so the (C, H, W) / (H, W, C) row order of fc1 matters."""
    cfg = replace(_tiny("alexnet"), image=64)
    assert cfg.feature_side() == 2
    return cfg


def test_weights_round_trip_with_neutral_row_order(backend):
    cfg = _alexnet_2x2()
    trainer = backend.build("alexnet", cfg, BATCH, "graph", "cpu", 0)
    w = trainer.get_weights()
    side, c = cfg.feature_side(), cfg.convs[-1].out
    assert w["fc1.w"].shape == (c * side * side, cfg.fc[0])
    assert w["conv1.w"].shape == (11, 11, 3, cfg.convs[0].out)
    # row (c, h, w) of the neutral layout is row (h, w, c) of the Keras kernel
    kernel = trainer.model.get_layer("fc1").kernel.numpy()
    ch, h, ww = 2, 1, 0
    np.testing.assert_array_equal(
        w["fc1.w"][ch * side * side + h * side + ww], kernel[(h * side + ww) * c + ch]
    )
    rng = np.random.default_rng(2)
    new = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in w.items()}
    trainer.set_weights(new)
    back = trainer.get_weights()
    for k in new:
        np.testing.assert_array_equal(back[k], new[k])


def test_gpu_without_gpu_is_unsupported(backend):
    if backend.has_gpu():
        pytest.skip("a GPU is visible")
    with pytest.raises(UnsupportedError):
        backend.build("fcn5", _tiny("fcn5"), BATCH, "graph", "gpu", 0)


def test_matmul_probe(backend):
    probe = backend.matmul(64, "cpu")
    probe.step()
    probe.sync()
    assert probe.flops_per_step() == 2 * 64**3
    np.testing.assert_allclose(probe._out.numpy(), probe.a.numpy() @ probe.b.numpy(),
                               rtol=1e-4, atol=1e-3)


def test_software_reports_versions(backend):
    sw = backend.software()
    assert sw["tensorflow"] == tf.__version__
    assert sw["keras"].startswith("3.")
    assert sw["keras_backend"] == "tensorflow"
    assert isinstance(sw["onednn"], bool)
    assert any("CPU" in d for d in sw["devices"])


# ----------------------------------------------------------------------------- parity
@pytest.mark.parametrize("variant", ["graph", "xla"])
@pytest.mark.parametrize("name", NETWORKS)
def test_one_step_matches_pytorch(backend, name, variant):
    """From the same weights and batch, one SGD step gives the same loss and weights.

    Tolerances, for fp32: the losses agree to rtol 1e-5 (about 80 ulp; the two
    frameworks sum in different orders, observed differences are <= 1e-7). The updated
    weights agree elementwise to rtol 1e-5, atol 1e-7 (an ulp of a weight near 1; |w| <= 1
    here, observed differences <= 2e-8). Since lr * grad is small next to the weights, the
    update w0 - w1 itself is compared too, per tensor in norm: it carries each weight's
    rounding (~ulp(w)/2), which is up to 1e-3 of the tiny embedding updates, so 1e-2;
    a wrong gradient (a missing term, a permuted row, BN epsilon 1e-3) is off by far more.
    """
    _check_parity(backend, name, _tiny(name), variant)


def test_one_step_matches_pytorch_with_2x2_feature_map(backend):
    """fc1's rows are permuted between the layouts only when the feature map is > 1x1."""
    _check_parity(backend, "alexnet", _alexnet_2x2(), "graph")


def _check_parity(backend, name: str, cfg, variant: str) -> None:
    from dlperf.backends.torch_backend import TorchBackend

    torch_tr = TorchBackend().build(name, cfg, BATCH, "eager", "cpu", 0)
    tf_tr = backend.build(name, cfg, BATCH, variant, "cpu", 1)  # other seed: other weights
    w0 = torch_tr.get_weights()
    assert set(w0) == set(tf_tr.get_weights())
    tf_tr.set_weights(w0)
    x, y = _batch(name, cfg, np.random.default_rng(0))
    torch_tr.set_batch(x, y)
    tf_tr.set_batch(x, y)

    torch_tr.step()
    tf_tr.step()
    tf_tr.sync()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: float() of a tensor that requires grad
        torch_loss = torch_tr.loss()
    assert tf_tr.loss() == pytest.approx(torch_loss, rel=1e-5)

    w_torch, w_tf = torch_tr.get_weights(), tf_tr.get_weights()
    for k in w0:
        np.testing.assert_allclose(w_tf[k], w_torch[k], rtol=1e-5, atol=1e-7, err_msg=k)
        d_torch, d_tf = w0[k] - w_torch[k], w0[k] - w_tf[k]
        assert np.linalg.norm(d_torch) > 0, f"{k} was not updated"
        rel = np.linalg.norm(d_tf - d_torch) / np.linalg.norm(d_torch)
        assert rel < 1e-2, f"{k}: update differs by {rel:.2e} (relative, in norm)"

    if variant == "xla" and not name.startswith("lstm"):
        # the traced graph of the jit-compiled step is counted (XLA compiles it at the call);
        # the language model's count comes from an unrolled twin, the same in both variants
        flops = tf_tr.flops_per_step()
        assert flops == pytest.approx(workloads.get(name).train_flops(BATCH, "tiny"), rel=0.01)


# ----------------------------------------------------------------------------- worker
@pytest.mark.slow
def test_worker_applies_thread_count():
    from dlperf.core.spec import Measurement, RunSpec
    from dlperf.engine.launch import run_isolated

    def run(threads: int):
        return run_isolated(RunSpec(
            network="fcn5", size="tiny", framework="tensorflow", variant="graph",
            threads=threads, batch_size=BATCH, measurement=Measurement(min_time_s=0.3),
        ))

    with ThreadPoolExecutor(2) as pool:  # two fresh processes; most of each is the import
        results = list(pool.map(run, (1, 2)))
    for threads, r in zip((1, 2), results, strict=True):
        assert r.ok, r.failure
        assert r.threads_in_force == threads
        assert r.software["framework"] == "tensorflow"
        assert r.param_count == workloads.get("fcn5").param_count("tiny")
        assert r.metrics.flops_per_step == pytest.approx(
            workloads.get("fcn5").train_flops(BATCH, "tiny"), rel=0.01
        )


def test_a_worker_imports_tensorflow_without_keras_optional_extras():
    """Keras's scikit-learn and matplotlib hooks and TensorFlow Lite's JAX hook are skipped
    while a worker imports TensorFlow (1.2-1.5 s and 0.25-0.7 s a process), and each
    imports as usual afterwards."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from dlperf import backends\n"
            "from dlperf.backends.lean_import import skipping_extras\n"
            "with skipping_extras('tensorflow'):\n"
            "    backends.load('tensorflow')\n"
            "skipped = [m for m in ('sklearn', 'matplotlib', 'jax') if m in sys.modules]\n"
            "import sklearn.datasets, matplotlib, jax.numpy\n"
            "print(skipped, 'sklearn.datasets' in sys.modules, 'jax.numpy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[] True True"
