"""Parameter counts and FLOPs of the DLBench networks: closed form against PyTorch."""

from __future__ import annotations

import pytest

from dlperf import workloads
from dlperf.core.errors import UsageError
from dlperf.workloads.dlbench import DLBENCH

# Exact trainable parameter counts of the full-size networks, derived by hand from the
# definitions (see docs/workloads.md for the arithmetic).
FULL_PARAMS = {
    # 26752*2048+2048 + 2*(2048*2048+2048) + 2048*26752+26752
    "fcn5": 117_997_696,
    # fcn5 + 3 more 2048x2048 layers
    "fcn8": 130_586_752,
    # convs 3,747,200 + fc 12544*4096+4096 + 4096*4096+4096 + 4096*1000+1000
    "alexnet": 76_009_832,
    # torchvision's resnet50 has the same count
    "resnet50": 25_557_032,
    # embedding 2.56M + 2 LSTM layers of 4*256*(256+256)+4*256 + projection 256*10000+10000
    "lstm32": 6_180_624,
    "lstm64": 6_180_624,
}


@pytest.mark.parametrize("name", list(FULL_PARAMS))
def test_full_size_parameter_counts(name):
    assert workloads.get(name).param_count() == FULL_PARAMS[name]


def test_fcn_flops_closed_form():
    # forward 2*B*sum(in*out); weight gradients the same; input gradients for every layer
    # but the first (its input is data)
    wl = workloads.get("fcn5")
    b = 64
    pairs = [(26752, 2048), (2048, 2048), (2048, 2048), (2048, 26752)]
    macs = sum(i * o for i, o in pairs)
    expected = 2 * b * macs * 3 - 2 * b * pairs[0][0] * pairs[0][1]
    assert wl.train_flops(b) == expected


@pytest.mark.parametrize("name", list(DLBENCH))
def test_torch_counter_matches_closed_form_full_size(name):
    """PyTorch's own FLOP counter (on the meta device: shapes only) against the closed form."""
    pytest.importorskip("torch")
    from dlperf.backends.torch_backend import count_flops

    wl = workloads.get(name)
    assert count_flops(wl.config(), wl.default_batch) == wl.train_flops(wl.default_batch)


@pytest.mark.parametrize("name", list(DLBENCH))
def test_torch_builds_exact_parameter_count_and_flops_tiny(name):
    pytest.importorskip("torch")
    from dlperf.backends.torch_backend import TorchBackend

    wl, size, cfg = workloads.resolve(name, "tiny")
    t = TorchBackend().build(name, cfg, 3, "eager", "cpu", 0)
    assert t.param_count == wl.param_count("tiny")
    assert t.flops_per_step() == wl.train_flops(3, "tiny")


def test_alexnet_feature_map_is_7x7_as_in_dlbench_code():
    cfg = workloads.get("alexnet").config()
    assert cfg.feature_side() == 7
    fc1 = next(layer for layer in cfg.layers() if layer.name == "fc1")
    assert fc1.params == 256 * 7 * 7 * 4096 + 4096


def test_unknown_network_and_size_are_usage_errors():
    with pytest.raises(UsageError, match="unknown network 'fcn6'"):
        workloads.get("fcn6")
    with pytest.raises(UsageError, match="no size 'huge'"):
        workloads.resolve("fcn5", "huge")
    with pytest.raises(UsageError, match="no parameter 'hidden'"):
        workloads.resolve("fcn5", None, {"hidden": 3})
