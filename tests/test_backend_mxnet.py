"""The MXNet backend: parameter counts, numerical parity with the PyTorch backend, the
thread count a real worker runs with, and the one-line answer when its environment is
missing.

MXNet 1.9.1 needs numpy<1.24 and lives in an environment of its own (``dlperf setup
mxnet``), so its side runs in that interpreter (tests/mxnet_child.py), exchanging weights
and batches with this process through .npz files: one child process for every case. The
tests that need the environment skip, saying how to create it, when it is absent.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dlperf import workloads
from dlperf.cli import main
from dlperf.core import framework_table
from dlperf.engine.launch.isolated import SRC_DIR

NETWORKS = ("fcn5", "fcn8", "alexnet", "resnet50", "lstm32", "lstm64")
VARIANTS = ("hybrid", "imperative")
BATCH = 4
CHILD = Path(__file__).with_name("mxnet_child.py")

needs_env = pytest.mark.skipif(
    not framework_table.installed("mxnet"),
    reason=f"no MXNet environment at {framework_table.info('mxnet').python}: "
    "create it with 'dlperf setup mxnet' (or make mxnet)",
)


def _cfg(name: str, image: int | None = None):
    cfg = workloads.get(name).config("tiny")
    return replace(cfg, image=image) if image else cfg


def _batch(name: str, cfg, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A batch in the neutral layout: images NCHW, tokens (N, T), integer targets."""
    if name.startswith("lstm"):
        shape = (BATCH, cfg.seq_len)
        return rng.integers(0, cfg.vocab, shape), rng.integers(0, cfg.vocab, shape)
    x = rng.standard_normal((BATCH, *cfg.input_shape())).astype(np.float32)
    return x, rng.integers(0, cfg.classes, (BATCH,))


#: (network, variant, image side or None): AlexNet at 64x64 has a 2x2 last feature map,
#: where fc1's (C, H, W) row order matters (at the tiny size it is 1x1)
CASES = [(n, v, None) for n in NETWORKS for v in VARIANTS] + [("alexnet", "hybrid", 64)]


@pytest.fixture(scope="module")
def parity(tmp_path_factory):
    """One step of every case in PyTorch (here) and in MXNet (the child), from the same
    weights and batch: {case: (torch trainer, initial weights, MXNet results)}."""
    from dlperf.backends.torch_backend import TorchBackend

    d = tmp_path_factory.mktemp("mxnet")
    cases, steps = {}, []
    for i, (name, variant, image) in enumerate(CASES):
        cfg = _cfg(name, image)
        torch_tr = TorchBackend().build(name, cfg, BATCH, "eager", "cpu", 0)
        w0 = torch_tr.get_weights()
        x, y = _batch(name, cfg, np.random.default_rng(i))
        torch_tr.set_batch(x, y)
        torch_tr.step()
        np.savez(d / f"in{i}.npz", x=x, y=y, **{f"w:{k}": v for k, v in w0.items()})
        steps.append({"network": name, "image": image, "variant": variant,
                      "batch_npz": str(d / f"in{i}.npz"), "out_npz": str(d / f"out{i}.npz")})
        cases[(name, variant, image)] = (torch_tr, w0, i)
    job = d / "job.json"
    job.write_text(json.dumps({"full_counts": list(NETWORKS), "steps": steps}))
    p = subprocess.run([framework_table.info("mxnet").python, str(CHILD), str(job)],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, **framework_table.info("mxnet").thread_env(1),
                            "PYTHONPATH": SRC_DIR})
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    results = {}
    for key, (torch_tr, w0, i) in cases.items():
        arrays = np.load(steps[i]["out_npz"])
        results[key] = (torch_tr, w0, out["steps"][i], arrays)
    return {"cases": results, "full_counts": out["full_counts"], "software": out["software"]}


# ----------------------------------------------------------------------------- counts
@needs_env
@pytest.mark.parametrize("name", NETWORKS)
def test_param_counts_and_flops_match_workload(parity, name):
    wl = workloads.get(name)
    assert parity["full_counts"][name] == wl.param_count("full")
    _, _, res, _ = parity["cases"][(name, "hybrid", None)]
    assert res["param_count"] == wl.param_count("tiny")
    # MXNet has no FLOP counter: the neutral definition's count, stated as such
    assert res["flops"] == wl.train_flops(BATCH, "tiny")
    assert "neutral definition" in parity["software"]["flops"]


@needs_env
def test_software_names_mxnet_and_its_numpy(parity):
    sw = parity["software"]
    assert sw["framework"] == "mxnet" and sw["mxnet"] == "1.9.1"
    assert tuple(int(v) for v in sw["numpy"].split(".")[:2]) < (1, 24)
    assert sw["python"].startswith("3.11")


# ----------------------------------------------------------------------------- parity
@needs_env
@pytest.mark.parametrize("name, variant, image", CASES)
def test_one_step_matches_pytorch(parity, name, variant, image):
    """From the same weights and batch, one SGD step gives the same loss and weights.

    Tolerances as in tests/test_backend_tensorflow.py, for fp32: losses to rtol 1e-5,
    updated weights elementwise to rtol 1e-5 / atol 1e-7, and the update w0 - w1 per
    tensor in norm to 1e-2 (it carries each weight's rounding); a wrong gradient (a
    missing term, a permuted row, a wrong gate order) is off by far more.
    """
    torch_tr, w0, res, arrays = parity["cases"][(name, variant, image)]
    assert sorted(w0) == res["names"]  # the same parameters, in the neutral names
    for k in w0:  # set_weights then get_weights gives back what was set, exactly
        np.testing.assert_array_equal(arrays[f"before:{k}"], w0[k], err_msg=k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: float() of a tensor that requires grad
        torch_loss = torch_tr.loss()
    assert res["loss"] == pytest.approx(torch_loss, rel=1e-5)

    w_torch = torch_tr.get_weights()
    for k in w0:
        w_mx = arrays[f"after:{k}"]
        np.testing.assert_allclose(w_mx, w_torch[k], rtol=1e-5, atol=1e-7, err_msg=k)
        d_torch, d_mx = w0[k] - w_torch[k], w0[k] - w_mx
        assert np.linalg.norm(d_torch) > 0, f"{k} was not updated"
        rel = np.linalg.norm(d_mx - d_torch) / np.linalg.norm(d_torch)
        assert rel < 1e-2, f"{k}: update differs by {rel:.2e} (relative, in norm)"


# ----------------------------------------------------------------------------- worker
@needs_env
@pytest.mark.slow
def test_worker_runs_in_its_environment_with_the_requested_threads():
    from dlperf.core.spec import Measurement, RunSpec
    from dlperf.engine.launch import run_isolated

    def run(threads: int):
        return run_isolated(RunSpec(
            network="fcn5", size="tiny", framework="mxnet", threads=threads,
            batch_size=BATCH, measurement=Measurement(min_time_s=0.3),
        ), timeout_s=300)

    with ThreadPoolExecutor(2) as pool:  # two fresh processes; most of each is the import
        results = list(pool.map(run, (1, 2)))
    for threads, r in zip((1, 2), results, strict=True):
        assert r.ok, r.failure
        assert r.spec.variant == "hybrid"
        # measured in the worker: the threads that shared an operator's work
        assert r.threads_in_force == threads
        assert r.software["omp_threads"] == threads
        assert r.software["numpy"].startswith("1.2")  # the MXNet environment's numpy
        assert r.param_count == workloads.get("fcn5").param_count("tiny")
        assert r.metrics.flops_per_step == workloads.get("fcn5").train_flops(BATCH, "tiny")


# ----------------------------------------------------------------------------- no env
def test_missing_environment_is_one_line_naming_the_setup(monkeypatch, capsys):
    missing = dataclasses.replace(framework_table.BACKENDS["mxnet"], python="/nonexistent/bin/python")
    monkeypatch.setitem(framework_table.BACKENDS, "mxnet", missing)
    assert not framework_table.installed("mxnet")
    assert main(["run", "--network", "fcn5", "--size", "tiny", "--framework", "mxnet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dlperf: error:")
    assert "dlperf setup mxnet" in err[0] and "DLPERF_MXNET_PYTHON" in err[0]


def test_setup_of_a_framework_without_its_own_environment_is_refused(capsys):
    assert main(["setup", "caffe"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs no environment of its own" in err[0]


def test_setup_refuses_an_interpreter_path_it_cannot_make(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("DLPERF_MXNET_PYTHON", str(tmp_path / "python"))  # not DIR/bin/python
    assert main(["setup", "mxnet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0]
