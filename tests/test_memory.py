"""The memory model's terms against closed forms on small layers, its use in predict, and
MFU / HFU: the model FLOPs and the peak they divide by."""

from __future__ import annotations

import statistics

import pytest

from dlperf.core.spec import Metrics, RunResult, RunSpec
from dlperf.perfmodel import catalogue, memory, predict
from dlperf.workloads.base import Layer

# a 3-layer toy network: 10 -> 20 (dense) -> relu -> 5 (dense) -> loss
LAYERS = [
    Layer("fc1", "dense", params=10 * 20 + 20, fwd_flops=2 * 10 * 20, out_elems=20,
          input_grad=False),
    Layer("relu", "act", out_elems=20),
    Layer("fc2", "dense", params=20 * 5 + 5, fwd_flops=2 * 20 * 5, out_elems=5),
    Layer("loss", "loss", out_elems=1),
]
PARAMS = 220 + 105


def test_each_term_is_its_closed_form():
    m = memory.step_memory(LAYERS, batch=8, precision="fp32", baseline=1000.0)
    assert m.weights == PARAMS * 4
    assert m.gradients == PARAMS * 4
    assert m.optimizer == 0  # plain SGD
    assert m.activations == (20 + 20 + 5 + 1) * 8 * 4
    assert m.transient == (20 + 20) * 8 * 4  # the relu's output gradient and fc1's
    assert m.baseline == 1000.0
    assert m.total == pytest.approx(PARAMS * 8 + 46 * 32 + 40 * 32 + 1000)


def test_mixed_precision_keeps_fp32_masters_and_half_copies():
    m = memory.step_memory(LAYERS, batch=8, precision="bf16")
    assert m.weights == PARAMS * (4 + 2)  # fp32 masters and the forward's bf16 copies
    assert m.gradients == PARAMS * 4  # of the fp32 parameters
    # half outputs, but the loss keeps its result in fp32 (autocast's fp32 list)
    assert m.activations == (20 + 20 + 5) * 8 * 2 + 1 * 8 * 4


def test_a_devices_allocator_holds_what_the_backward_saves():
    """On a GPU the activations are the tensors the backward reads: fc1's output feeds a
    ReLU, which saves its own output, so fc1's is freed; fc2's output feeds the loss,
    which saves its own result; the ReLU's output is saved by itself and by fc2, once."""
    m = memory.step_memory(LAYERS, batch=8, precision="fp32", on_device=True)
    assert m.activations == (20 + 1) * 8 * 4
    assert m.weights == PARAMS * 4 and m.transient == (20 + 20) * 8 * 4
    # under bf16 the loss keeps its result in fp32
    assert memory.saved_activation_bytes(LAYERS, 8, "bf16") == (20 * 2 + 1 * 4) * 8
    # a softmax saves its fp32 result and the product after it a bf16 copy: both
    attn = [Layer("softmax", "softmax", out_elems=10), Layer("values", "attention", out_elems=3)]
    assert memory.saved_activation_bytes(attn, 2, "bf16") == 10 * 2 * (4 + 2)
    assert memory.saved_activation_bytes(attn, 2, "fp32") == 10 * 2 * 4
    # a GELU's derivative reads its input, a ReLU's its output
    fc, fc2 = Layer("fc", "dense", out_elems=6), Layer("fc2", "dense", out_elems=2)
    gelu = [fc, Layer("b1_gelu", "act", out_elems=6), fc2]
    relu = [fc, Layer("relu", "act", out_elems=6), fc2]
    assert memory.saved_activation_bytes(gelu, 1, "fp32") == (6 + 6) * 4
    assert memory.saved_activation_bytes(relu, 1, "fp32") == 6 * 4


def test_a_cpu_process_keeps_the_freed_outputs_that_fit_mallocs_heaps():
    """On a CPU an output the backward never reads still counts when it fits malloc's
    heaps (freed there, it stays resident); a larger one is unmapped when freed. The same
    three layers at a batch where the outputs pass 32 MiB: fc1's (read by nobody: the ReLU
    keeps its own) drops out, the ReLU's (read by fc2) and fc2's (the loss keeps its
    result, the same size) stay."""
    big = memory.HEAP_MAX_BLOCK // (20 * 4) + 1  # 20 floats a sample: just over 32 MiB
    small = big - 2
    m = memory.step_memory(LAYERS, batch=big, precision="fp32")
    assert m.activations == (20 + 5 + 1) * big * 4
    assert memory.step_memory(LAYERS, batch=small, precision="fp32").activations == \
        (20 + 20 + 5 + 1) * small * 4
    # what the backward reads counts on a device at any size, and on a CPU too
    assert memory.saved_activation_bytes(LAYERS, big, "fp32") == (20 + 1) * big * 4


def test_a_step_compiled_whole_with_its_state_donated_holds_one_gradient_at_a_time():
    """XLA updates each weight as its gradient is made (dlperf's JAX step, donated): the
    largest layer's gradient is the whole term; a framework that keeps every gradient
    until the update (PyTorch, and one not named) holds them all."""
    assert "jax" in memory.FUSED_UPDATE
    fused = memory.step_memory(LAYERS, batch=8, precision="fp32", framework="jax")
    assert fused.gradients == 220 * 4  # fc1's: 10 x 20 weights and 20 biases
    for fw in ("torch", None):
        assert memory.step_memory(LAYERS, 8, "fp32", framework=fw).gradients == PARAMS * 4
    whole = memory.step_memory(LAYERS, 8, "fp32")
    assert whole.total - fused.total == (PARAMS - 220) * 4


def test_an_lstm_keeps_its_gates_and_cell_state_for_its_backward():
    """An LSTM's backward reads, beyond its input and output, its four gates and its cell
    state at every step: five more tensors of its output's size (hidden x steps); a plain
    recurrent layer's reads its input and output alone."""
    assert memory.INTERNAL["lstm"] == 5
    emb, proj = Layer("embedding", "embedding", out_elems=8), Layer("proj", "dense", out_elems=3)
    for layer, extra in ((Layer("lstm", "lstm", out_elems=6), 5),
                         (Layer("rnn", "rnn", out_elems=6), 0)):
        # the embedding's output (the recurrent layer's input), its output, its internals
        assert memory.saved_activation_bytes([emb, layer, proj], 2, "fp32") == \
            (8 + 6 + extra * 6) * 2 * 4


def test_tensorflows_loss_writes_its_gradient_over_its_logits():
    """TensorFlow's fused softmax cross-entropy makes the logits' gradient in their own
    buffer, and the backward's scaling of it writes over it again: from the forward through
    the backward the logits and their gradient are one tensor, the loss's output. PyTorch
    keeps its log-softmax's output and makes the two gradients apart."""
    assert "tensorflow" in memory.IN_PLACE_LOSS and "torch" not in memory.IN_PLACE_LOSS
    net = [Layer("fc", "dense", out_elems=4), Layer("relu", "act", out_elems=4),
           Layer("proj", "dense", out_elems=10), Layer("xent", "loss", out_elems=10)]

    def step(fw, on_device=True):
        return memory.step_memory(net, batch=2, precision="fp32", framework=fw,
                                  on_device=on_device)

    # kept: the ReLU's output (read by itself and the projection) and the loss's output
    assert step("tensorflow").activations == step("torch").activations == (4 + 10) * 2 * 4
    # the backward's largest pair: PyTorch's loss holds its output's gradient and makes
    # its input's; TensorFlow's makes neither apart, so the pair is fc's and the ReLU's
    assert step("torch").transient == (10 + 10) * 2 * 4
    assert step("tensorflow").transient == (4 + 4) * 2 * 4
    # on a CPU the projection's output, read by nobody, stays in malloc's heaps when freed;
    # in TensorFlow it is never freed: it is the loss's output itself
    assert step("torch", False).activations - step("tensorflow", False).activations == \
        10 * 2 * 4


def test_xlas_max_pool_backward_holds_the_expansions_buffers():
    """XLA runs a max pool's backward as iotas, an argmax reduce-window and a scatter, each
    a buffer of its own (``memory.EXPANDED_POOL``): per padded input element its value,
    one int32 position per dimension and the scattered gradient, per output element its
    maximum and a position per dimension. PyTorch's pool makes its gradient in one kernel."""
    from dlperf.workloads.base import max_pool

    pool = max_pool("pool", channels=3, in_hw=6)  # 6x6 -> 3x3, padded to 8x8
    assert (pool.out_elems, pool.pad_elems) == (3 * 3 * 3, 3 * (8 * 8 - 6 * 6))
    padded, out = 2 * 3 * 8 * 8, 2 * 3 * 3 * 3
    assert memory.expanded_pool_bytes(pool, 3 * 6 * 6, 2, 4) == \
        padded * (4 + 4 * 4 + 4) + out * (4 + 4 * 4)
    net = [Layer("conv", "conv", out_elems=3 * 6 * 6, input_grad=False), pool,
           Layer("fc", "dense", out_elems=2), Layer("avgpool", "pool", out_elems=2)]
    assert memory.is_max_pool(pool) and not memory.is_max_pool(net[3])
    pair = (3 * 6 * 6 + 3 * 3 * 3) * 2 * 4  # the pool's input and output gradients
    assert memory.step_memory(net, 2, "fp32", framework="torch").transient == pair
    assert memory.step_memory(net, 2, "fp32", framework="jax").transient == \
        pair + memory.expanded_pool_bytes(pool, 3 * 6 * 6, 2, 4)
    # a GPU's XLA runs it as one kernel (the H200's measured peaks)
    assert memory.step_memory(net, 2, "fp32", framework="jax", on_device=True).transient \
        == pair


def test_xlas_own_plan_of_a_max_pool_backward_is_the_expansion():
    """The term against XLA itself: the temporaries of a compiled max-pool backward (JAX's
    pool, as its backend builds AlexNet and ResNet-50) are ``expanded_pool_bytes``."""
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    from dlperf.backends.jax_layers import max_pool as jax_max_pool
    from dlperf.workloads.base import max_pool

    # shapes whose every buffer is a whole number of XLA's 64-byte alignment
    for batch, channels, side in ((2, 8, 14), (1, 16, 10)):
        x = jax.numpy.ones((batch, side, side, channels))
        g = jax.numpy.ones_like(jax_max_pool(x))
        backward = jax.jit(lambda x, g: jax.vjp(jax_max_pool, x)[1](g)[0])
        plan = backward.lower(x, g).compile().memory_analysis()
        layer = max_pool("pool", channels, side)
        # beside the buffers, the reduce-window's result is a tuple: a table of its five
        # buffers' 8-byte addresses
        assert plan.temp_size_in_bytes == \
            memory.expanded_pool_bytes(layer, channels * side * side, batch, 4) + 5 * 8


def test_kerass_sgd_makes_each_weights_step_apart():
    """Keras's SGD multiplies a weight's gradient by the learning rate into a new tensor
    before subtracting it (``memory.UPDATE_COPY``): the update's working set is the
    largest weight's size, the transient where the backward's is smaller. PyTorch's SGD
    subtracts in place."""
    assert "tensorflow" in memory.UPDATE_COPY and "torch" not in memory.UPDATE_COPY
    assert memory.update_copy_bytes(LAYERS) == 220 * 4
    backward = (20 + 20) * 1 * 4  # fc1's and the ReLU's gradients, one sample
    assert memory.step_memory(LAYERS, 1, "fp32", framework="torch").transient == backward
    assert memory.step_memory(LAYERS, 1, "fp32", framework="tensorflow").transient == 220 * 4
    assert memory.step_memory(LAYERS, 64, "fp32", framework="tensorflow").transient == \
        (20 + 20) * 64 * 4  # a larger batch: the backward's pair is the larger


def test_kerass_networks_keep_the_padded_copy_of_each_input_they_pad_apart():
    """dlperf's Keras networks pad a max pool's input, and a convolution's that 'same'
    would pad otherwise than PyTorch, in a layer of their own (``memory.PADS_APART``):
    the window keeps that padded copy for its backward, beside the output its predecessor
    keeps. A stride-1 convolution padded by (window - 1) / 2 is Keras' 'same': no copy."""
    from dlperf.workloads.base import conv, max_pool

    strided = conv("c1", 3, 4, 3, 3, first=True, stride=2, pad=1, in_hw=6)  # 6x6 -> 3x3
    same = conv("c2", 4, 4, 3, 3, pad=1, in_hw=3)
    pool = max_pool("pool", channels=4, in_hw=3)  # 3x3 -> 2x2, padded to 5x5
    plain = conv("c3", 4, 4, 1, 2)
    assert [memory.padded_copy_elems(x) for x in (strided, same, pool, plain)] == \
        [3 * 8 * 8, 0, 4 * 5 * 5, 0]
    net = [strided, Layer("relu1", "act", out_elems=4 * 3 * 3), same,
           Layer("relu2", "act", out_elems=4 * 3 * 3), pool, plain]
    copies = (3 * 8 * 8 + 4 * 5 * 5) * 2 * 4  # two samples in fp32
    assert memory.padded_copies_bytes(net, 2, "fp32") == copies
    tf, torch = (memory.step_memory(net, 2, "fp32", framework=f).activations
                 for f in ("tensorflow", "torch"))
    positions = 4 * 2 * 2 * 2 * 8  # PyTorch's pool keeps its maxima's int64 positions
    assert "torch" not in memory.PADS_APART and tf - torch == copies - positions
    # DLBench's AlexNet pads its first convolution and its three pools apart in Keras
    from dlperf import workloads

    padded = [x.name for x in workloads.get("alexnet").layers() if memory.padded_copy_elems(x)]
    assert padded == ["conv1", "pool1", "pool2", "pool5"]


def test_pytorchs_max_pools_keep_their_maxima_positions_as_int64():
    """PyTorch's max pool saves, beside its input, the position of each window's maximum
    (an int64 per output element) for its backward; TensorFlow's reads its output and
    XLA's recomputes them (``memory.POOL_WITHOUT_POSITIONS``). An average pool keeps
    none."""
    from dlperf.workloads.base import conv, max_pool

    pool = max_pool("pool", channels=4, in_hw=4)  # 4x4 -> 2x2
    avg = Layer("avgpool", "pool", out_elems=4)
    net = [conv("c1", 3, 4, 3, 1, first=True, in_hw=4), pool, conv("c2", 4, 4, 1, 2), avg]
    assert pool.out_elems == 4 * 2 * 2
    assert memory.pool_positions_bytes(net, 3) == 4 * 2 * 2 * 3 * 8  # three samples
    for on_device in (False, True):
        torch, jax = (memory.step_memory(net, 3, "fp32", framework=f, on_device=on_device)
                      for f in ("torch", "jax"))
        assert torch.activations - jax.activations == 4 * 2 * 2 * 3 * 8
        assert memory.step_memory(net, 3, "fp32", on_device=on_device) == torch
    # recomputed under activation checkpointing: its positions are made again
    from dataclasses import replace

    assert memory.pool_positions_bytes([replace(pool, segment="s1")], 3) == 0


def test_a_blocks_shortcut_reads_the_blocks_input_not_its_predecessors_output():
    """A residual block's projection reads the block's input (``Layer.shortcut``), so the
    main branch's last batch norm, whose output only the sum reads, keeps nothing: on a
    device the kept tensors are the block's input (a ReLU's output), the two
    convolutions' outputs (their batch norms' inputs) and the last ReLU's output."""
    from dataclasses import replace

    net = [Layer("relu0", "act", out_elems=8), Layer("c3", "conv", out_elems=16),
           Layer("bn3", "bn", out_elems=16),
           Layer("proj", "conv", out_elems=16, shortcut=True),
           Layer("proj_bn", "bn", out_elems=16, shortcut=True),
           Layer("add", "add", out_elems=16), Layer("relu3", "act", out_elems=16)]
    assert memory.saved_activation_bytes(net, 2, "fp32") == (8 + 16 + 16 + 16) * 2 * 4
    # read as a chain, the projection would keep the batch norm's output as its input
    chain = [replace(x, shortcut=False) for x in net]
    assert memory.saved_activation_bytes(chain, 2, "fp32") == (8 + 16 + 16 + 16 + 16) * 2 * 4
    # ResNet-50's four projections, each with its batch norm
    from dlperf import workloads

    shortcut = [x.name for x in workloads.get("resnet50").layers() if x.shortcut]
    assert shortcut == [f"s{s}b1_{n}" for s in range(1, 5) for n in ("proj", "proj_bn")]


def test_optimizer_state_per_parameter():
    assert memory.optimizer_bytes(LAYERS, "momentum") == PARAMS * 4
    assert memory.optimizer_bytes(LAYERS, "adam") == PARAMS * 8
    with pytest.raises(Exception, match="unknown optimizer 'lamb'"):
        memory.optimizer_bytes(LAYERS, "lamb")


def test_largest_batch_is_the_last_that_fits():
    per_sample, fixed = 100.0, 1000.0
    total = lambda b: fixed + per_sample * b  # noqa: E731
    assert memory.largest_batch(total, 1000.0 + 100.0 * 37) == 37
    assert memory.largest_batch(total, 1000.0 + 100.0 * 37 + 99) == 37
    assert memory.largest_batch(total, 1099.0) is None  # not even one sample
    assert memory.largest_batch(total, 1e30, limit=1000) == 1000


def test_predict_gives_the_breakdown_whether_it_fits_and_the_largest_batch():
    p = predict("resnet50", device="a100-40gb", precision="bf16", batch_size=256)
    doc = p.model_dump()
    assert doc["peak_memory_bytes"] == p.memory.total == p.memory_bytes
    assert set(doc["memory"]) >= {"weights", "gradients", "optimizer", "activations",
                                  "transient", "baseline", "total"}
    capacity = catalogue.device("a100-40gb").memory_gb * 1e9
    assert p.fits == (p.memory.total <= capacity)
    top = p.max_batch
    assert top is not None and top >= 256
    at_top = predict("resnet50", device="a100-40gb", precision="bf16", batch_size=top)
    over = predict("resnet50", device="a100-40gb", precision="bf16", batch_size=top + 1)
    assert at_top.fits and not over.fits
    # MFU: the model's FLOPs over the datasheet's bf16 peak
    peak = catalogue.device("a100-40gb").peak_flops("bf16")
    assert p.mfu == pytest.approx(p.flops_per_step / p.time_s / peak)
    assert "A100" in p.mfu_peak and "bf16" in p.mfu_peak


def test_a_catalogue_gpus_largest_batch_is_also_given_with_the_measured_gpu_error(capsys):
    """On a catalogue GPU ``dlperf predict`` gives the model's largest batch and the one
    that still fits with the model's error over the GPU peaks dlperf measured (the batch
    ``dlperf advise`` advises); a catalogue CPU, whose memory was never checked, has none."""
    import json

    from dlperf.cli import main
    from dlperf.report.published_memory import gpu_memory_error

    assert main(["predict", "-n", "resnet50", "-d", "a100-40gb", "--precision", "bf16",
                 "-b", "256", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    err = gpu_memory_error()
    assert doc["memory_margin"]["error"] == err.p90 > 0 and err.gpu in doc["memory_margin"]["basis"]
    top, spare = doc["max_batch"], doc["max_batch_with_margin"]
    assert spare < top

    def total(b):
        return predict("resnet50", device="a100-40gb", precision="bf16", batch_size=b).memory.total

    capacity = catalogue.device("a100-40gb").memory_gb * 1e9
    assert total(spare) * (1 + err.p90) <= capacity < total(spare + 1) * (1 + err.p90)
    assert main(["predict", "-n", "resnet50", "-d", "a100-40gb", "--precision", "bf16",
                 "-b", "256"]) == 0
    text = capsys.readouterr().out
    assert (f"largest batch that fits: {top} by the model, {spare} leaving "
            f"{err.p90:.1%} for its error") in text
    assert "fits in a100-40gb's memory" in text
    cpu = predict("resnet50", device="xeon-8280", batch_size=64)
    assert cpu.memory_margin is None and cpu.max_batch_with_margin is None and cpu.max_batch


def test_a_largest_batch_past_the_search_says_or_more(capsys):
    """A tiny network fits more samples than dlperf tries: its largest batch is the
    search's limit, said as 'or more', not as the answer; a larger one is exact."""
    from dlperf.cli import main

    tiny = predict("fcn5", size="tiny", device="a100-40gb", batch_size=8)
    assert tiny.max_batch == memory.BATCH_SEARCH_LIMIT and tiny.max_batch_or_more
    assert main(["predict", "-n", "fcn5", "--size", "tiny", "-d", "a100-40gb", "-b", "8"]) == 0
    assert (f"largest batch that fits: {memory.BATCH_SEARCH_LIMIT} or more (the largest "
            "batch dlperf tries)") in capsys.readouterr().out
    full = predict("resnet50", device="a100-40gb", batch_size=64)
    assert full.max_batch < memory.BATCH_SEARCH_LIMIT and not full.max_batch_or_more


def test_data_parallel_memory_is_per_device_at_its_share_of_the_batch():
    one = predict("alexnet", device="a100-40gb", batch_size=64)
    four = predict("alexnet", device="a100-40gb", batch_size=256, strategy="sync", devices=4)
    # each device: the whole model, DDP's bucket copy of its gradients, a quarter of the batch
    assert four.memory == memory.with_ddp_buckets(one.memory)
    assert four.memory.gradients == 2 * one.memory.gradients
    assert four.max_batch < 4 * one.max_batch and four.max_batch % 4 == 0


def test_a_gpu_name_maps_to_its_catalogue_entry():
    assert catalogue.gpu_entry("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert catalogue.gpu_entry("NVIDIA H100 PCIe") == "h100-pcie"
    assert catalogue.gpu_entry("NVIDIA A100-SXM4-80GB") == "a100-80gb"
    assert catalogue.gpu_entry("NVIDIA A100-SXM4-40GB") == "a100-40gb"
    assert catalogue.gpu_entry("NVIDIA H200") == "h200"
    assert catalogue.gpu_entry("NVIDIA L40S") == "l40s" and catalogue.gpu_entry("NVIDIA L4") == "l4"
    assert catalogue.gpu_entry("Tesla K80") == "k80"
    assert catalogue.gpu_entry("Some Other GPU") is None and catalogue.gpu_entry(None) is None


def test_mfu_and_hfu_divide_model_and_executed_flops_by_the_peak(monkeypatch):
    from dlperf.core import cpu_peak, environment
    from dlperf.kinds.step import utilisation

    spec = RunSpec(network="fcn5", size="tiny", batch_size=8)
    model = utilisation.model_flops(spec)
    from dlperf import workloads

    _, _, cfg = workloads.resolve("fcn5", "tiny", {})
    assert model == 8 * sum(layer.train_flops() for layer in cfg.layers())
    units = cpu_peak.FmaUnits("test", 2, 512, "avx512f", "a test")
    monkeypatch.setattr(environment, "theoretical_peak",
                        lambda t: cpu_peak.Theoretical(1e11, t, units, 3.0, "test"))
    peak, what = utilisation.device_peak(spec, {})
    assert peak == 1e11 and "theoretical fp32 peak" in what
    mfu, hfu = utilisation.utilisation(model, 1.5 * model, 0.01, peak)
    assert mfu == pytest.approx(model / 0.01 / 1e11) and hfu == pytest.approx(1.5 * mfu)
    # a precision the CPU's known peak is not for: unknown, saying why
    bf16 = spec.model_copy(update={"precision": "bf16"})
    assert utilisation.device_peak(bf16, {}) == (None, "unknown: dlperf knows a CPU's fp32 "
                                                      "peak, not its bf16 one")
    # a GPU: the catalogue's datasheet peak at the run's precision
    gpu = RunSpec(network="fcn5", size="tiny", batch_size=8, device="gpu", precision="bf16")
    peak, what = utilisation.device_peak(gpu, {"gpu": "NVIDIA H100 80GB HBM3"})
    assert peak == catalogue.device("h100-sxm").peak_flops("bf16") and "h100-sxm" in what


def test_a_result_aggregates_its_mfu_from_the_median_time():
    from dlperf.core.aggregate import aggregate

    spec = RunSpec(network="fcn5", size="tiny", batch_size=8)

    def ok(median: float, repeat: int) -> RunResult:
        m = Metrics(steps=5, median_s=median, mean_s=median, std_s=0, min_s=median,
                    max_s=median, mad_s=0, iqr_s=0, cv=0, samples_per_s=8 / median,
                    flops_per_step=2e9, model_flops_per_step=1e9,
                    utilisation_peak_flops=1e11, utilisation_peak="a test peak")
        return RunResult(spec=spec.model_copy(update={"repeat": repeat}), status="ok",
                         metrics=m)

    [row] = aggregate([ok(0.1, 0), ok(0.3, 1), ok(0.2, 2)])
    assert row.mfu == pytest.approx(1e9 / 0.2 / 1e11)
    assert row.hfu == pytest.approx(2e9 / 0.2 / 1e11)
    assert row.utilisation_peak == "a test peak"


@pytest.mark.slow
def test_a_step_predicted_not_to_fit_a_limit_is_recorded_as_out_of_memory(tmp_path):
    """The model's peak without the framework's own memory is already above the limit:
    the run is stopped and stored as 'oom' (its worker's memory is watched)."""
    from dlperf import api, workloads
    from dlperf.core.spec import Measurement

    _, _, cfg = workloads.resolve("fcn5", None, {})
    need = memory.step_memory(cfg.layers(), 64, "fp32").total
    limit = int(0.8 * need)
    row = api.run("fcn5", threads=1, batch_size=64, memory_limit=limit, db=tmp_path / "r.db",
                  measurement=Measurement(min_time_s=0.05, min_steps=1), timeout_s=300)
    assert not row.measured and row.results[-1].failure.reason == "oom"


@pytest.mark.slow
def test_a_run_that_fits_its_limit_is_not_called_out_of_memory_for_the_speed_probe(tmp_path):
    """The speed probe maps 128 MiB after the steps, and the limit's watch reads the
    worker's high-water mark: under a limit a little above the step's own peak the probe
    is left out, where it would once have pushed the run over (the boundary runs of
    bench_memory.py called FCN-5 out of memory at 1.1x its predicted peak so)."""
    from dlperf import api
    from dlperf.core import speed_probe
    from dlperf.core.spec import Measurement

    quick = Measurement(min_time_s=0.05, min_steps=1, warmup_max_steps=1)
    free = api.run("fcn5", size="tiny", threads=1, batch_size=4, db=tmp_path / "a.db",
                   measurement=quick, timeout_s=300)
    [ok] = free.ok
    assert ok.metrics.speed_probe  # probed where no limit holds
    limit = ok.metrics.peak_rss_bytes + speed_probe.BYTES // 4
    row = api.run("fcn5", size="tiny", threads=1, batch_size=4, memory_limit=limit,
                  db=tmp_path / "b.db", measurement=quick, timeout_s=300)
    assert row.measured, row.results[-1].failure
    assert row.ok[-1].metrics.speed_probe is None


def test_a_run_reports_mfu_and_hfu_in_its_metrics_with_the_peak_named(tmp_path, capsys):
    import json

    from dlperf.cli import main

    assert main(["run", "-n", "fcn5", "--size", "tiny", "-b", "8", "--min-time", "0.05",
                 "--json", "--db", str(tmp_path / "r.db")]) == 0
    [result] = json.loads(capsys.readouterr().out)
    m = result["metrics"]
    assert {"mfu", "hfu", "model_flops_per_step", "utilisation_peak"} <= set(m)
    assert m["model_flops_per_step"] > 0 and m["utilisation_peak"]
    if m["utilisation_peak_flops"]:  # a CPU dlperf knows the FMA units of
        assert m["mfu"] == pytest.approx(m["model_flops_per_step"] / m["median_s"]
                                         / m["utilisation_peak_flops"])
    else:
        assert m["mfu"] is None and m["utilisation_peak"].startswith("unknown")


def test_advice_gives_the_largest_batch_with_the_memory_models_validated_error(monkeypatch):
    from dlperf.advice.local import _batch
    from dlperf.core import environment
    from dlperf.perfmodel.predict import training_memory

    def memory(b):
        return training_memory("alexnet", size="tiny", batch_size=b)

    # a machine where batch 64 fits by the model alone, but not with a 12% margin
    capacity = memory(64) * 1.06
    assert memory(128) > capacity
    machine = environment.machine()
    monkeypatch.setattr(environment, "machine", lambda: {**machine, "memory_bytes": capacity})
    unvalidated = _batch("alexnet", "tiny", [])
    assert unvalidated.value == 64 and unvalidated.source.error is None
    assert "error not validated yet" in unvalidated.source.describe()
    checked = _batch("alexnet", "tiny", [], {None: (0.12, 27)})
    assert checked.value == 32  # the validated error left as margin
    assert checked.source.error == 0.12 and "27 steps of all frameworks" in checked.source.basis
    assert "validated error +-12%" in checked.source.describe()
    assert "leaving 12% for the model's error" in checked.advice
    # the framework whose runtime it counts, by its own error where it has enough steps
    own = _batch("alexnet", "tiny", [], {None: (0.12, 27), "tensorflow": (0.01, 9)},
                 ("tensorflow", 0.0))
    assert own.value == 64 and "9 tensorflow steps" in own.source.basis
    fallback = _batch("alexnet", "tiny", [], {None: (0.12, 27)}, ("torch", 0.0))
    assert fallback.value == 32 and "27 steps of all frameworks" in fallback.source.basis


def test_the_memory_margin_is_each_frameworks_90th_percentile_with_enough_steps():
    from types import SimpleNamespace

    from dlperf.kinds.calibrate.validate import MARGIN_CASES, memory_margins

    def case(fw, error):
        return SimpleNamespace(row=SimpleNamespace(spec=SimpleNamespace(kind="step",
                                                                         framework=fw)),
                               error=error)

    torch = [case("torch", e) for e in (0.01, -0.02, 0.03, 0.04, -0.05)]
    tf = [case("tensorflow", e) for e in (-0.2, 0.1)]  # fewer than MARGIN_CASES
    margins = memory_margins([*torch, *tf])
    assert len(tf) < MARGIN_CASES <= len(torch)
    assert set(margins) == {None, "torch"}  # too few TensorFlow steps for a margin of its own
    assert margins["torch"] == (pytest.approx(0.046), 5)
    assert margins[None][1] == 7 and margins[None][0] == pytest.approx(0.14)


def test_checkpointing_keeps_only_each_blocks_input():
    from dlperf import workloads

    params = {"depth": 2, "width": 32, "heads": 2, "seq_len": 16, "vocab": 64}
    _, _, plain = workloads.resolve("gpt2", "tiny", params)
    _, _, ck = workloads.resolve("gpt2", "tiny", {**params, "checkpoint": 1})
    a, b = plain.layers(), ck.layers()
    assert [x.name for x in a] == [x.name for x in b]  # the same network, the same FLOPs
    assert sum(x.train_flops() for x in a) == sum(x.train_flops() for x in b)
    # kept: every output outside the blocks, and each block's last output (b1_residual2,
    # b2_residual2), the next one's input; the largest block recomputed is transient
    outside = sum(x.out_elems for x in a if not x.name.startswith(("b1_", "b2_")))
    block = sum(x.out_elems for x in a if x.name.startswith("b1_"))
    last = next(x.out_elems for x in a if x.name == "b1_residual2")
    m_plain, m_ck = (memory.step_memory(x, 4, "fp32") for x in (a, b))
    assert m_ck.activations == (outside + 2 * last) * 4 * 4
    assert m_ck.transient == m_plain.transient + block * 4 * 4
    assert m_ck.activations < m_plain.activations
    # on a GPU too: a recomputed block saves nothing but its last output
    d_plain, d_ck = (memory.step_memory(x, 4, "fp32", on_device=True) for x in (a, b))
    assert d_ck.activations < d_plain.activations
    # kept: what the layers outside the blocks save (the blocks' input, the final norm's
    # input and output, the loss's result) and each block's last output
    kept = ("embed_add", "b1_residual2", "b2_residual2", "ln_f", "softmax_xent")
    assert d_ck.activations == sum(x.out_elems for x in b if x.name in kept) * 4 * 4


@pytest.mark.slow
def test_checkpointing_lowers_the_measured_memory_and_counts_its_recomputation(tmp_path):
    """A GPT-2 whose attention scores dominate its activations, with and without
    checkpointing: the predicted and the measured peak both fall, and the FLOPs the
    framework executed exceed the model's by the blocks' second forward (HFU > MFU)."""
    from dlperf import api, workloads
    from dlperf.core.spec import Measurement

    params = {"depth": 2, "width": 256, "heads": 4, "seq_len": 512, "vocab": 1000}
    rows, predicted = {}, {}
    for ck in (0, 1):
        p = {**params, "checkpoint": ck}
        rows[ck] = api.run("gpt2", threads=1, batch_size=8, params=p, db=tmp_path / "r.db",
                           measurement=Measurement(min_time_s=0.05, min_steps=1,
                                                   warmup_max_steps=2))
        _, _, cfg = workloads.resolve("gpt2", None, p)
        predicted[ck] = memory.step_memory(cfg.layers(), 8, "fp32").activations
    assert all(r.measured for r in rows.values())
    assert predicted[1] < predicted[0]
    assert rows[1].peak_rss_bytes < rows[0].peak_rss_bytes
    m0, m1 = (rows[k].ok[0].metrics for k in (0, 1))
    assert m0.model_flops_per_step == m1.model_flops_per_step
    assert m1.flops_per_step > 1.1 * m0.flops_per_step  # the recomputed forward


def test_accumulating_micro_batches_holds_the_largest_gradient_twice():
    one = memory.step_memory(LAYERS, 2, "fp32")
    assert memory.accumulated(one, LAYERS, 1) == one  # one micro-batch: nothing added
    more = memory.accumulated(one, LAYERS, 4)
    # fc1's 220 fp32 gradients are made afresh and added into the kept ones
    assert more.transient == max(one.transient, 220 * 4) == 880
    assert more.model_copy(update={"transient": one.transient}) == one


def test_the_parameter_servers_process_holds_its_vectors_beside_its_worker():
    one = memory.step_memory(LAYERS, 2, "fp32")
    flat = PARAMS * 4
    served = memory.with_parameter_server(one, LAYERS, 3, False)
    # the server's weights and the copy last sent each of 3 pushers; the worker's own
    # flattened gradient; 2 other pushes received and the drift's vector under the lock
    assert served.weights == one.weights + 4 * flat
    assert served.gradients == one.gradients + flat
    assert served.transient == one.transient + 3 * flat
    assert memory.with_parameter_server(one, LAYERS, 3, True).weights == one.weights + 5 * flat
    # async on this machine's CPU: every worker pushes; on a GPU the server is host memory
    assert memory.worker_step_memory(LAYERS, 2, "fp32", "async", 3) == served
    assert memory.worker_step_memory(LAYERS, 2, "fp32", "async", 3, on_device=True) == \
        memory.step_memory(LAYERS, 2, "fp32", on_device=True)
    # mixed: 6 workers in groups of 2, three leaders push, DDP's buckets in each group
    assert memory.worker_step_memory(LAYERS, 2, "fp32", "mixed", 6, 2) == \
        memory.with_parameter_server(memory.with_ddp_buckets(one), LAYERS, 3, True)


def test_predict_counts_the_servers_share_on_a_cpu_and_not_on_a_gpu():
    from dlperf import workloads

    layers = workloads.get("fcn5").layers()
    cpu = predict("fcn5", device="i7-3820", strategy="async", devices=2, batch_size=64,
                  link="eth100")
    assert cpu.memory == memory.with_parameter_server(
        memory.step_memory(layers, 32, "fp32", baseline=cpu.memory.baseline), layers, 2,
        False)
    assert any("hosts the parameter server" in n for n in cpu.notes)
    gpu = predict("fcn5", device="a100-40gb", strategy="async", devices=2, batch_size=64)
    assert gpu.memory == memory.step_memory(layers, 32, "fp32", on_device=True)
    assert not any("hosts the parameter server" in n for n in gpu.notes)


@pytest.mark.slow
@pytest.mark.xdist_group("full_fcn5_sync")  # one worker measures the fixture once
def test_the_servers_process_peaks_higher_than_a_sync_worker_as_predicted(full_fcn5_sync):
    """Full-size FCN-5 (448 MiB of weights) on two workers, async against sync (batch 32):
    rank 0 holds the server's weights, the copy sent to each worker, a received push and
    the drift's vector beside its own worker, about five weight vectors more than a sync
    worker's DDP buckets; the measured peaks differ by at least half the predicted."""
    from dlperf import workloads
    from dlperf.engine.launch.torchrun import run_parallel
    from dlperf.kinds.parallel.make import make_spec
    from tests.test_parallel import TIMEOUTS

    r = run_parallel(make_spec("fcn5", strategy="async", workers=2, batch_size=32, steps=2,
                               warmup_steps=1), **TIMEOUTS)
    assert r.ok, r.failure
    peaks = {"sync": full_fcn5_sync.metrics.peak_rss_bytes, "async": r.metrics.peak_rss_bytes}
    layers = workloads.get("fcn5").layers()
    rise = (memory.worker_step_memory(layers, 16, "fp32", "async", 2).total
            - memory.worker_step_memory(layers, 16, "fp32", "sync", 2).total)
    assert rise > 1.5 * 2**30
    assert peaks["async"] - peaks["sync"] > rise / 2, (peaks, rise)


def test_a_pipelines_memory_is_its_fullest_stage_with_the_accumulation():
    from dlperf import workloads
    from dlperf.kinds.calibrate.validate import stage_memory
    from dlperf.perfmodel.partition import pipeline_stages

    layers = workloads.get("fcn5").layers()
    stages = pipeline_stages(layers, 2)
    assert sorted(i for s in stages for i in s) == list(range(len(layers)))
    assert layers[stages[-1][-1]].op == "loss"
    by_stage = [memory.accumulated(memory.step_memory([layers[i] for i in s], 64, "fp32"),
                                   [layers[i] for i in s], 8) for s in stages]
    # GPipe: every micro-batch's activations of a stage at once, the whole batch's
    top = max(by_stage, key=lambda m: m.total)
    assert stage_memory(layers, 64, "fp32", 2, 8, 0.0) == top
    assert top.transient == memory.largest_layer_bytes([layers[i] for i in stages[
        by_stage.index(top)]])
    assert stage_memory(layers, 64, "fp32", 2, 1, 0.0).total < top.total
    # dlperf predict gives the same stage at the same batch (a catalogue GPU's device
    # memory: the activations the backward saves)
    p = predict("fcn5", device="a100-40gb", strategy="pipeline", devices=2,
                batch_size=64, micro_batches=8)
    on_gpu = [memory.accumulated(memory.step_memory([layers[i] for i in s], 64, "fp32",
                                                    on_device=True),
                                 [layers[i] for i in s], 8) for s in stages]
    assert p.memory == max(on_gpu, key=lambda m: m.total)


@pytest.mark.slow
def test_a_pipeline_stage_accumulating_micro_batches_peaks_higher_as_predicted(tmp_path):
    """Full-size FCN-5 in two stages, each holding a 209 MiB layer: with four
    micro-batches each later one's gradient of that layer is made apart and added in, so
    the fullest stage's measured peak rises by about the layer's gradient over the same
    step in one micro-batch (at least half the predicted rise)."""
    from dlperf import workloads
    from dlperf.engine.launch.torchrun import run_parallel
    from dlperf.kinds.calibrate.validate import stage_memory
    from dlperf.kinds.parallel.make import make_spec
    from tests.test_parallel import TIMEOUTS

    peaks = {}
    for m in (1, 4):
        spec = make_spec("fcn5", strategy="pipeline", workers=2, batch_size=8,
                         micro_batches=m, steps=2, warmup_steps=1)
        r = run_parallel(spec, **TIMEOUTS)
        assert r.ok, r.failure
        peaks[m] = r.metrics.peak_rss_bytes
    layers = workloads.get("fcn5").layers()
    rise = (stage_memory(layers, 8, "fp32", 2, 4, 0.0).total
            - stage_memory(layers, 8, "fp32", 2, 1, 0.0).total)
    assert rise > 150 * 2**20
    assert peaks[4] - peaks[1] > rise / 2, (peaks, rise)


def test_a_worker_reports_its_own_peak_not_its_launchers():
    """Linux carries ru_maxrss across fork and execve: a worker started by a large process
    must not report that process's peak as its own."""
    import subprocess
    import sys

    import numpy as np

    from dlperf.core import environment

    ballast = np.ones(300 * 2**20 // 8)  # 300 MiB resident in this (the launching) process
    ballast += 1
    code = "from dlperf.core import environment; print(environment.peak_resident_bytes())"
    child = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               check=True).stdout)
    assert environment.peak_resident_bytes() > 300 * 2**20
    assert child < 250 * 2**20  # a Python importing dlperf's core, without the ballast
    del ballast


def test_validate_memory_sets_a_gpu_step_beside_the_saved_tensors(tmp_path, capsys):
    """A step measured on a GPU (its allocator's peak) is predicted by the saved-tensor
    rule with no runtime baseline, and summarised by device apart from the CPU's."""
    import json

    from dlperf import workloads
    from dlperf.cli import main
    from dlperf.core.spec import Measurement, RunSpec
    from dlperf.core.store import Store
    from dlperf.engine.worker import execute

    spec = RunSpec(network="gpt2", size="tiny", batch_size=4,
                   measurement=Measurement(min_time_s=0.01, min_steps=1, warmup_max_steps=1))
    r = execute(spec)
    assert r.ok, r.failure
    on_gpu = spec.model_copy(update={"device": "gpu", "precision": "bf16"})
    m = r.metrics.model_copy(update={"device_peak_bytes": 10 * 2**20})
    db = tmp_path / "gpu.db"
    with Store(db) as store:
        store.add(r.model_copy(update={"spec": on_gpu, "metrics": m}))
    assert main(["validate", "--memory", "--json", "--db", str(db)]) == 0
    doc = json.loads(capsys.readouterr().out)
    [case] = doc["cases"]
    _, _, cfg = workloads.resolve("gpt2", "tiny", {})
    expected = memory.step_memory(cfg.layers(), 4, "bf16", on_device=True)
    assert case["predicted_bytes"] == expected.total and case["memory"]["baseline"] == 0
    assert case["error"] == pytest.approx(expected.total / (10 * 2**20) - 1)
    assert [s["value"] for s in doc["summary"]["device"]] == ["gpu"]


def test_a_process_can_restart_its_peak_resident_memory_from_now():
    """The runtime of training each network is read from a fresh peak: a buffer freed
    before the restart no longer counts in it."""
    import subprocess
    import sys

    code = ("import numpy as np; from dlperf.core import environment as e\n"
            "b = np.ones(200 * 2**20 // 8); b += 1; del b\n"
            "before = e.peak_resident_bytes(); ok = e.restart_peak_resident()\n"
            "print(before, e.peak_resident_bytes(), ok)")
    before, after, ok = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                       text=True, check=True).stdout.split()
    assert ok == "True"
    assert int(before) - int(after) > 150 * 2**20


def test_predict_says_whose_memory_a_prediction_is_set_against():
    from dlperf.cli.predict import _memory_of

    assert _memory_of("a100-40gb") == "a100-40gb's memory"
    assert _memory_of("xeon-8280") == "xeon-8280's memory"
    assert _memory_of("cpu:tensorflow:x2") == "this machine's memory"
    assert _memory_of("gpu:torch:x1:bf16") == "this machine's GPU memory"


def test_a_processs_files_pages_are_counted_as_it_maps_them(tmp_path):
    """``file_resident_bytes`` is RssFile: a file mapped and read grows it by the pages
    read, memory of the process's own (the heap) does not."""
    import mmap

    import numpy as np

    from dlperf.core import environment

    path = tmp_path / "pages.bin"
    path.write_bytes(b"\1" * (16 * 2**20))  # written just now: in the page cache
    before = environment.file_resident_bytes()
    heap = np.ones(32 * 2**20 // 8)
    heap += 1
    assert abs(environment.file_resident_bytes() - before) < 4 * 2**20
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert sum(m[i] for i in range(0, len(m), mmap.PAGESIZE)) == len(m) // mmap.PAGESIZE
        grown = environment.file_resident_bytes() - before
    assert 15 * 2**20 <= grown <= 20 * 2**20
    del heap


def test_validate_memory_says_when_a_runs_library_pages_moved_from_the_calibrations(
        tmp_path, capsys):
    """A step whose process held its libraries' files' pages further from the calibration's
    than ``FILE_DRIFT`` of its peak (the page cache's state) is marked, the others'
    error given apart, and each error with the run's own pages beside; a step that did not
    record them (an older dlperf) is neither."""
    from dlperf import api
    from dlperf.cli import main
    from dlperf.core.store import Store
    from dlperf.kinds.calibrate import plan, validate
    from tests import calibration_fixtures as made_up
    from tests.report_fixtures import result

    mib = 2**20
    db = tmp_path / "files.db"
    with Store(db) as store:
        for r in made_up.kernel_results(allreduce=False):
            store.add(r.model_copy(update={"outcome": r.outcome.model_copy(update={
                "baseline_rss_bytes": 240 * mib, "baseline_file_rss_bytes": 80 * mib})}))
        assert plan.runtime_file_pages(store) == {("torch", "cpu"): 80 * mib}
        for batch, files in ((64, 150 * mib), (128, 82 * mib), (256, None)):
            r = result("fcn5", 1, 0.5, batch=batch)
            store.add(r.model_copy(update={"metrics": r.metrics.model_copy(update={
                "peak_rss_bytes": 1300 * mib, "file_rss_bytes": files})}))
        cases, _ = validate.memory_cases(store, {("torch", "cpu"): 330 * mib})
    by = {c.row.spec.batch_size: c for c in cases}
    assert by[64].file_drift == 70 * mib and by[64].drifted
    assert by[128].file_drift == 2 * mib and not by[128].drifted
    assert by[256].file_drift is None and not by[256].drifted
    assert by[256].own_pages_error is None
    assert by[64].own_pages_error == pytest.approx(
        (by[64].predicted.total + 70 * mib) / (1300 * mib) - 1)
    line = validate.file_pages_line(cases)
    assert line.startswith("library pages: 1 of 2 runs held their files' pages resident "
                           "more than 2% of their peak apart")
    assert "(at most +70 MiB" in line and "the other 1: median |error| " \
        f"{abs(by[128].error):.1%}" in line
    assert f"median |error| {statistics.median([abs(by[64].own_pages_error), abs(by[128].own_pages_error)]):.1%}" in line  # noqa: E501
    assert main(["validate", "--memory", "--db", str(db)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    [marked] = [c for c in api.memory_validation(db)[0] if c.drifted]
    assert "library pages: 1 of 2 runs" in out and f" {marked.error:+.0%}~ " in out
    assert validate.file_pages_line([by[256]]) is None


def test_the_calibrations_files_pages_are_those_of_its_workers_that_trained(tmp_path):
    """The runtime baseline is a trained network's, so the files' pages a step's are set
    against are those of the calibration's workers that trained one (their training's
    code mapped), not a worker's that only loaded the framework."""
    from dlperf.core.store import Store
    from dlperf.kinds.calibrate import plan
    from tests import calibration_fixtures as made_up

    mib = 2**20
    with Store(tmp_path / "files.db") as store:
        for r in made_up.kernel_results(threads=(1, 2), allreduce=False):
            trained = {"fcn5": 300 * mib} if r.spec.threads == 1 else {}
            files = 90 * mib if trained else 70 * mib
            store.add(r.model_copy(update={"outcome": r.outcome.model_copy(update={
                "baseline_rss_bytes": 240 * mib, "baseline_file_rss_bytes": files,
                "train_runtime_bytes": trained})}))
        assert plan.runtime_file_pages(store) == {("torch", "cpu"): 90 * mib}
    with Store(tmp_path / "untrained.db") as store:
        for r in made_up.kernel_results(threads=(1, 2), allreduce=False):
            store.add(r.model_copy(update={"outcome": r.outcome.model_copy(update={
                "baseline_file_rss_bytes": (60 + 20 * r.spec.threads) * mib})}))
        assert plan.runtime_file_pages(store) == {("torch", "cpu"): 90 * mib}
