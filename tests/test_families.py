"""The guide's families: exact costs, real training steps, CD-k, ELBO, GAN alternation,
tree batching, initial weight scale, reproducibility. Tiny shapes, in-process."""

from __future__ import annotations

import copy
import itertools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dlperf import workloads  # noqa: E402
from dlperf.backends import torch_families as tf  # noqa: E402
from dlperf.backends.torch_backend import TorchBackend, build_trainer, count_flops  # noqa: E402
from dlperf.core.errors import UsageError  # noqa: E402
from dlperf.kinds.train.quality import load_data  # noqa: E402
from dlperf.workloads import families as fam  # noqa: E402
from dlperf.workloads import real_data as data  # noqa: E402
from dlperf.workloads.families import FAMILIES  # noqa: E402

NAMES = list(FAMILIES)


def build(name: str, size: str = "tiny", batch: int = 16, seed: int = 0, **params):
    _, _, cfg = workloads.resolve(name, size, params or None)
    return TorchBackend().build(name, cfg, batch, "eager", "cpu", seed), cfg


def test_every_issue_name_is_a_guide_workload():
    assert NAMES == [
        "ffn",
        "autoencoder",
        "rbm",
        "dbn",
        "vae",
        "gan",
        "rnn",
        "lstm",
        "cnn",
        "deconv",
        "recursive",
    ]
    for wl in FAMILIES.values():
        assert wl.group == "guide" and wl.default_size == "small"
        assert {"tiny", "small", "large"} <= set(wl.sizes) and "init_scale" in wl.tunable
        assert workloads.get(wl.name) is wl
        # a larger size costs more per step
        assert wl.train_flops(32, "large") > wl.train_flops(32, "small") > 0


@pytest.mark.parametrize("name", NAMES)
def test_counted_params_and_flops_match_closed_form(name):
    """PyTorch's parameter count and FLOP counter (one real step) against the closed form,
    tiny on the CPU, large on the meta device (shapes only)."""
    wl = FAMILIES[name]
    t, _ = build(name, batch=3)
    assert t.param_count == wl.param_count("tiny")
    assert t.flops_per_step() == wl.train_flops(3, "tiny")
    cfg = wl.config("large")
    meta = build_trainer(cfg, 5, "eager", torch.device("meta"))
    assert meta.param_count == wl.param_count("large")
    assert count_flops(cfg, 5) == wl.train_flops(5, "large")


@pytest.mark.parametrize(
    "name, params",
    [
        ("dbn", {"phase": "pretrain", "depth": 3, "k": 2}),
        ("rnn", {"depth": 2}),
        ("lstm", {"depth": 2, "dataset": "mnist1d"}),
        ("autoencoder", {"depth": 3}),
        ("gan", {"depth": 2}),
        ("rbm", {"k": 3}),
        ("ffn", {"dataset": "mnist1d", "depth": 3}),
    ],
)
def test_variants_match_closed_form(name, params):
    t, _ = build(name, batch=2, **params)
    assert t.param_count == FAMILIES[name].param_count("tiny", params)
    assert t.flops_per_step() == FAMILIES[name].train_flops(2, "tiny", params)


def test_flop_count_changes_nothing():
    t, _ = build("gan")
    before = [p.detach().clone() for m in t.modules() for p in m.parameters()]
    t.flops_per_step()
    after = [p.detach() for m in t.modules() for p in m.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


# ----------------------------------------------------------------------------- training
def real_batch(cfg, n: int = 32):
    ds = load_data(cfg)
    return ds.x_train[:n], ds.y_train[:n]


def batch_loss(name: str, t, x, y) -> float:
    """A deterministic loss of the fixed batch, from the trainer's outputs."""
    out = t.outputs(x)
    if "logits" in out and name != "vae":
        z = out["logits"] - out["logits"].max(1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(1, keepdims=True))
        return float(-logp[np.arange(len(y)), y].mean())
    if name == "vae":
        from dlperf.kinds.train.quality import neg_elbo

        return neg_elbo(out["logits"], x, out["mu"], out["logvar"])
    return float(np.mean((out["recon"] - x) ** 2))


@pytest.mark.parametrize("name", [n for n in NAMES if n != "gan"])
def test_training_step_lowers_the_loss_on_a_fixed_batch(name):
    # tiny where tiny learns in 40 steps; small sigmoid and convolutional nets start slower
    t, cfg = build(name, "small" if name in ("dbn", "deconv", "cnn") else "tiny")
    x, y = real_batch(cfg)
    t.set_batch(x, y)
    t.set_lr(2 * t.default_lr)  # tiny nets, few steps: a brisker rate
    before = batch_loss(name, t, x, y)
    for _ in range(40):
        t.step()
    after = batch_loss(name, t, x, y)
    assert math.isfinite(t.loss())
    assert after < 0.9 * before, (before, after)


def test_dbn_pretraining_step_lowers_reconstruction_error():
    t, cfg = build("dbn", size="small")
    x, y = real_batch(cfg)
    t.set_batch(x, y)
    v = torch.as_tensor(x).flatten(1)

    def err() -> float:
        with torch.no_grad():
            return float(((t.rbms[0].down(t.rbms[0].up(v)) - v) ** 2).mean())

    before, w1 = err(), t.rbms[1].W.detach().clone()
    for _ in range(30):
        t.pretrain_step(0)
    assert err() < 0.9 * before
    assert torch.equal(t.rbms[1].W, w1)  # greedy: only the layer being trained moves
    lin = t.model[1]
    t.end_pretraining()
    assert torch.equal(lin.weight, t.rbms[0].W.T) and torch.equal(lin.bias, t.rbms[0].c)


# ----------------------------------------------------------------------------- RBM: CD-k
def exact_gradient(rbm: tf.RBM, v_data: torch.Tensor):
    """The log-likelihood gradient by enumerating all 2^(V+H) joint states:
    dW = <v p(h|v)>_data - <v h>_model, from p(v, h) = exp(b.v + c.h + v.W.h) / Z."""
    V, H = rbm.W.shape
    states = torch.tensor(list(itertools.product((0.0, 1.0), repeat=V + H)))
    v, h = states[:, :V], states[:, V:]
    with torch.no_grad():
        logp = v @ rbm.b + h @ rbm.c + ((v @ rbm.W) * h).sum(1)
        p = torch.softmax(logp, 0)
        ph = rbm.up(v_data)
        dW = v_data.T @ ph / len(v_data) - (p[:, None, None] * v[:, :, None] * h[:, None, :]).sum(0)
        db = v_data.mean(0) - p @ v
        dc = ph.mean(0) - p @ h
    return dW, db, dc


def test_cd_k_matches_the_exact_gradient_of_a_tiny_rbm():
    torch.manual_seed(0)
    rbm = tf.RBM(4, 3, init_scale=1.0)
    with torch.no_grad():
        rbm.b.normal_(0, 0.5)
        rbm.c.normal_(0, 0.5)
    data_v = torch.tensor(
        [[1, 0, 1, 0], [1, 1, 0, 0], [0, 0, 1, 1], [1, 1, 1, 0]], dtype=torch.float
    )
    exact = exact_gradient(rbm, data_v)
    chains = data_v.repeat(5000, 1)  # 20000 chains: Monte-Carlo error ~0.004 per entry
    errs = {}
    for k in (1, 50):
        est = tf.cd_gradient(rbm, chains, k)[:3]
        errs[k] = max(float((e - x).abs().max()) for e, x in zip(est, exact, strict=True))
    scale = max(float(x.abs().max()) for x in exact)
    assert scale > 0.1  # a gradient worth matching
    assert errs[50] < 0.02, errs  # long chains: within Monte-Carlo error of the exact gradient
    assert errs[1] > 2 * errs[50], errs  # CD-1 is biased: its chain starts at the data


def test_rbm_update_uses_no_autograd():
    t, cfg = build("rbm", size="small")
    x, y = real_batch(cfg)
    t.set_batch(x, y)
    w = t.rbm.W.detach().clone()
    dW = tf.cd_gradient(t.rbm, t.x.flatten(1), t.cfg.k)[0]
    assert not dW.requires_grad
    t.step()
    assert not torch.equal(t.rbm.W, w)


# ----------------------------------------------------------------------------- VAE
def test_vae_elbo_matches_the_closed_form_on_a_tiny_case():
    """Decoder blind to z (weights 0, bias beta) and constant q(z|x) = N(m, s^2): then
    -ELBO = sum_i softplus(beta_i) - beta_i x_i + sum_j (s_j^2 + m_j^2 - 1 - log s_j^2) / 2."""
    t, cfg = build("vae", latent=2)
    m, logvar = torch.tensor([0.5, -1.0]), torch.tensor([0.2, -0.7])
    beta = torch.linspace(-2, 2, 64)
    with torch.no_grad():
        for p in t.model.parameters():
            p.zero_()
        t.model.enc[-1].bias.copy_(torch.cat([m, logvar]))
        t.model.dec[-1].bias.copy_(beta)
    x, y = real_batch(cfg, 8)
    xf = torch.as_tensor(x).flatten(1)
    rec = (F_softplus(beta) - beta * xf).sum(1)
    kl = 0.5 * (logvar.exp() + m**2 - 1 - logvar).sum()
    expected = (rec + kl).mean()
    t.set_batch(x, y)
    loss = t.step().detach()  # the loss of the step, before its update
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    # the numpy measure of dlperf.kinds.train agrees with the torch loss
    from dlperf.kinds.train.quality import neg_elbo

    out = t.outputs(x)
    assert neg_elbo(out["logits"], x, out["mu"], out["logvar"]) == pytest.approx(
        float(expected), rel=1e-2
    )  # one Adam step moved the weights by about lr


def F_softplus(v: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.softplus(v)


def test_vae_gradient_reaches_the_encoder_through_the_sampler():
    t, cfg = build("vae", latent=2)
    x, y = real_batch(cfg, 8)
    t.set_batch(x, y)
    t.opt.zero_grad()
    eps = torch.randn(8, 2)
    logits, mu, logvar = t.model(t.x, eps)
    tf.neg_elbo(logits, t.x, mu, logvar).mean().backward()
    assert t.model.enc[1].weight.grad.abs().sum() > 0
    # z = mu + sigma * eps: with mu, logvar fixed the samples have that mean and spread
    mu0, lv0 = torch.tensor([[1.0, -2.0]]), torch.tensor([[0.0, math.log(0.25)]])
    z = mu0 + torch.exp(0.5 * lv0) * torch.randn(20000, 2)
    assert z.mean(0).tolist() == pytest.approx([1.0, -2.0], abs=0.03)
    assert z.std(0).tolist() == pytest.approx([1.0, 0.5], abs=0.03)


# ----------------------------------------------------------------------------- GAN
def _params(m: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in m.parameters()]


def _same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_gan_step_is_one_discriminator_then_one_generator_update():
    t, cfg = build("gan", size="small")
    x, y = real_batch(cfg)
    t.set_batch(x, y)
    state = copy.deepcopy(t)
    torch.manual_seed(7)
    z = torch.randn(len(x), cfg.latent)
    fake = t.G(z)
    g0, d0 = _params(t.G), _params(t.D)
    d_before = float(t.d_loss_of(t.x, fake.detach()).detach())
    t.d_update(t.x, fake)
    assert _same(_params(t.G), g0) and not _same(_params(t.D), d0)  # D moved, G did not
    assert float(t.d_loss_of(t.x, fake.detach()).detach()) < d_before
    d1 = _params(t.D)
    g_before = float(t.g_loss_of(fake).detach())  # through the updated discriminator
    t.g_update(fake)
    assert _same(_params(t.D), d1) and not _same(_params(t.G), g0)  # G moved, D did not
    assert float(t.g_loss_of(t.G(z)).detach()) < g_before
    # step() does exactly this: same noise, same result
    torch.manual_seed(7)
    state.step()
    assert _same(_params(state.D), d1) and _same(_params(state.G), _params(t.G))


# ----------------------------------------------------------------------------- trees
def evaluate(tokens, left, right, i):
    if left[i] < 0:
        return int(tokens[i])
    a, b = evaluate(tokens, left, right, left[i]), evaluate(tokens, left, right, right[i])
    return (max(a, b), min(a, b), (a + b) % 10)[tokens[i] - 10]


def test_expression_trees_have_the_right_values_and_varying_shapes():
    trees, labels = fam.expression_trees(200, 6, 3, seed=1)
    for (tok, lft, rgt), lab in zip(trees, labels, strict=True):
        assert len(tok) == 11 and (lft < 0).sum() == 6
        assert evaluate(tok, lft, rgt, len(tok) - 1) == lab
    heights = {len(fam.pack_trees([t]).levels) for t in trees}
    assert min(heights) < max(heights)  # balanced and chain-like shapes both occur
    assert len(set(labels.tolist())) == 10


def test_level_batched_tree_net_equals_one_tree_at_a_time():
    cfg = fam.RecursiveConfig(hidden=5, leaves=5, ops=3)
    torch.manual_seed(0)
    net = tf.TreeNet(cfg)
    trees, _ = fam.expression_trees(12, 5, 3, seed=3)

    def one(tok, lft, rgt, i):  # plain recursion, the definition
        if lft[i] < 0:
            return net.leaf(torch.tensor(int(tok[i])))
        h = torch.cat([one(tok, lft, rgt, lft[i]), one(tok, lft, rgt, rgt[i])])
        return torch.tanh(net.compose(h) + net.op(torch.tensor(int(tok[i]) - 10)))

    with torch.no_grad():
        batched = net(tf.TorchTrees(fam.pack_trees(trees), torch.device("cpu")))
        single = torch.stack([net.fc(one(*t, len(t[0]) - 1)) for t in trees])
    torch.testing.assert_close(batched, single)


# ----------------------------------------------------------------------------- init, seeds
def test_init_scale_draws_weights_from_n_0_s2():
    t, _ = build("ffn", size="large", init_scale=0.1)
    w = t.model[1].weight.detach()
    assert float(w.std()) == pytest.approx(0.1, rel=0.02) and abs(float(w.mean())) < 0.002
    assert float(t.model[1].bias.detach().abs().max()) == 0.0
    d, _ = build("ffn", size="large")  # PyTorch's default: U(-1/sqrt(64), 1/sqrt(64))
    wd = d.model[1].weight.detach()
    assert float(wd.abs().max()) <= 1 / 8 and float(wd.std()) == pytest.approx(
        1 / 8 / math.sqrt(3), rel=0.02
    )
    r, _ = build("rbm", size="large")  # an RBM has no framework default: N(0, 0.01^2)
    assert float(r.rbm.W.detach().std()) == pytest.approx(0.01, rel=0.02)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"init_scale": -1}, "init_scale"),
        ({"init_scale": "big"}, "init_scale"),
        ({"hidden": 0}, "hidden"),
        ({"dataset": "cifar"}, "dataset"),
        ({"k": 1.5}, "k"),
        ({"phase": "both"}, "phase"),
        ({"activation": "gelu"}, "activation"),
    ],
)
def test_bad_parameters_are_usage_errors(params, message):
    name = "dbn" if "phase" in params or "k" in params else "ffn"
    with pytest.raises(UsageError, match=message):
        workloads.resolve(name, "small", params)


def test_steps_are_reproducible_with_a_seed():
    def losses(seed: int) -> list[float]:
        t, cfg = build("vae", seed=seed)
        t.set_batch(*real_batch(cfg, 16))
        return [float(t.step()) for _ in range(5)]

    assert losses(3) == losses(3)
    assert losses(3) != losses(4)


def test_synthetic_batch_has_the_real_data_shapes():
    for name in NAMES:
        t, cfg = build(name)
        if name == "recursive":
            continue
        ds = data.load(cfg.dataset)
        assert tuple(t.x.shape[1:]) == ds.input_shape


def test_the_harness_times_a_family_step():
    """`dlperf run --network gan` goes through the worker like any DLBench network."""
    from dlperf.core.spec import RunSpec
    from dlperf.engine.worker import execute
    from tests.conftest import FAST

    r = execute(RunSpec(network="gan", size="tiny", batch_size=8, threads=2, measurement=FAST))
    assert r.ok, r.failure
    assert r.metrics.flops_per_step == FAMILIES["gan"].train_flops(8, "tiny")
    assert r.param_count == FAMILIES["gan"].param_count("tiny") and r.metrics.steps >= 3
    bad = execute(RunSpec(network="rbm", size="tiny", variant="compile", measurement=FAST))
    assert bad.failure.reason == "unsupported"
