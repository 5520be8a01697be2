"""The GPT-2-style transformer workload: exact parameter count, FLOPs against the
6N + 12 L d T estimate, validation; the PyTorch model against them."""

from __future__ import annotations

import pytest

from dlperf import api, workloads
from dlperf.core.errors import UsageError
from dlperf.workloads.transformer import TransformerConfig


def closed_form_params(L: int, d: int, T: int, V: int) -> int:
    # token embedding V d (tied with the head) + positions T d + per block: QKV 3d^2+3d,
    # attention projection d^2+d, MLP d*4d+4d + 4d*d+d, two LayerNorms 4d
    # = 12 d^2 + 13 d; + the final LayerNorm 2d
    return V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d


@pytest.mark.parametrize("size, shape", [
    ("small", (12, 768, 1024, 50257)),
    ("medium", (24, 1024, 1024, 50257)),
    ("tiny", (2, 32, 16, 64)),
])
def test_parameter_count_is_the_closed_form(size, shape):
    assert workloads.get("gpt2").param_count(size) == closed_form_params(*shape)


def test_gpt2_small_is_about_124m():
    n = workloads.get("gpt2").param_count("small")
    assert abs(n - 124e6) / 124e6 < 0.01


def test_untied_head_adds_one_embedding_matrix():
    wl = workloads.get("gpt2")
    tied = wl.param_count("tiny")
    assert wl.param_count("tiny", {"tied": False}) == tied + 64 * 32


@pytest.mark.parametrize("size", ["tiny", "small", "medium"])
def test_training_flops_per_token_against_kaplan(size):
    """Exactly 3 x forward = 72 L d^2 + 12 L T d + 6 d V per token; below 6N + 12 L d T
    (Kaplan et al. 2020) by the parameters that cost no matmul: the position embedding
    (6 T d), the biases and LayerNorms of the blocks (78 L d) and the final LayerNorm (12 d)."""
    wl = workloads.get("gpt2")
    c = wl.config(size)
    L, d, T, V = c.depth, c.width, c.seq_len, c.vocab
    per_token = wl.train_flops(1, size) / T
    assert per_token == 72 * L * d * d + 12 * L * T * d + 6 * d * V
    kaplan = 6 * wl.param_count(size) + 12 * L * d * T
    assert kaplan - per_token == 6 * T * d + 78 * L * d + 12 * d
    if size == "small":
        assert (kaplan - per_token) / kaplan < 0.01


def test_attention_products_are_counted_with_their_backward():
    layers = TransformerConfig(depth=1, width=8, heads=2, seq_len=4, vocab=10).layers()
    scores = next(layer for layer in layers if layer.name == "b1_scores")
    assert scores.fwd_flops == 2 * 4 * 4 * 8  # 2 x T x T x d over both heads
    assert scores.train_flops() == 3 * scores.fwd_flops  # dQ and dK, no weights


def test_bad_shapes_are_usage_errors():
    with pytest.raises(UsageError, match="not divisible by heads"):
        workloads.resolve("gpt2", "tiny", {"heads": 3})
    with pytest.raises(UsageError, match="depth must be a positive integer"):
        workloads.resolve("gpt2", "tiny", {"depth": 0})


def test_listed_in_its_own_group():
    nets = {n["name"]: n for n in api.networks(group="modern")}
    assert list(nets) == ["gpt2"]
    assert nets["gpt2"]["params"] == 124_439_808


@pytest.mark.parametrize("overrides", [{}, {"tied": False}])
def test_torch_model_has_the_neutral_parameter_count(overrides):
    """Tied, the head reuses the embedding matrix; untied, it adds its own (no bias)."""
    pytest.importorskip("torch")
    from dlperf.backends.torch_backend import TorchBackend

    wl, _, cfg = workloads.resolve("gpt2", "tiny", overrides)
    t = TorchBackend().build("gpt2", cfg, 2, "eager", "cpu", 0)
    assert t.param_count == wl.param_count("tiny", overrides)


def test_torch_counter_matches_the_neutral_train_flops():
    """PyTorch's FlopCounterMode over one forward and backward (on the meta device) counts
    exactly the neutral matmuls, attention's QK^T and AV included, at tiny size and at the
    default size and batch ('dlperf networks' shows the latter)."""
    pytest.importorskip("torch")
    from dlperf.backends.torch_backend import TorchBackend
    from dlperf.engine.flopcache import counted_flops

    wl, _, cfg = workloads.resolve("gpt2", "tiny")
    t = TorchBackend().build("gpt2", cfg, 2, "eager", "cpu", 0)
    assert t.flops_per_step() == wl.train_flops(2, "tiny")
    assert counted_flops(["gpt2"]) == {"gpt2": wl.train_flops(wl.default_batch)}


def test_torch_measures_a_tiny_step():
    pytest.importorskip("torch")
    from dlperf.core.spec import RunSpec
    from dlperf.engine.worker import execute
    from tests.conftest import FAST

    r = execute(RunSpec(network="gpt2", size="tiny", batch_size=2, measurement=FAST))
    assert r.ok, r.failure
    wl = workloads.get("gpt2")
    assert r.param_count == wl.param_count("tiny")
    assert r.metrics.flops_per_step == wl.train_flops(2, "tiny")
    assert r.step_times_s
