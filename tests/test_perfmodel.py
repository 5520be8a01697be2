"""The analytical performance model: catalogue, per-layer bytes, formulas, predict().
Pure arithmetic, no framework; every test runs in milliseconds."""

from __future__ import annotations

import json
import math

import pytest

from dlperf import workloads
from dlperf.cli import main
from dlperf.core.errors import UsageError
from dlperf.perfmodel import (
    Device,
    Efficiencies,
    Efficiency,
    data_parallel_scaling,
    predict,
    scaled,
)
from dlperf.perfmodel import catalogue as cat
from dlperf.perfmodel import formulas as f
from dlperf.perfmodel.costs import layer_cost, layer_costs
from dlperf.workloads.base import Layer, dense


@pytest.fixture(autouse=True)
def _datasheet_roofline(monkeypatch):
    """These tests check the datasheet roofline's formulas on catalogue GPUs: no reference
    curves scaled to them (``tests/test_scaled.py`` checks those)."""
    monkeypatch.setattr(scaled, "reference", lambda: None)


# ----------------------------------------------------------------------------- catalogue
def test_catalogue_has_the_named_hardware_each_with_a_source():
    devices, links, storage = cat.devices(), cat.links(), cat.storage()
    for name in ("k80", "gtx980", "gtx1080", "p100", "v100", "a100-40gb", "a100-80gb",
                 "h100-pcie", "h100-sxm", "h200", "l4", "l40s", "xeon-8280", "xeon-8380",
                 "epyc-7763", "epyc-9654"):
        assert name in devices
    for name in ("pcie3x16", "pcie4x16", "pcie5x16", "nvlink2", "nvlink3", "nvlink4", "eth10",
                 "eth25", "eth100", "ib-edr", "ib-hdr", "ib-ndr"):
        assert name in links
    assert {"nvme", "raid0-nvme5", "sata-ssd", "hdd"} <= set(storage)
    for entry in [*devices.values(), *links.values(), *storage.values()]:
        assert "https://" in entry.source or "the guide" in entry.source, entry.name


@pytest.mark.parametrize("name, gt_per_s", [("pcie3x16", 8e9), ("pcie4x16", 16e9),
                                            ("pcie5x16", 32e9)])
def test_pcie_rate_is_lanes_times_transfer_rate_after_128b130b_encoding(name, gt_per_s):
    per_direction = gt_per_s * 16 * 128 / 130 / 8 / 1e9  # GB/s
    assert cat.link(name).gbps == pytest.approx(per_direction, rel=1e-3)


def test_gtx1080_sits_on_pcie3_and_a100_pairs_talk_over_nvlink3():
    assert cat.device("gtx1080").host_link == "pcie3x16"
    assert cat.device("a100-40gb").peer_link == "nvlink3"


def test_peak_per_precision():
    v100 = cat.device("v100")
    assert v100.peak_flops("tf32") == v100.peak_flops("fp32")  # no TF32 units: runs as fp32
    assert v100.peak_flops("fp16") == 125e12
    with pytest.raises(UsageError, match="no bf16 rate"):
        v100.peak_flops("bf16")
    with pytest.raises(UsageError, match="unknown precision 'fp8'"):
        v100.peak_flops("fp8")


def test_user_catalogue_adds_and_replaces_devices(tmp_path, monkeypatch):
    path = tmp_path / "mine.toml"
    path.write_text(
        '[my-gpu]\nkind = "gpu"\ndescription = "a card"\nfp32_tflops = 10\n'
        'memory_gbps = 500\nmemory_gb = 16\nhost_link = "pcie4x16"\nsource = "my bench"\n'
        '[v100]\nkind = "gpu"\ndescription = "a slower V100"\nfp32_tflops = 1\n'
        'memory_gbps = 100\nmemory_gb = 16\nsource = "my bench"\n'
    )
    monkeypatch.setenv("DLPERF_DEVICES", str(path))
    assert cat.device("my-gpu").fp32_tflops == 10
    v100 = cat.device("v100")
    assert v100.fp32_tflops == 1 and v100.fp16_tflops is None  # replaced whole
    assert "a100-40gb" in cat.devices()


def test_user_catalogue_from_the_config_directory(tmp_path):
    path = tmp_path / "config" / "dlperf" / "devices.toml"
    path.parent.mkdir(parents=True)
    path.write_text('[x]\nkind = "cpu"\ndescription = "d"\nfp32_tflops = 1\n'
                    'memory_gbps = 10\nmemory_gb = 8\nsource = "s"\n')
    assert "x" in cat.devices()


@pytest.mark.parametrize("entry, message", [
    ('fp32_tflops = -1\nmemory_gbps = 1\nmemory_gb = 1\nsource = "s"',
     "entry 'bad': fp32_tflops: Input should be greater than 0"),
    ('fp32_tflops = 1\nmemory_gbps = 1\nmemory_gb = 1',
     "entry 'bad': source: Field required"),
    ('fp32_tflops = 1\nmemory_gbps = 1\nmemory_gb = 1\nsource = "s"\npeak = 3',
     "entry 'bad': peak: Extra inputs are not permitted"),
    ('fp32_tflops = 1\nmemory_gbps = 1\nmemory_gb = 1\nsource = "s"\nhost_link = "usb"',
     "device 'bad': unknown link 'usb'"),
    ('fp32_tflops = "fast"\nmemory_gbps = 1\nmemory_gb = 1\nsource = "s"',
     "entry 'bad': fp32_tflops: Input should be a valid number"),
])
def test_bad_user_entry_is_one_clear_line(tmp_path, monkeypatch, entry, message):
    path = tmp_path / "bad.toml"
    path.write_text(f'[bad]\nkind = "gpu"\ndescription = "d"\n{entry}\n')
    monkeypatch.setenv("DLPERF_DEVICES", str(path))
    with pytest.raises(UsageError) as e:
        cat.devices()
    assert message in str(e.value) and "\n" not in str(e.value)


def test_missing_or_broken_user_file(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_DEVICES", str(tmp_path / "none.toml"))
    with pytest.raises(UsageError, match="no such file"):
        cat.devices()
    broken = tmp_path / "broken.toml"
    broken.write_text("[a\n")
    monkeypatch.setenv("DLPERF_DEVICES", str(broken))
    with pytest.raises(UsageError, match="not valid TOML"):
        cat.devices()


def test_unknown_names():
    with pytest.raises(UsageError, match="unknown device 'tpu'"):
        cat.device("tpu")
    with pytest.raises(UsageError, match="unknown link 'usb3'"):
        cat.link("usb3")


# ----------------------------------------------------------------------------- bytes
def test_dense_layer_bytes_closed_form():
    """Dense 3 -> 4 with bias (P = 3*4 + 4 = 16), batch 2, fp32 (4 bytes):
    forward  = W 16 + X 3*2 + Y 4*2                              = 30 elements
    backward = dY 8 + saved X 6 + W 16 (for dX) + dX 6 + dW 16    = 52 elements
    update   = SGD reads w and g, writes w: 3 * 16                 = 48 elements"""
    c = layer_cost(dense("fc", 3, 4), in_elems=3, batch=2, elem_bytes=4)
    assert (c.fwd_bytes, c.bwd_bytes, c.update_bytes) == (30 * 4, 52 * 4, 48 * 4)
    # forward 2*3*4 per sample, 2 samples; backward = weight and input gradients, as much each
    assert (c.fwd_flops, c.bwd_flops) == (2 * 3 * 4 * 2, 2 * (2 * 3 * 4 * 2))
    assert c.kernels == 4  # forward, dW, dX, update


def test_first_layer_writes_no_input_gradient():
    """Fed by data: backward = dY 8 + saved X 6 + dW 16 = 30 elements, no weight read."""
    c = layer_cost(dense("fc", 3, 4, first=True), in_elems=3, batch=2, elem_bytes=4)
    assert c.bwd_bytes == 30 * 4
    assert c.bwd_flops == 2 * 3 * 4 * 2  # the weight gradient only


def test_elementwise_and_embedding_bytes():
    relu = layer_cost(Layer("relu", "act", out_elems=5), in_elems=5, batch=2, elem_bytes=2)
    # forward: read 10, write 10; backward: dY 10, saved X 10, dX 10
    assert (relu.fwd_bytes, relu.bwd_bytes, relu.update_bytes) == (40, 60, 0)
    emb = layer_cost(Layer("emb", "embedding", params=1000 * 8, out_elems=4 * 8,
                           input_grad=False), in_elems=4, batch=2, elem_bytes=4)
    # reads only the 2 x 4 gathered rows of 8, not the 1000-row table
    assert emb.fwd_bytes == (64 + 8 + 64) * 4


def test_autocast_runs_softmax_and_layer_norm_in_fp32_with_their_casts():
    """Under mixed precision (2-byte elements) a softmax over 5 elements, batch 2, moves
    its own 10 + 10 elements forward and 30 backward at 4 bytes, and casts its input and
    its output once each way (read 2, write 4, or the reverse: 20 elements x 6 bytes per
    pass), two more kernels a pass; a ReLU, not on autocast's float32 list, stays at 2
    bytes; in fp32 the softmax has no casts."""
    soft = Layer("softmax", "softmax", out_elems=5)
    half = layer_cost(soft, in_elems=5, batch=2, elem_bytes=2)
    assert (half.fwd_bytes, half.bwd_bytes) == (20 * 4 + 20 * 6, 30 * 4 + 20 * 6)
    assert half.kernels == layer_cost(soft, in_elems=5, batch=2, elem_bytes=4).kernels + 4
    full = layer_cost(soft, in_elems=5, batch=2, elem_bytes=4)
    assert (full.fwd_bytes, full.bwd_bytes) == (20 * 4, 30 * 4)
    ln = layer_cost(Layer("ln", "ln", params=2 * 5, out_elems=5), in_elems=5, batch=2,
                    elem_bytes=2)
    # forward: weights 10 + x 10 + y 10 in fp32, and the two casts
    assert ln.fwd_bytes == 30 * 4 + 20 * 6
    relu = layer_cost(Layer("relu", "act", out_elems=5), in_elems=5, batch=2, elem_bytes=2)
    assert (relu.fwd_bytes, relu.kernels) == (40, 2)  # forward and input gradient


def test_the_transformer_scales_and_masks_its_scores_before_the_softmax():
    """The scaling by 1/sqrt(d/h) and the causal mask are each an elementwise pass over
    every head's T x T scores (the PyTorch GPT-2's mul and masked_fill), with no FLOPs of
    their own."""
    cfg = workloads.resolve("gpt2", "tiny", {})[2]
    layers = cfg.layers()
    names = [x.name for x in layers]
    assert names[names.index("b1_scores") + 1:names.index("b1_softmax")] == ["b1_scale",
                                                                            "b1_mask"]
    for name in ("b1_scale", "b1_mask"):
        layer = layers[names.index(name)]
        assert layer.out_elems == cfg.heads * cfg.seq_len**2 and layer.fwd_flops == 0


@pytest.mark.parametrize("name", list(workloads.WORKLOADS))
def test_layer_flops_add_up_to_the_counted_training_flops(name):
    """The model's FLOPs are the workload's (which the backend tests check against each
    framework's own counter): forward + backward over all layers."""
    wl = workloads.get(name)
    cfg = wl.config("tiny")
    costs = layer_costs(cfg.layers(), cfg.input_shape(), 3, 4)
    assert sum(c.flops for c in costs) == wl.train_flops(3, "tiny")
    assert all(c.bytes >= 0 for c in costs)


# ----------------------------------------------------------------------------- formulas
def test_roofline_takes_the_slower_roof_plus_overhead():
    assert f.roofline_time(100, 1, peak_flops=10, bandwidth=10) == 10
    assert f.roofline_time(1, 100, peak_flops=10, bandwidth=10, overhead=0.5) == 10.5


def test_ring_allreduce():
    assert f.ring_allreduce_time(1e9, 1, 1e9, 1.0) == 0
    # 4 devices: 2 * 3/4 of the message, 6 latency steps
    assert f.ring_allreduce_time(1e9, 4, 1e9, 0.01) == pytest.approx(1.5 + 0.06)
    # the bandwidth term tends to 2 x bytes / bandwidth, whatever the device count
    assert f.ring_allreduce_time(1e9, 1024, 1e9, 0) == pytest.approx(2, rel=1e-3)


def test_tree_allreduce_has_log2_steps():
    assert f.tree_allreduce_time(10, 8, 10, 0.5) == 2 * 3 * (0.5 + 1)
    assert f.tree_allreduce_time(10, 5, 10, 0.5) == 2 * 3 * (0.5 + 1)  # ceil(log2 5) = 3
    # fewer latency terms than a ring: it wins for tiny messages on many devices
    assert f.tree_allreduce_time(8, 64, 1e9, 1e-5) < f.ring_allreduce_time(8, 64, 1e9, 1e-5)


def test_hierarchical_allreduce_reduces_to_rings():
    ring = f.ring_allreduce_time(1e9, 8, 1e9, 1e-5)
    assert f.hierarchical_allreduce_time(1e9, 8, 1, 1e9, 1e-5, 1.0, 1.0) == pytest.approx(ring)
    assert f.hierarchical_allreduce_time(1e9, 1, 8, 1.0, 1.0, 1e9, 1e-5) == pytest.approx(ring)
    # 2 nodes of 4: intra reduce-scatter and all-gather (3/4 each) + inter ring (2 x 1/2)
    t = f.hierarchical_allreduce_time(1e9, 4, 2, 2e9, 0, 1e9, 0)
    assert t == pytest.approx(2 * 0.75 * 0.5 + 1.0)


def test_parameter_server_shared_link():
    own = 2 * (1e-3 + 1.0)  # push + pull of 1 GB at 1 GB/s
    assert f.parameter_server_time(1e9, 1, 1e9, 1e-3, 1e9) == pytest.approx(own)
    # 8 workers share the server's link: 8 pushes and 8 pulls
    assert f.parameter_server_time(1e9, 8, 1e9, 1e-3, 1e9) == pytest.approx(16)
    # the server applies each push and copies out each pull: 0.5 s a worker, in turn
    assert f.parameter_server_time(1e9, 8, 1e9, 1e-3, 1e9, 0.5) == pytest.approx(20)
    assert f.parameter_server_time(1e9, 1, 1e9, 1e-3, 1e9, 0.5) == pytest.approx(own + 0.5)


def test_pipeline_bubble():
    assert f.pipeline_bubble_fraction(4, 12) == pytest.approx(3 / 15)
    assert f.pipeline_bubble_fraction(1, 5) == 0
    t = f.pipeline_time(1.0, 4, 12)
    assert (t - 12 * 1.0) / t == pytest.approx(f.pipeline_bubble_fraction(4, 12))


def test_stragglers_sync_waits_async_does_not():
    times = [1.0, 1.0, 1.0, 2.0]
    assert f.sync_step_time(times) == 2.0
    assert f.async_step_time(times) == pytest.approx(4 / 3.5)
    assert f.async_step_time([1.0] * 4) == pytest.approx(1.0)


def test_speedup_and_efficiency():
    assert f.speedup(8.0, 2.0) == 4.0
    assert f.efficiency(8.0, 2.0, 8) == 0.5


# ----------------------------------------------------------------------------- predict
ALL = [
    dict(strategy="single"),
    dict(strategy="sync", devices=4),
    dict(strategy="sync", devices=8, nodes=2, inter_link="ib-hdr"),
    dict(strategy="sync", devices=4, collective="tree"),
    dict(strategy="async", devices=4),
    dict(strategy="async", devices=4, nodes=2, inter_link="eth10"),
    dict(strategy="mixed", devices=4),
    dict(strategy="mixed", devices=8, groups=2, straggler_s=0.01),
    dict(strategy="pipeline", devices=4),
    dict(strategy="pipeline", devices=4, nodes=2, inter_link="ib-hdr", micro_batches=8),
]


@pytest.mark.parametrize("kw", ALL, ids=lambda kw: "-".join(str(v) for v in kw.values()))
def test_breakdown_adds_up_to_the_time(kw):
    p = predict("alexnet", device="a100-40gb", batch_size=32, **kw)
    b = p.breakdown
    assert b.total_s == pytest.approx(p.time_s)
    assert min(b.model_dump().values()) >= 0
    assert b.input_s == 0 and not any("not modelled" in n for n in p.notes)
    assert p.samples_per_s == pytest.approx(32 / p.time_s)
    assert p.flops_per_step == workloads.get("alexnet").train_flops(32)


def test_faster_matmuls_shrink_compute_only():
    base = predict("fcn5", device="gtx1080", batch_size=1024)
    fast = predict("fcn5", device="gtx1080", batch_size=1024, efficiencies=Efficiencies(
        gpu=Efficiency(matmul=0.4, memory=0.8, overhead_s=6e-6, source="test")))
    assert fast.breakdown.compute_s == pytest.approx(2 * base.breakdown.compute_s)
    assert fast.breakdown.memory_s == pytest.approx(base.breakdown.memory_s)


def test_layers_are_bound_by_what_limits_them():
    p = predict("fcn5", device="v100", batch_size=4096)
    bound = {layer.name: layer.bound for layer in p.layers}
    assert bound["fc2"] == "compute" and bound["sigmoid1"] == "memory"
    # compute-bound: the FLOPs at the attainable peak, nothing else but launches
    fc2 = next(layer for layer in p.layers if layer.name == "fc2")
    update = 3 * (2048 * 2048 + 2048) * 4 / (900e9 * 0.8)
    assert fc2.time_s == pytest.approx(fc2.flops / (15.7e12 * 0.8) + update + 4 * 6e-6)


def test_a_gpu_step_hides_its_kernel_launches_behind_the_device_work():
    """The host queues kernels while the GPU runs them (``formulas.stream_time``): a step
    takes at least the longer of the two and at most both. A tiny fcn5 at batch 1 on an
    H100 launches longer than it computes; the full one at 8192 shows only the launches
    before its first kernel. A CPU pays both."""
    from dlperf.perfmodel.compute import roofline_timing

    steps = {}
    for device, size, batch in (("h100-sxm", "tiny", 1), ("h100-sxm", "full", 8192),
                                ("xeon-8380", "tiny", 1)):
        _, _, cfg = workloads.resolve("fcn5", size)
        dev = cat.device(device)
        eff = Efficiencies().for_device(dev)
        timings = [roofline_timing(c, dev, "fp32", eff)
                   for c in layer_costs(cfg.layers(), cfg.input_shape(), batch, 4)]
        work = sum(t.compute_s + t.memory_s + t.update_s for t in timings)
        host = sum(t.overhead_s for t in timings)
        p = steps[device, size] = predict("fcn5", device=device, size=size, batch_size=batch)
        if dev.kind == "gpu":
            assert max(work, host) <= p.time_s * (1 + 1e-9) and p.time_s <= work + host
            assert p.breakdown.overhead_s == pytest.approx(p.time_s - work)
        else:
            assert p.time_s == pytest.approx(work + host)
    tiny, full = steps["h100-sxm", "tiny"], steps["h100-sxm", "full"]
    assert tiny.breakdown.overhead_s > tiny.breakdown.compute_s
    assert 0 < full.breakdown.overhead_s < 0.01 * full.time_s


def test_a_stream_runs_each_op_once_it_is_launched_and_the_one_before_is_done():
    """(host's launch, device's work) per op, in order: closed forms by hand."""
    assert f.stream_time([]) == 0
    assert f.stream_time([(2, 1), (2, 1)]) == 5  # host-bound: 2 + 2, then the last 1
    assert f.stream_time([(1, 5), (1, 5)]) == 11  # device-bound: 1 first, then 5 + 5
    # slack the host gained under a long kernel carries over to the short ones after it
    assert f.stream_time([(1, 10), (3, 1), (3, 1)]) == 13
    # the device's idle time while the host launches is never won back
    assert f.stream_time([(10, 1), (1, 10)]) == 21


def _resnet50_buckets() -> list[tuple[float, int]]:
    """ResNet-50's gradients in DDP's buckets, the layers' in reverse (a layer's
    parameters as one tensor)."""
    layers = workloads.resolve("resnet50", None, None)[2].layers()
    return f.ddp_buckets([layer.params * 4 for layer in layers[::-1]])


def test_sync_allreduce_overlaps_the_backward_pass_on_a_gpu():
    """8 A100s over NVLink 3: each DDP bucket's ring, 2 x 7/8 x bytes / (300 GB/s x 0.8)
    + 14 x 3.4 us, launched once its gradients are ready; NCCL runs beside the backward
    pass, so the step waits at least for the last bucket's ring and at most for all."""
    p = predict("resnet50", device="a100-40gb", batch_size=64, strategy="sync", devices=8)
    rings = [2 * 7 / 8 * b / (300e9 * 0.8) + 14 * 3.4e-6 for b, _ in _resnet50_buckets()]
    assert rings[-1] * (1 - 1e-9) <= p.breakdown.communication_s < sum(rings)
    assert any("run after the backward pass" in n for n in p.notes)
    assert p.links == {"intra": "nvlink3"}
    one = predict("resnet50", device="a100-40gb", batch_size=8)
    assert p.breakdown.compute_s == pytest.approx(one.breakdown.compute_s)  # 64 / 8 each


def test_sync_allreduce_on_cpus_without_a_spare_core_does_not_overlap():
    """Catalogue CPUs at all their cores: gloo sums and copies on the cores the backward
    uses, so the step waits for every bucket's ring (their sum: the whole gradient's
    bytes term, and each bucket's latency); at fewer threads than cores it overlaps."""
    lat = cat.link("eth100").latency_s
    bw = cat.link("eth100").bytes_per_s * Efficiencies().link
    buckets = _resnet50_buckets()
    p = predict("resnet50", device="xeon-8280", batch_size=64, strategy="sync", devices=4,
                link="eth100")
    grad = 25_557_032 * 4
    assert sum(b for b, _ in buckets) == pytest.approx(grad)
    rings = 2 * 3 / 4 * grad / bw + len(buckets) * 6 * lat
    assert p.breakdown.communication_s == pytest.approx(rings, rel=1e-9)
    assert any("none of the" in n for n in p.notes)
    spare = predict("resnet50", device="xeon-8280", batch_size=64, strategy="sync",
                    devices=4, link="eth100", threads=14)
    assert spare.breakdown.communication_s < rings
    assert any("run after the backward pass" in n for n in spare.notes)


def test_data_parallel_steps_pay_their_gradient_copies():
    """sync: DDP copies each gradient into its bucket, averages it in place and copies it
    back (3 passes of read + write); async: the gradient flattened into a fresh vector and
    the pulled weights loaded back (2); mixed adds its group's DDP buckets and the
    broadcast buffer (3 + 1). On a catalogue device each pass moves 2 x the gradient's
    bytes at the attainable bandwidth."""
    g = 25_557_032 * 4
    bw = 900e9 * 0.8  # v100
    one = predict("resnet50", device="v100", batch_size=16)  # each of the 4 devices' share
    for strategy, passes in (("sync", 3), ("async", 2), ("mixed", 6)):
        p = predict("resnet50", device="v100", batch_size=64, strategy=strategy, devices=4)
        extra = p.breakdown.memory_s - one.breakdown.memory_s
        assert extra == pytest.approx(passes * 2 * g / bw, rel=1e-9), strategy
        assert any("memory passes" in n for n in p.notes)
    single = predict("resnet50", device="v100", batch_size=16, strategy="sync", devices=1)
    assert single.breakdown.memory_s == pytest.approx(one.breakdown.memory_s)


def test_one_mixed_group_exchanges_with_the_server_in_its_own_process():
    """mixed with one group: the leader is rank 0, beside which the server lives, so the
    step pays the server's passes but no push or pull over a link: the group's ring
    all-reduce (every DDP bucket's: a CPU at all its cores overlaps none) and broadcast,
    the copies, and the apply (7 passes of the gradient)."""
    g = 25_557_032 * 4
    dev = cat.device("xeon-8280")
    mem = dev.memory_gbps * 1e9 * Efficiencies().for_device(dev).memory
    link = cat.link("nvlink2")
    bw, lat = link.bytes_per_s * Efficiencies().link, link.latency_s
    one = predict("resnet50", device="xeon-8280", batch_size=32)
    p = predict("resnet50", device="xeon-8280", batch_size=64, strategy="mixed", devices=2,
                groups=1, link="nvlink2")
    buckets = len(_resnet50_buckets())
    group = (g / bw + 2 * lat * buckets) + (g / bw + lat)  # rings of 2, then the broadcast
    assert p.time_s - one.time_s == pytest.approx(group + (12 + 7) * g / mem, rel=1e-9)
    assert any("cross no link" in n for n in p.notes)
    two = predict("resnet50", device="v100", batch_size=64, strategy="mixed", devices=4,
                  groups=2)
    assert not any("cross no link" in n for n in two.notes)


def test_straggler_costs_sync_its_whole_delay_and_async_a_share():
    kw = dict(device="v100", batch_size=64, devices=4)
    sync0 = predict("alexnet", strategy="sync", **kw)
    sync1 = predict("alexnet", strategy="sync", straggler_s=0.1, **kw)
    assert sync1.time_s - sync0.time_s == pytest.approx(0.1)
    # a batch whose compute outlasts the server's round (else the server sets the pace)
    kw["batch_size"] = 512
    async0 = predict("alexnet", strategy="async", **kw)
    async1 = predict("alexnet", strategy="async", straggler_s=0.1, **kw)
    assert 0 < async1.time_s - async0.time_s < 0.1
    assert async1.breakdown.straggler_s == pytest.approx(async1.time_s - async0.time_s)


def test_async_on_a_slow_link_is_bound_by_the_servers_link():
    p = predict("fcn5", device="v100", batch_size=64, strategy="async", devices=8,
                nodes=8, inter_link="eth10")
    grad = workloads.get("fcn5").param_count() * 4
    # per worker: push and pull on the server's link, and the server's own passes over
    # the gradient in the V100's memory (received: 2 x, update: 3 x, pulled copy: 2 x)
    apply = 7 * grad / (900e9 * 0.8)
    assert p.time_s == pytest.approx(8 * (2 * grad / (1.25e9 * 0.8) + apply))


def test_pipeline_bubble_shrinks_with_more_micro_batches():
    kw = dict(device="v100", batch_size=64, strategy="pipeline", devices=4)
    few = predict("fcn8", micro_batches=4, **kw)
    many = predict("fcn8", micro_batches=32, **kw)
    assert many.breakdown.bubble_s / many.time_s < few.breakdown.bubble_s / few.time_s
    one = predict("fcn8", device="v100", batch_size=64, strategy="pipeline", devices=1,
                  micro_batches=1)
    assert one.breakdown.bubble_s == 0 and one.breakdown.communication_s == 0


def test_gradient_accumulation_over_micro_batches():
    assert f.accumulation_time(0.5, 1) == 0
    assert f.accumulation_time(0.5, 4) == pytest.approx(1.5)


def test_a_pipeline_accumulates_its_micro_batches_gradients():
    """One stage, no bubble, no transfer: the step is every micro-batch's passes, the
    update, and each micro-batch after the first adding its weight gradients (an
    update's time each). On a CPU, where every launch shows in the step."""
    from dlperf.perfmodel.compute import roofline_timing

    dev = cat.device("xeon-8380")
    eff = Efficiencies().for_device(dev)
    _, _, cfg = workloads.resolve("alexnet", None)
    costs = layer_costs(cfg.layers(), cfg.input_shape(), 4, 4)
    update = sum(roofline_timing(c, dev, "fp32", eff).update_s for c in costs)
    for m in (1, 4):
        p = predict("alexnet", device="xeon-8380", batch_size=16, strategy="pipeline",
                    devices=1, micro_batches=m)
        if m == 4:
            assert update > 0
        assert p.time_s - sum(x.time_s for x in p.layers) == pytest.approx(
            f.accumulation_time(update, m), rel=1e-9, abs=1e-15)


def test_the_pipeline_is_cut_where_dlperf_parallel_cuts_it():
    """By the layers' FLOPs (parallel.partition), the loss on the last stage: the stages
    the model times are the ones that run."""
    from dlperf.perfmodel.partition import layer_cost as flop_cost
    from dlperf.perfmodel.partition import split_by_cost

    _, _, cfg = workloads.resolve("alexnet", None)
    body = [x for x in cfg.layers() if x.op != "loss"]
    want = [[body[i].name for i in part]
            for part in split_by_cost([flop_cost(x) for x in body], 4)]
    want[-1].append("softmax_xent")
    p = predict("alexnet", device="v100", batch_size=16, strategy="pipeline", devices=4)
    assert p.stages == want


def test_a_custom_device_object_predicts_like_its_catalogue_twin():
    a100 = cat.device("a100-40gb")
    mine = Device(**{**a100.model_dump(), "name": "measured", "source": "calibration"})
    assert predict("alexnet", device=mine).time_s == predict("alexnet", device="a100-40gb").time_s


def test_notes_for_tf32_fallback_and_memory_that_does_not_fit():
    p = predict("resnet50", device="v100", precision="tf32")
    assert any("runs as fp32" in n for n in p.notes)
    big = predict("gpt2", size="xl", device="gtx980", batch_size=8)
    assert any("would not fit" in n for n in big.notes)
    assert big.memory_bytes > 4e9


def test_scaling_over_devices():
    points = data_parallel_scaling("resnet50", 8, device="v100", batch_size=64)
    assert [pt.devices for pt in points] == [1, 2, 4, 8]
    assert points[0].speedup == 1.0
    for pt in points[1:]:
        assert 1 < pt.speedup < pt.devices
        assert pt.efficiency == pytest.approx(pt.speedup / pt.devices)


@pytest.mark.parametrize("kw, message", [
    (dict(device="tpu"), "unknown device 'tpu'"),
    (dict(device="local"), "need its calibration"),
    (dict(device="gtx1080", precision="fp16"), "no fp16 rate"),
    (dict(device="v100", strategy="sync", devices=2, link="usb"), "unknown link 'usb'"),
    (dict(device="v100", strategy="hogwild"), "unknown strategy 'hogwild'"),
    (dict(device="v100", devices=2), "strategy single runs on one device"),
    (dict(device="v100", strategy="sync", devices=4, nodes=2), "need a link between them"),
    (dict(device="v100", strategy="sync", devices=4, nodes=3), "spread evenly"),
    (dict(device="xeon-8280", strategy="sync", devices=2), "no default link"),
    (dict(device="v100", strategy="sync", devices=3, batch_size=16), "does not split evenly"),
    (dict(device="v100", strategy="mixed", devices=4, groups=3), "groups 3 does not divide"),
    (dict(device="v100", strategy="sync", devices=2, groups=2), "mixed strategy only"),
    (dict(device="v100", strategy="pipeline", devices=2, micro_batches=5), "does not divide"),
    (dict(device="v100", strategy="sync", devices=2, straggler_s=-1), "straggler"),
    (dict(device="v100", batch_size=0), "batch size must be a positive integer"),
])
def test_bad_input_is_one_usage_error(kw, message):
    with pytest.raises(UsageError, match=message) as e:
        predict("alexnet", **kw)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("network, size, stages, message", [
    ("ffn", "tiny", 4, "more pipeline stages \\(4\\) than layers and blocks \\(3\\)"),
    ("gan", "tiny", 2, "cannot be pipelined: a GAN"),
    ("rbm", "tiny", 2, "cannot be pipelined: an RBM"),
    ("dbn", "tiny", 2, None),  # fine-tuning is a chain of layers
])
def test_pipeline_needs_a_chain_of_at_least_as_many_layers(network, size, stages, message):
    kw = dict(size=size, device="v100", batch_size=16, strategy="pipeline", devices=stages)
    if message is None:
        assert math.isfinite(predict(network, **kw).time_s)
        return
    with pytest.raises(UsageError, match=message):
        predict(network, **kw)


# ----------------------------------------------------------------------------- commands
def test_dlperf_predict_prints_and_dumps_json(capsys):
    args = ["predict", "-n", "alexnet", "-d", "v100", "-b", "64", "-s", "sync", "--devices",
            "4", "--layers"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "predicted" in text and "communication" in text and "conv1" in text
    assert main([*args, "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["strategy"] == "sync" and p["links"] == {"intra": "nvlink2"}
    assert sum(p["breakdown"].values()) == pytest.approx(p["time_s"])


def test_predict_reads_a_device_count_as_advise_writes_it(capsys):
    """--device a100-40gb:8 is --device a100-40gb --gpus 8 ('dlperf advise --hardware')."""
    args = ["predict", "-n", "alexnet", "-b", "256", "-s", "sync", "--json"]
    assert main([*args, "-d", "a100-40gb:8"]) == 0
    counted = json.loads(capsys.readouterr().out)
    assert main([*args, "-d", "a100-40gb", "--gpus", "8"]) == 0
    assert counted == json.loads(capsys.readouterr().out) and counted["devices"] == 8


def test_predict_takes_the_workers_as_dlperf_parallel_spells_them(capsys):
    """-w N, as 'dlperf parallel' takes its workers, is --workers N (--devices N)."""
    args = ["predict", "-n", "alexnet", "-d", "v100", "-b", "64", "-s", "sync", "--json"]
    assert main([*args, "-w", "4"]) == 0
    short = json.loads(capsys.readouterr().out)
    assert main([*args, "--workers", "4"]) == 0
    assert short == json.loads(capsys.readouterr().out) and short["devices"] == 4


def test_dlperf_devices_lists_the_catalogue_with_sources(capsys):
    assert main(["devices"]) == 0
    assert "h100-sxm" in capsys.readouterr().out
    assert main(["devices", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {d["name"] for d in data["devices"]} == set(cat.devices())
    assert all(d["source"] for d in data["devices"] + data["links"] + data["storage"])


@pytest.mark.parametrize("args, message", [
    (["-n", "gpt2", "-d", "local"], "need its calibration"),
    (["-n", "gpt2", "-d", "v100", "-s", "hogwild"], "unknown strategy"),
    (["-n", "gpt2", "-d", "v100", "--param", "heads=5"], "not divisible by heads"),
    (["-n", "gpt2", "-d", "v100:0", "-s", "sync"], "not NAME:COUNT"),
    (["-n", "gpt2", "-d", "v100:two", "-s", "sync"], "not NAME:COUNT"),
    (["-n", "gpt2", "-d", "v100:4", "--gpus", "2", "-s", "sync"], "disagree"),
    (["-n", "gpt2", "-d", "v100", "-s", "sync", "-w", "0"], "must be at least 1"),
    (["-n", "gpt2", "-d", "v100", "-s", "sync", "--gpus", "4", "--nodes", "0"],
     "must be at least 1"),
])
def test_dlperf_predict_bad_input(capsys, args, message):
    assert main(["predict", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dlperf: error: ") and message in err and err.count("\n") == 1
