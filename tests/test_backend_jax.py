"""The JAX backend: parameter counts, FLOPs counted on the traced step, numerical parity
with the PyTorch backend, and the thread count a real worker runs with.

Everything runs at the ``tiny`` size except the full-size parameter and FLOP counts,
which use ``jax.eval_shape`` and tracing (shapes only: no memory, no compile). Each tiny
network is built once for the whole module.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flax")
optax = pytest.importorskip("optax")

from dlperf import workloads  # noqa: E402
from dlperf.backends import jax_backend, torch_backend  # noqa: E402
from dlperf.backends.base import UnsupportedError  # noqa: E402
from dlperf.core.spec import Measurement, RunSpec  # noqa: E402
from dlperf.engine.launch import run_isolated  # noqa: E402

NETWORKS = ("fcn5", "fcn8", "alexnet", "resnet50", "lstm32", "lstm64")
BATCH = 4


def _tiny(name: str):
    return workloads.get(name).config("tiny")


@functools.cache
def _trainer(name: str) -> jax_backend.JaxTrainer:
    return jax_backend.JaxBackend().build(name, _tiny(name), BATCH, "jit", "cpu", 0)


def _batch(name: str, cfg, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A batch in the neutral layout: images NCHW, tokens (N, T), integer targets."""
    if name.startswith("lstm"):
        shape = (BATCH, cfg.seq_len)
        return rng.integers(0, cfg.vocab, shape), rng.integers(0, cfg.vocab, shape)
    x = rng.standard_normal((BATCH, *cfg.input_shape())).astype(np.float32)
    return x, rng.integers(0, cfg.classes, (BATCH,))


# ----------------------------------------------------------------------------- counts
@pytest.mark.parametrize("size", ["tiny", "full"])
@pytest.mark.parametrize("name", NETWORKS)
def test_param_count_matches_workload(name, size):
    wl = workloads.get(name)
    shapes = jax_backend.param_shapes(wl.config(size))
    assert jax_backend.count_params(shapes) == wl.param_count(size)


@pytest.mark.parametrize("name", NETWORKS)
def test_tiny_trainer_counts_and_flops_match_workload(name):
    wl = workloads.get(name)
    trainer = _trainer(name)
    assert trainer.param_count == wl.param_count("tiny")
    assert trainer.batch_size == BATCH
    assert trainer.flops_per_step() == pytest.approx(wl.train_flops(BATCH, "tiny"), rel=0.01)


@pytest.mark.parametrize("name", NETWORKS)
def test_full_size_flops_match_workload(name):
    """The full-size step traced on shapes only (nothing allocated, nothing compiled)."""
    wl = workloads.get(name)
    cfg, batch = wl.config("full"), wl.default_batch
    model, tx = jax_backend.build_model(cfg), optax.sgd(jax_backend.LEARNING_RATE)
    spec = jax_backend.input_spec(cfg, batch)
    variables = jax.eval_shape(model.init, jax_backend.prng_key(0), spec)
    state = (variables["params"], variables.get("batch_stats", {}),
             jax.eval_shape(tx.init, variables["params"]))
    y = jax.ShapeDtypeStruct((batch, cfg.seq_len) if name.startswith("lstm") else (batch,),
                             jax.numpy.int32)
    step = jax.jit(jax_backend.make_train_step(model, tx, "batch_stats" in variables))
    flops = jax_backend.jaxpr_matmul_flops(step.trace(state, spec, y).jaxpr)
    assert flops == pytest.approx(wl.train_flops(batch), rel=0.01)


def test_flop_counter_counts_the_traced_ops():
    """One product of each kind, counted from the jaxpr: dots as 2*M*N*K, convolutions over
    the full window (padding included), gradient convolutions as the forward one, loops
    times their trip count."""
    jnp, lax = jax.numpy, jax.lax
    a, b = jnp.ones((8, 16)), jnp.ones((16, 32))
    assert jax_backend.jaxpr_matmul_flops(jax.make_jaxpr(jnp.matmul)(a, b)) == 2 * 8 * 16 * 32

    def conv(x, w):  # 3x3, stride 2, padding 1: 8x8 -> 4x4
        dn = ("NHWC", "HWIO", "NHWC")
        return lax.conv_general_dilated(x, w, (2, 2), ((1, 1), (1, 1)), dimension_numbers=dn)

    x, w = jnp.ones((2, 8, 8, 3)), jnp.ones((3, 3, 3, 5))
    fwd = 2 * (2 * 4 * 4 * 5) * (3 * 3 * 3)
    assert jax_backend.jaxpr_matmul_flops(jax.make_jaxpr(conv)(x, w)) == fwd
    grads = jax.make_jaxpr(jax.grad(lambda x, w: conv(x, w).sum(), argnums=(0, 1)))(x, w)
    assert jax_backend.jaxpr_matmul_flops(grads) == 3 * fwd  # forward, weight and input grad

    m = jnp.ones((16, 16))

    def scan(h, xs):
        return lax.scan(lambda h, x: (h @ m + x, None), h, xs)[0]

    h, xs = jnp.ones((4, 16)), jnp.ones((7, 4, 16))
    assert jax_backend.jaxpr_matmul_flops(jax.make_jaxpr(scan)(h, xs)) == 7 * 2 * 4 * 16 * 16


def test_xla_cost_analysis_counts_something_else():
    """Why flops_per_step does not use XLA's cost analysis: it adds elementwise work (fcn5:
    more than the matmuls) and counts a loop body once (lstm32: far less than the matmuls).
    If a future XLA fixes both, the docstring of flops_per_step needs revisiting."""
    fcn = _trainer("fcn5")
    assert fcn.xla_cost_analysis()["flops"] > 1.05 * fcn.flops_per_step()
    lstm = _trainer("lstm32")
    assert lstm.xla_cost_analysis()["flops"] < 0.95 * lstm.flops_per_step()


# ----------------------------------------------------------------------------- parity
def _assert_one_step_matches_pytorch(name: str, cfg, jx: jax_backend.JaxTrainer) -> None:
    pt = torch_backend.TorchBackend().build(name, cfg, BATCH, "eager", "cpu", 0)
    start = pt.get_weights()
    assert set(jx.get_weights()) == set(start)
    jx.set_weights(start)
    x, y = _batch(name, cfg, np.random.default_rng(7))
    pt.set_batch(x, y)
    jx.set_batch(x, y)

    pt.step()
    jx.step()
    jx.sync()
    assert jx.loss() == pytest.approx(float(pt.loss()), rel=1e-5)
    after_pt, after_jx = pt.get_weights(), jx.get_weights()
    for key, w in after_pt.items():
        assert after_jx[key].shape == w.shape, key
        np.testing.assert_allclose(after_jx[key], w, rtol=1e-5, atol=1e-6, err_msg=key)
        # the update itself (lr x gradient, ~1e-8..1e-3) must agree, not just the weights
        d_pt, d_jx = w - start[key], after_jx[key] - start[key]
        assert np.linalg.norm(d_pt) > 0, f"{key} did not move"
        err = np.linalg.norm(d_jx - d_pt)
        assert err <= 1e-3 * np.linalg.norm(d_pt) + 1e-7, (key, err, np.linalg.norm(d_pt))


@pytest.mark.parametrize("name", NETWORKS)
def test_one_step_matches_pytorch(name):
    """Same weights, same batch, one SGD step: the losses and the updated weights agree.

    Tolerances: both sides compute in fp32 but sum in different orders (oneDNN vs XLA
    kernels, Flax's one-pass batch variance vs torch's two-pass), so they differ in the
    last bits. Observed on these six networks: loss within 1.2e-7 relative, weights within
    3e-8 absolute, each tensor's update (w_after - w_before) within 3.5e-5 of its norm.
    The bounds - loss rel 1e-5; weights (|w| <~ 1) rtol 1e-5, atol 1e-6; update error
    <= 1e-3 of the update's norm + 1e-7 (fp32 cancellation in w_after - w_before) - sit
    30-100x above that, and a gradient wrong by 0.1% anywhere fails.
    """
    _assert_one_step_matches_pytorch(name, _tiny(name), _trainer(name))


def test_flattened_feature_map_rows_match_pytorch():
    """Tiny AlexNet flattens a 1x1 map, where (C,H,W) and (H,W,C) rows coincide; at 64x64
    the map is 2x2, so fc1's rows must really be permuted on the way in and out."""
    cfg = replace(_tiny("alexnet"), image=64)
    assert cfg.feature_side() == 2
    jx = jax_backend.JaxBackend().build("alexnet", cfg, BATCH, "jit", "cpu", 0)
    _assert_one_step_matches_pytorch("alexnet", cfg, jx)
    neutral = jx.get_weights()["fc1.w"]
    assert not np.array_equal(np.asarray(jx.state[0]["fc1"]["kernel"]), neutral)


def test_gpu_without_gpu_is_unsupported():
    backend = jax_backend.JaxBackend()
    if backend.has_gpu():
        pytest.skip("a GPU is visible")
    with pytest.raises(UnsupportedError):
        backend.build("fcn5", _tiny("fcn5"), BATCH, "jit", "gpu", 0)


def test_matmul_probe():
    probe = jax_backend.JaxBackend().matmul(64, "cpu")
    probe.step()
    probe.sync()
    assert probe.flops_per_step() == 2 * 64**3


def test_software_names_versions_and_devices():
    sw = jax_backend.JaxBackend().software()
    assert sw["framework"] == "jax" and sw["jax"] == jax.__version__
    assert sw["flax"] and sw["optax"] and sw["jaxlib"]
    assert sw["devices"]


# ----------------------------------------------------------------------------- threads
@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_worker_runs_with_the_requested_threads(threads):
    r = run_isolated(
        RunSpec(network="fcn5", size="tiny", framework="jax", variant="jit", threads=threads,
                batch_size=8, measurement=Measurement(min_time_s=0.3)),
        timeout_s=180,
    )
    assert r.ok, r.failure
    assert r.threads_in_force == threads
    assert r.software["xla_cpu_threads"] == threads
    assert r.metrics.flops_per_step == workloads.get("fcn5").train_flops(8, "tiny")
    assert r.param_count == workloads.get("fcn5").param_count("tiny")
