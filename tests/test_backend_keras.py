"""The Keras backend on each Keras backend (torch, jax, tensorflow): parameter counts,
FLOPs from the framework underneath, numerical parity of one train_on_batch step with the
PyTorch backend, and the Keras backend and thread count a real worker runs with.

Keras reads KERAS_BACKEND once, at import, so the Keras side runs in one process per
variant (tests/keras_step.py, the three started together); this module never imports
Keras. The PyTorch reference runs here. Everything is at the ``tiny`` size, except the
full-size parameter counts, which build on PyTorch's meta device (shapes only).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import dlperf
from dlperf import workloads
from dlperf.core import framework_table
from dlperf.core.spec import Measurement, RunSpec
from dlperf.engine import presets

if not framework_table.installed("keras"):
    pytest.skip("keras is not installed: pip install 'dlperf[keras]'", allow_module_level=True)

VARIANTS = framework_table.info("keras").variants
BATCH = 4
HELPER = Path(__file__).with_name("keras_step.py")
#: These tests check numbers, not speed. Keras initialises each variable with its own
#: small jitted program, and XLA:CPU's LLVM optimisation of its random-number code takes
#: about 2 s a program on two busy cores (0.1 s unoptimised): most of this module's time.
FAST_XLA = {"XLA_FLAGS": "--xla_backend_optimization_level=0"}


def _tiny(name: str):
    return workloads.get(name).config("tiny")


#: One case per kind of layer: dense + sigmoid; convolutions, pools and a flattened 2x2
#: feature map (fc1's rows are permuted between the layouts only when it is > 1x1);
#: batch norm, bottlenecks and projections; embedding and LSTMs. fcn8 and lstm64 differ
#: from fcn5 and lstm32 only in depth and length; their counts are checked below.
CASES = {
    "fcn5": ("fcn5", _tiny("fcn5")),
    "alexnet_2x2": ("alexnet", replace(_tiny("alexnet"), image=64)),
    "resnet50": ("resnet50", _tiny("resnet50")),
    "lstm32": ("lstm32", _tiny("lstm32")),
}
assert CASES["alexnet_2x2"][1].feature_side() == 2


def _variant(v: str):
    """A variant as a test parameter, skipped where its framework is missing."""
    missing = not framework_table.installed(v)
    return pytest.param(v, marks=pytest.mark.skipif(
        missing, reason=f"Keras' {v} backend needs pip install 'dlperf[{framework_table.info(v).extra}]'"))


def _batch(cfg, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A batch in the neutral layout: images NCHW, tokens (N, T), integer targets."""
    if hasattr(cfg, "seq_len"):
        shape = (BATCH, cfg.seq_len)
        return rng.integers(0, cfg.vocab, shape), rng.integers(0, cfg.vocab, shape)
    x = rng.standard_normal((BATCH, *cfg.input_shape())).astype(np.float32)
    return x, rng.integers(0, cfg.classes, (BATCH,))


@pytest.fixture(scope="module")
def torch_steps() -> dict:
    """Each case's starting weights, batch, and one PyTorch step from them."""
    from dlperf.backends.torch_backend import TorchBackend

    out = {}
    for key, (name, cfg) in CASES.items():
        tr = TorchBackend().build(name, cfg, BATCH, "eager", "cpu", 0)
        w0 = tr.get_weights()
        x, y = _batch(cfg, np.random.default_rng(0))
        tr.set_batch(x, y)
        tr.step()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # float() of a tensor that requires grad
            loss = tr.loss()
        out[key] = {"w0": w0, "x": x, "y": y, "loss": loss, "w1": tr.get_weights()}
    return out


@pytest.fixture(scope="module")
def keras_runs(torch_steps, tmp_path_factory) -> dict[str, dict]:
    """tests/keras_step.py's report for every installed variant, run side by side."""
    d = tmp_path_factory.mktemp("keras")
    cases = {k: (name, cfg, torch_steps[k]["w0"], torch_steps[k]["x"], torch_steps[k]["y"])
             for k, (name, cfg) in CASES.items()}
    (d / "cases.pkl").write_bytes(pickle.dumps(cases))
    src = str(Path(dlperf.__file__).resolve().parents[1])
    env = {**os.environ, **FAST_XLA, "PYTHONPATH": os.pathsep.join(
        p for p in (src, os.environ.get("PYTHONPATH")) if p)}

    def run(variant: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(HELPER), variant, str(d)], env=env,
                              capture_output=True, text=True, timeout=300)

    installed = [v for v in VARIANTS if framework_table.installed(v)]
    with ThreadPoolExecutor(len(installed)) as pool:
        done = dict(zip(installed, pool.map(run, installed), strict=True))
    for v, p in done.items():
        assert p.returncode == 0, f"keras/{v}: {p.stderr[-2000:]}"
    return {v: pickle.loads((d / f"{v}.pkl").read_bytes()) for v in installed}


# ----------------------------------------------------------------------------- env
@pytest.mark.parametrize("variant", VARIANTS)
def test_worker_env_names_the_keras_backend_and_its_threads(variant):
    env = framework_table.info("keras").thread_env(3, variant)
    assert env["KERAS_BACKEND"] == variant
    assert env["OMP_NUM_THREADS"] == "3"
    assert ("NPROC" in env) == (variant == "jax")  # XLA:CPU sizes its pool from NPROC
    default = framework_table.info("keras").thread_env(3)
    assert default["KERAS_BACKEND"] == framework_table.info("keras").default_variant
    assert "KERAS_BACKEND" not in framework_table.info(variant).thread_env(3)


def test_reproduce_all_includes_keras():
    names = presets.resolve_frameworks(["all"])
    assert "keras" in names and "torch" in names
    assert names == [b for b in framework_table.BACKENDS if framework_table.installed(b)]
    assert presets.resolve_frameworks(["torch", "keras"]) == ["torch", "keras"]
    cfg = presets.dlbench(quick=True, frameworks=["all"])[0][1]
    assert "keras" in cfg.frameworks


# ----------------------------------------------------------------------------- counts
@pytest.mark.parametrize("size", ["tiny", "full"])
@pytest.mark.parametrize("name", presets.DLBENCH_NETWORKS)
def test_param_count_matches_workload(keras_runs, name, size):
    if "torch" not in keras_runs:
        pytest.skip("counted on the torch variant")
    assert keras_runs["torch"]["params"][name, size] == workloads.get(name).param_count(size)


def _analytic_flops(cfg) -> int:
    return BATCH * sum(layer.train_flops() for layer in cfg.layers())


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("variant", [_variant(v) for v in VARIANTS])
def test_counts_on_each_backend(keras_runs, variant, case):
    """Parameters as the neutral definition; FLOPs from the framework's own counter, as
    its dlperf backend counts them, equal the analytic count. One exception, exact too:
    Keras' JAX LSTM runs as a scan whose reverse pass also computes the gradient of the
    zero initial state, one recurrent product (2 B 4H H) per layer that the analytic
    count (and PyTorch) leaves out."""
    name, cfg = CASES[case]
    r = keras_runs[variant]["cases"][case]
    assert r["param_count"] == sum(layer.params for layer in cfg.layers())
    expected = _analytic_flops(cfg)
    if variant == "jax" and name.startswith("lstm"):
        expected += cfg.layers_n * 2 * BATCH * 4 * cfg.hidden * cfg.hidden
    assert r["flops"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("variant", [_variant(v) for v in VARIANTS])
def test_backend_reports_itself_and_refuses_other_variants(keras_runs, variant):
    r = keras_runs[variant]
    assert r["threads"] == 1
    assert r["software"]["framework"] == "keras"
    assert r["software"]["keras_backend"] == variant
    assert r["software"]["keras"].startswith("3.")
    assert "KERAS_BACKEND" in r["other_variant"] and "UnsupportedError" in r["other_variant"]
    same, again, other = r["seeded"]
    for k in same:
        np.testing.assert_array_equal(same[k], again[k])
    assert any(not np.array_equal(same[k], other[k]) for k in same)


# ----------------------------------------------------------------------------- parity
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("variant", [_variant(v) for v in VARIANTS])
def test_one_step_matches_pytorch(keras_runs, torch_steps, variant, case):
    """From the same weights and batch, one train_on_batch step gives PyTorch's loss and
    weights. Tolerances as in test_backend_tensorflow.py (fp32: loss rtol 1e-5, weights
    rtol 1e-5 / atol 1e-7, the update w0 - w1 per tensor within 1e-2 in norm)."""
    t, r = torch_steps[case], keras_runs[variant]["cases"][case]
    assert set(r["fresh"]) == set(t["w0"])
    assert r["loss"] == pytest.approx(t["loss"], rel=1e-5)
    for k, w0 in t["w0"].items():
        w_t, w_k = t["w1"][k], r["weights"][k]
        np.testing.assert_allclose(w_k, w_t, rtol=1e-5, atol=1e-7, err_msg=k)
        d_t, d_k = w0 - w_t, w0 - w_k
        assert np.linalg.norm(d_t) > 0, f"{k} was not updated"
        rel = np.linalg.norm(d_k - d_t) / np.linalg.norm(d_t)
        assert rel < 1e-2, f"{k}: update differs by {rel:.2e} (relative, in norm)"


# ----------------------------------------------------------------------------- worker
@pytest.mark.slow
@pytest.mark.skipif(not framework_table.installed("jax"), reason="needs pip install 'dlperf[jax]'")
def test_worker_runs_the_variants_keras_backend_with_the_thread_count(monkeypatch):
    """Through the launcher: KERAS_BACKEND comes from the variant (jax here, not Keras'
    own default), and the thread count in force is the one asked for. One variant: the
    helper above checks the same environment for each."""
    from dlperf.engine.launch import run_isolated

    monkeypatch.setenv("XLA_FLAGS", FAST_XLA["XLA_FLAGS"])
    r = run_isolated(RunSpec(
        network="fcn5", size="tiny", framework="keras", variant="jax", threads=1,
        batch_size=BATCH, measurement=Measurement(min_time_s=0.2, min_steps=3),
    ), timeout_s=300)
    assert r.ok, r.failure
    assert r.threads_in_force == 1
    assert r.software["keras_backend"] == "jax"
    assert r.software["xla_cpu_threads"] == 1
    wl = workloads.get("fcn5")
    assert r.param_count == wl.param_count("tiny")
    assert r.metrics.flops_per_step == pytest.approx(wl.train_flops(BATCH, "tiny"))
