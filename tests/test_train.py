"""Time to target: options, quality measures, stopping at the target, budget failures,
reproducibility, the DBN's two phases, the CLI and the store. In-process, tiny shapes;
one worker subprocess for the command end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlperf.cli import main
from dlperf.core.errors import UsageError
from dlperf.core.spec import RunResult, RunSpec
from dlperf.core.store import Store
from dlperf.kinds.train.quality import mmd2, neg_elbo
from dlperf.kinds.train.resolve import check_options

torch = pytest.importorskip("torch")

from dlperf.backends.torch_backend import TorchBackend  # noqa: E402
from dlperf.kinds.train.run import run_training  # noqa: E402


def as_dict(r: RunResult) -> dict:
    """The run's typed outcome as plain data."""
    return r.outcome.model_dump()

def train(network: str, size: str = "tiny", seed: int = 0, params=None, **options):
    spec = RunSpec(
        kind="train",
        network=network,
        size=size,
        batch_size=32,
        seed=seed,
        params=params or {},
        options=options,
    )
    events: list[dict] = []
    r = run_training(spec, TorchBackend(), events.append, {"threads_in_force": 1})
    return r, events


# ----------------------------------------------------------------------------- options
@pytest.mark.parametrize(
    "network, options, message",
    [
        ("ffn", {"speed": 1}, "unknown training option 'speed'"),
        ("ffn", {"max_steps": 0}, "max_steps must be positive"),
        ("ffn", {"max_steps": 2.5}, "max_steps must be a number"),
        ("ffn", {"max_time_s": -1}, "max_time_s must be positive"),
        ("ffn", {"target": "high"}, "target must be a number"),
        ("ffn", {"stop_at_target": "yes"}, "true or false"),
        ("ffn", {"pretrain_epochs": 2}, "dbn only"),
        ("fcn5", {}, "no training target"),
    ],
)
def test_bad_options_are_usage_errors(network, options, message):
    with pytest.raises(UsageError, match=message):
        check_options(network, options)


def test_defaults_fill_in_and_none_disables_the_target():
    o = check_options("gan", {"target": "none", "max_time_s": 5})
    assert o["target"] is None and o["max_time_s"] == 5.0 and o["max_steps"] == 20000
    assert check_options("rnn", {})["target"] == 0.9


# ----------------------------------------------------------------------------- measures
def test_mmd_is_near_zero_for_one_distribution_and_large_for_another():
    rng = np.random.default_rng(0)
    a, b = rng.random((300, 64)), rng.random((300, 64))
    same = mmd2(a, b, scale=3.0)
    other = mmd2(a, 0.5 * b, scale=3.0)
    assert abs(same) < 0.01 < other
    assert mmd2(a, a + 0.1, scale=3.0) < other  # closer samples, smaller discrepancy


def test_numpy_elbo_matches_torch():
    from dlperf.backends.torch_families import neg_elbo as torch_elbo

    rng = np.random.default_rng(1)
    logits, x = rng.normal(size=(5, 64)), rng.random((5, 1, 8, 8))
    mu, logvar = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    t = torch_elbo(*(torch.as_tensor(v) for v in (logits, x, mu, logvar))).mean()
    assert neg_elbo(logits, x, mu, logvar) == pytest.approx(float(t), rel=1e-9)


# ----------------------------------------------------------------------------- the loop
def test_training_stops_at_the_target():
    r, events = train("ffn", "small", target=0.7, eval_every=5, max_steps=2000)
    assert r.ok, r.failure
    e = as_dict(r)
    curve = e["curve"]
    assert e["target_reached"] and curve[-1][2] >= 0.7
    assert all(q < 0.7 for _, _, q in curve[:-1])  # it stopped at the first evaluation past it
    assert e["steps"] == e["steps_to_target"] == curve[-1][0] and e["steps"] % 5 == 0
    assert e["time_to_target_s"] == curve[-1][1] == e["train_s"] > 0
    assert e["eval_s"] > 0 and e["epochs"] == pytest.approx(e["steps"] * 32 / e["n_train"])
    assert r.metrics.steps == e["steps"] and r.param_count == 9610
    assert [ev["phase"] for ev in events] == ["train"] * len(events) and len(events) == len(curve)


def test_a_budget_that_ends_first_is_a_failure_that_keeps_the_curve():
    r, _ = train("autoencoder", target=1e-6, max_steps=12, eval_every=5)
    assert not r.ok and r.failure.reason == "budget"
    assert "12 steps" in r.failure.message and "not reached" in r.failure.message
    e = as_dict(r)
    assert [c[0] for c in e["curve"]] == [0, 5, 10, 12]  # a last evaluation at the end
    assert e["curve"][-1][2] < e["curve"][0][2]  # it did learn
    assert not e["target_reached"] and e["time_to_target_s"] is None
    r, _ = train("rbm", target=1e-6, max_time_s=0.3)
    assert r.failure.reason == "budget" and "0.3 s of training" in r.failure.message
    assert as_dict(r)["train_s"] >= 0.3


def test_without_a_target_the_whole_budget_is_trained():
    r, _ = train("rnn", target="none", max_epochs=1)
    assert r.ok and as_dict(r)["stopped_by"] == "1 epochs" and as_dict(r)["epochs"] >= 1


def test_a_run_is_reproducible_with_its_seed():
    def qualities(seed: int) -> list[float]:
        r, _ = train("vae", seed=seed, target="none", max_steps=10, eval_every=5)
        return [c[2] for c in as_dict(r)["curve"]] + [loss for _, loss in as_dict(r)["loss_curve"]]

    assert qualities(1) == qualities(1)
    assert qualities(1) != qualities(2)


def test_dbn_times_pretraining_and_finetuning_separately():
    r, _ = train("dbn", target="none", max_steps=10, pretrain_epochs=0.5, eval_every=5)
    e = as_dict(r)
    assert r.ok and e["pretrain_steps"] == 2 * round(0.5 * (e["n_train"] // 32))
    assert e["pretrain_s"] > 0 and e["finetune_s"] > 0
    assert e["train_s"] == pytest.approx(e["pretrain_s"] + e["finetune_s"])
    assert e["curve"][0][1] == pytest.approx(e["pretrain_s"])  # the curve starts after it
    r0, _ = train("dbn", target="none", max_steps=10, pretrain_epochs=0)
    assert as_dict(r0)["pretrain_s"] == 0 and as_dict(r0)["pretrain_steps"] == 0


def test_gan_quality_is_mmd_with_its_real_data_floor():
    r, _ = train("gan", target="none", max_steps=10, eval_every=5)
    e = as_dict(r)
    assert e["quality"]["name"] == "mmd2" and "discriminator" in e["note"]
    floor = e["quality"]["reference"]
    assert abs(floor) < 0.05 < e["curve"][0][2]  # untrained samples are far from digits


def test_recursive_trains_on_generated_trees():
    r, _ = train("recursive", target="none", max_steps=6, eval_every=3)
    assert r.ok and as_dict(r)["dataset"] == "trees" and as_dict(r)["n_test"] == 1000


def test_bad_options_make_no_spec_and_an_unsupported_one_is_recorded_not_raised():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="max_steps must be positive"):
        train("ffn", max_steps=-3)
    spec = RunSpec(kind="train", network="ffn", size="tiny", variant="compile", batch_size=4)
    r = run_training(spec, TorchBackend(), lambda e: None, {})
    assert r.failure.reason == "unsupported"


# ----------------------------------------------------------------------------- command
@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--network", "fcn5"], "has no training target"),
        (["train", "--network", "nope"], "unknown network 'nope'"),
        (["train", "--network", "ffn", "--option", "speed=2"], "unknown training option"),
        (["train", "--network", "ffn", "--target", "x"], "target must be a number"),
        (["train", "--network", "ffn", "--param", "hidden=-1"], "hidden"),
        (["train", "--network", "ffn", "--max-time", "0"], "--max-time"),
        (["train", "--network", "ffn", "--threads", "0"], "threads"),
        (["experiment", "bogus"], "unknown experiment 'bogus'"),
        (["experiment", "init-scale", "--max-time", "-1"], "--max-time"),
    ],
)
def test_bad_input_is_one_line_and_status_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dlperf: error:") and message in err[0], err


@pytest.mark.slow
def test_train_command_runs_a_worker_and_stores_the_curve(db, capsys):
    code = main(
        [
            "train",
            "--network",
            "ffn",
            "--size",
            "tiny",
            "--target",
            "0.5",
            "--max-steps",
            "400",
            "--eval-every",
            "5",
            "--threads",
            "2",
            "--db",
            str(db),
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    assert "time to target" in text and "accuracy >= 0.5" in text and "curve" in text
    with Store(db) as st:
        [r] = st.results(kind="train")
    assert r.ok and r.threads_in_force == 2 and r.env_id and as_dict(r)["target_reached"]
    assert as_dict(r)["curve"][-1][2] >= 0.5 and r.software["framework"] == "torch"
    json.dumps(as_dict(r))  # the curve is plain JSON
