"""The performance model calibrated on this machine: kernel FLOPs and bytes, the fits
(against a made-up machine whose curves are known), the kernel kind through the worker
and the runner, predict --device cpu with the measured value beside it, and validate
(the leave-one-network-out factors never see the network they predict)."""

from __future__ import annotations

import json
import math

import pytest

from dlperf import backends, workloads
from dlperf.cli import main
from dlperf.core import framework_table
from dlperf.core.spec import RunSpec
from dlperf.core.store import Store
from dlperf.kinds.calibrate import plan as calibration
from dlperf.kinds.calibrate import validate
from dlperf.kinds.calibrate.options import KernelOptions, KernelOutcome, KernelPart
from dlperf.kinds.calibrate.prediction import predict_for_spec, why_not
from dlperf.perfmodel import fit
from dlperf.perfmodel import kernels as k
from tests import calibration_fixtures as made_up
from tests.report_fixtures import result


# ----------------------------------------------------------------------------- workloads
@pytest.mark.parametrize("name", sorted(workloads.WORKLOADS))
def test_each_layers_matrix_products_add_up_to_its_forward_flops(name):
    """The shapes the model times are the layer's own products: 2 x count x m n k per
    sample summed over a layer's products is its forward FLOPs, at every size."""
    wl = workloads.WORKLOADS[name]
    for size in wl.sizes:
        _, _, cfg = workloads.resolve(name, size)
        for layer in cfg.layers():
            if layer.gemms:
                assert sum(g.flops for g in layer.gemms) == layer.fwd_flops, (name, size, layer.name)


# ----------------------------------------------------------------------------- kernels
def test_kernel_flops_and_bytes_are_the_closed_forms():
    assert k.flops("gemm", (3, 5, 7)) == 2 * 3 * 5 * 7
    assert k.nbytes("gemm", (3, 5, 7)) == 4 * (3 * 7 + 7 * 5 + 3 * 5)
    # the weight gradient over a sequence: (m, n, time, batch), time x batch contracted
    assert k.flops("gemm_tn_seq", (3, 5, 2, 4)) == k.flops("gemm_tn", (3, 5, 8))
    assert k.nbytes("gemm_tn_seq", (3, 5, 2, 4)) == k.nbytes("gemm_tn", (3, 5, 8))
    # a 3x3 convolution, stride 1, padding 1: the output keeps the side
    shape = (2, 3, 8, 10, 3, 1)
    assert k.conv_gemm(shape) == (2 * 10 * 10, 8, 9 * 3)
    assert k.flops("conv", shape) == 2 * (2 * 100) * 8 * 27
    assert k.flops("conv_bwd", shape) == 2 * k.flops("conv", shape)
    x, w, y = 2 * 3 * 100, 9 * 3 * 8, 2 * 8 * 100
    assert k.nbytes("conv", shape) == 4 * (x + w + y)
    assert k.conv_gemm((1, 4, 4, 9, 3, 2)) == (5 * 5, 4, 36)  # (9 + 2 - 3) // 2 + 1 = 5
    assert k.nbytes("memory", (1000,)) == 8000  # one read, one write
    # the loss: read the logits, write their gradient
    assert k.nbytes("xent", (10, 100)) == 2 * 4 * 1000 and k.flops("xent", (10, 100)) == 0
    # batch normalisation: the bytes perfmodel.costs counts for such a layer
    from dlperf.perfmodel.costs import layer_cost
    from dlperf.workloads.dlbench import bn

    c = layer_cost(bn("bn", 16, 7), 16 * 7 * 7, 3, 4)
    assert k.nbytes("bn", (3, 16, 7)) == c.fwd_bytes + c.bwd_bytes
    # the 3x3/2 max pool with one row of padding: 9 -> 5, and the bytes of a pool layer
    from dlperf.workloads.base import Layer

    c = layer_cost(Layer("pool", "pool", out_elems=16 * 5 * 5), 16 * 9 * 9, 3, 4)
    assert k.nbytes("pool", (3, 16, 9)) == c.fwd_bytes + c.bwd_bytes == 4 * 3 * 16 * (
        3 * 81 + 2 * 25)
    assert k.flops("dispatch", (3,)) == 3 * 2 * 8**3


def test_the_default_grid_is_generic_and_bounded():
    for op in ("gemm", "gemm_tn_seq", "conv", "conv_bwd", "memory", "xent", "dispatch",
               "allreduce"):
        assert k.grid(op), op
    # the sequence's weight gradient reaches the inner dimension of a sequence batch
    assert max(t * b for _, _, t, b in k.grid("gemm_tn_seq")) == k.SEQ_INNER_MAX
    # the loss over few and many classes, every shape whole rows
    assert {c for _, c in k.grid("xent")} == set(k.XENT_CLASSES)
    assert all(r >= 1 for r, _ in k.grid("xent"))
    seq = k.grid("gemm_tn_seq")
    assert all(k.flops("gemm_tn_seq", s) <= k.MAX_GEMM_FLOPS or s[0] in k.SEQ_FEATURES
               for s in seq)
    assert all(k.flops("gemm_tn_seq", s) <= k.SEQ_FEATURES_FLOPS for s in seq)
    # a recurrent layer's few hundred features, up to a vocabulary projection's size: a
    # product over thousands of columns and a sequence batch's thousands of rows
    assert any(m in k.SEQ_FEATURES and n >= 4096 and t * b >= 4096 for m, n, t, b in seq)
    assert all(k.flops("gemm", s) <= k.MAX_GEMM_FLOPS for s in k.grid("gemm"))
    assert len(k.grid("gemm", fine=True)) > len(k.grid("gemm"))
    for fine in (False, True):  # no shape timed twice
        assert len(set(k.grid("gemm_tn_seq", fine))) == len(k.grid("gemm_tn_seq", fine))
    with pytest.raises(ValueError, match="unknown kernel op"):
        k.grid("fft")


def test_a_gpu_times_larger_products_and_convolutions_within_its_own_bound():
    """A GPU is hundreds of times faster than the CPU the grid is sized for: its products
    and convolutions reach GPU_SCALE times further; the other ops keep their grid."""
    for op in ("gemm", "gemm_tn", "gemm_tn_seq"):
        cpu, gpu = k.grid(op), k.grid(op, device="gpu")
        if op == "gemm_tn_seq":  # the CPU's extra rows (SEQ_FEATURES) are the CPU's own
            cpu = [s for s in cpu if s[0] not in k.SEQ_FEATURES]
        if op == "gemm":  # ... and so are its products of a few rows (SMALL_ROWS)
            assert {s for s in cpu if s[0] in k.SMALL_ROWS} and not {
                s for s in gpu if s[0] in k.SMALL_ROWS}
            cpu = [s for s in cpu if s[0] not in k.SMALL_ROWS]
        assert set(cpu) <= set(gpu) and max(k.flops(op, s) for s in gpu) > max(
            k.flops(op, s) for s in cpu)
        assert all(k.flops(op, s) <= k.MAX_GEMM_FLOPS * k.GPU_SCALE for s in gpu)
    conv = k.grid("conv", device="gpu")
    assert {s[1:] for s in conv} <= {s[1:] for s in k.grid("conv")}
    assert max(s[0] * s[2] * k.conv_out(*s[3:]) ** 2 for s in conv) > k.CONV_LARGE_ELEMS
    assert max(k.flops("conv", s) for s in conv) > 10 * k.CONV_FLOPS
    for op in ("memory", "bn", "xent", "dispatch"):
        assert k.grid(op, device="gpu") == k.grid(op)


def test_kernel_options_are_a_kinds_identity_and_label():
    o = KernelOptions(parts=(KernelPart(op="gemm", shapes=((8, 8, 8),)),))
    spec = RunSpec(kind="kernel", network="kernels", framework="torch", batch_size=1, options=o)
    again = RunSpec.model_validate_json(spec.model_dump_json())
    assert again.options == o and again.config_id == spec.config_id
    assert spec.label() == "kernels torch cpu x1 (gemm)"
    with pytest.raises(ValueError):
        KernelOptions(parts=())


# ----------------------------------------------------------------------------- fits
def _samples(op: str, world: int = 1) -> list:
    return [made_up.sample(op, tuple(s), world) for s in k.grid(op)]


def test_the_convolution_fit_recovers_the_made_up_machine():
    """Rate, saturations in output pixels, output and input channels, and the memory
    passes over its traffic, forward and backward apart: at calibrated shapes and at a
    network's shapes it never saw (a 5x5 layer of 96 channels, an 11x11 first layer on
    3, a strided 1x1 projection over a 56x56 map, where the traffic is most of the time)."""
    d = fit.fit_dispatch(_samples("dispatch"), _samples("dispatch_train"))
    memory = fit.fit_memory(_samples("memory"), d)
    for op, rate in (("conv", made_up.CONV_RATE), ("conv_bwd", made_up.CONV_BWD_RATE)):
        c = fit.fit_conv(_samples(op), d, memory)
        passes = 2 if op == "conv_bwd" else 1  # the rate is per pass; time() is both
        assert c.rate * passes == pytest.approx(rate, rel=0.05)
        assert c.h == pytest.approx(made_up.H_CONV, rel=0.1)
        assert c.traffic_factor == pytest.approx(made_up.CONV_TRAFFIC, rel=0.05)
        for shape in (*k.grid(op)[:4], (16, 96, 256, 27, 5, 1), (16, 3, 96, 224, 11, 4),
                      (16, 256, 512, 56, 1, 2)):
            m, n, kk = k.conv_gemm(shape)
            assert c.time(m, n, kk, shape[4], shape[5]) == pytest.approx(
                made_up.true_s(op, shape) - made_up.CALL_S, rel=0.05)
    # a curve fitted without a memory curve has no traffic term to fit
    old = fit.fit_conv(_samples("conv"), d)
    assert old.memory is None and old.traffic_factor == 0.0


def test_a_convolutions_time_is_its_compute_plus_its_traffic_only_with_a_memory_curve():
    """The curve's time against its closed form, written out here (no residuals, no
    peak): t0 + passes x 2 m n k / (rate phi(M) phi(N) phi(C_in)) + traffic_factor x the
    memory curve's time for traffic_passes x elem x (output m n + weights k n + input
    m stride^2 k / window^2). The memory curve is a constant bandwidth, so its time is
    bytes / BW. Without a memory curve (a curve fitted before the term existed) or with
    no passes fitted, the traffic adds nothing."""
    bw, rate, t0, (hm, hn, hc) = 10e9, 1e12, 3e-6, (300.0, 40.0, 10.0)
    memory = fit.MemoryCurve(nbytes=(1e3, 1e6, 1e9), seconds=(1e3 / bw, 1e6 / bw, 1e9 / bw))
    curve = fit.ConvCurve(rate=rate, t0=t0, h=(hm, hn, hc), memory=memory,
                          traffic_factor=2.0)

    def phi(x: float, h: float) -> float:
        return x / (x + h)

    # (batch, c_in, c_out, side, window, stride): a strided 1x1 projection over a 56x56
    # map (mostly traffic), a 3x3 layer, an 11x11 first layer on 3 channels at stride 4
    for batch, c_in, c_out, side, window, stride in ((16, 256, 512, 56, 1, 2),
                                                      (8, 64, 64, 28, 3, 1),
                                                      (4, 3, 96, 224, 11, 4)):
        out_side = (side + 2 * (window // 2) - window) // stride + 1
        m, n, kk = batch * out_side**2, c_out, c_in * window**2
        assert k.conv_gemm((batch, c_in, c_out, side, window, stride)) == (m, n, kk)
        compute = t0 + 2 * m * n * kk / (rate * phi(m, hm) * phi(n, hn) * phi(c_in, hc))
        elems = m * n + kk * n + m * stride**2 * c_in  # output, weights, input
        for passes, elem in ((1.0, 4), (2.0, 4), (1.0, 2)):  # forward, backward, 16-bit
            c = curve.model_copy(update={"traffic_passes": passes, "elem_bytes": elem})
            traffic = 2.0 * passes * elem * elems / bw
            assert c.time(m, n, kk, window, stride) == pytest.approx(compute + traffic,
                                                                     rel=1e-9)
            # no memory curve, or no passes fitted: the compute alone
            for old in (c.model_copy(update={"memory": None}),
                        c.model_copy(update={"traffic_factor": 0.0})):
                assert old.time(m, n, kk, window, stride) == pytest.approx(compute, rel=1e-12)
        if stride == 2:  # the projection: its traffic is most of its time
            assert 2.0 * 4 * elems / bw > compute


def test_the_convolution_grid_reaches_large_maps():
    """Each layer of the grid at about CONV_FLOPS and a small size, and again at a
    training batch's size: the layers whose output reaches tens of MB there, a 1x1 window
    over such a map, strided too, the shapes whose traffic, not FLOPs, sets the time."""
    grid = k.grid("conv")
    large = [s for s in grid if s[0] * s[2] * k.conv_out(s[3], s[4], s[5]) ** 2
             >= k.CONV_LARGE_ELEMS / 2 and k.flops("conv", s) > 2 * k.CONV_FLOPS]
    assert any(s[4] == 1 and s[5] == 1 for s in large)
    assert any(s[4] == 1 and s[5] == 2 for s in large)
    assert all(k.flops("conv", s) <= 1.01 * k.CONV_LARGE_FLOPS for s in large)
    # a layer of many channels over a small map too, at a training batch's FLOPs: the
    # 5x5 window's at several times its CONV_FLOPS batch
    fives = sorted(s[0] for s in grid if s[4] == 5)
    assert len(fives) == 3 and fives[-1] >= 4 * fives[-2]
    assert all(k.flops("conv", s) <= 1.01 * k.CONV_LARGE_FLOPS for s in grid)
    # generic layers only: each shape is one of CONV_LAYERS at some batch and side
    layers = {(c_in, c_out, w, st) for c_in, c_out, _, w, st in k.CONV_LAYERS}
    assert {(s[1], s[2], s[4], s[5]) for s in grid} == layers


def test_dispatch_and_allreduce_fits_recover_the_made_up_machine():
    d = fit.fit_dispatch(_samples("dispatch"), _samples("dispatch_train"))
    assert d.op_s == pytest.approx(made_up.OP_S, rel=1e-6)
    assert d.call_s == pytest.approx(made_up.CALL_S, rel=1e-6)
    assert d.step_op_s == pytest.approx(made_up.TRAIN_OP_S, rel=1e-6)
    assert d.step_call_s == pytest.approx(made_up.TRAIN_CALL_S, rel=1e-6)
    plain = fit.fit_dispatch(_samples("dispatch"))  # calibrated before the trained chain
    assert (plain.step_op_s, plain.step_call_s) == (plain.op_s, plain.call_s)
    ab = fit.fit_allreduce(_samples("allreduce", 2) + _samples("allreduce", 4))
    for world in (2, 4):
        alpha, beta = made_up.alpha_beta(world)
        assert ab[world].alpha_s == pytest.approx(alpha, rel=1e-3)
        assert ab[world].beta_bytes_per_s == pytest.approx(beta, rel=1e-3)


def test_gemm_curve_predicts_shapes_it_was_not_fitted_on():
    d = fit.fit_dispatch(_samples("dispatch"))
    g = fit.fit_gemm(_samples("gemm"), d)
    for shape in ((128, 256, 64), (2048, 1024, 512), (100, 3000, 40), (4096, 64, 2048)):
        assert shape not in k.grid("gemm")
        assert g.time(*shape) == pytest.approx(made_up.gemm_s(*shape), rel=0.05), shape


def test_shapes_timed_beside_the_whole_grid_correct_near_themselves_and_move_no_curve():
    """A scoped run beside the whole grid (a pipeline's micro-batch, 5 times slower than
    the made-up machine's curve there): the curve's form stays the grid's, and the
    added shapes correct it near themselves only, as residuals."""
    d = fit.fit_dispatch(_samples("dispatch"))
    grid = _samples("gemm")
    extra = [made_up.sample("gemm", shape) for shape in ((2, 26752, 2048), (2, 2048, 26752))]
    extra = [x.model_copy(update={"median_s": 5 * x.median_s}) for x in extra]
    alone = fit.fit_gemm(grid, d)
    both = grid + extra
    anchored = fit.fit_gemm(both, d, fit.grid_anchor("gemm", [x.shape for x in both]))
    free = fit.fit_gemm(both, d)  # every sample in the form, as before
    assert (anchored.rate, anchored.h, anchored.t0) == (alone.rate, alone.h, alone.t0)
    assert (free.rate, free.h) != (alone.rate, alone.h)
    far = (2048, 1024, 512)
    assert anchored.time(*far) == pytest.approx(alone.time(*far), rel=1e-6)
    # a shape timed is read as timed (the x5 whole), whatever the curve gives there
    assert anchored.time(*extra[0].shape) == pytest.approx(fit.net_time(extra[0], d), rel=1e-9)
    near = (3, 26752, 2048)  # half an octave off: most of the x5, not all (the prior)
    assert 2 * alone.time(*near) < anchored.time(*near) < 5 * alone.time(*near)
    # a grid not timed whole (a scoped calibration): every sample is the form's
    assert fit.grid_anchor("gemm", [x.shape for x in grid[:-1] + extra]) is None
    assert fit.grid_anchor("gemm", [x.shape for x in grid]) == [True] * len(grid)


def test_first_layers_are_timed_on_both_sides_of_xlas_32_output_cliff():
    """The image-reading first layers' large windows (7x7/2, 11x11/4 over 3 channels) are
    timed at 32 and at 64 outputs (XLA:CPU runs the first 6 times slower than the second);
    a whole-grid calibration of revision 15, without the 64-output ones, still anchors its
    curve on its grid until it is calibrated again."""
    grid = k.grid("conv")
    for window, stride in ((7, 2), (11, 4)):
        outs = {s[2] for s in grid if (s[1], s[4], s[5]) == (3, window, stride)}
        assert outs == {32, 64}, (window, outs)
    older = [s for s in grid if (s[1], s[2]) != (3, 64)]
    extra = (16, 3, 96, 224, 11, 4)  # a network's own first layer, timed beside
    for op in ("conv", "conv_bwd"):
        assert fit.grid_anchor(op, [*older, extra]) == [True] * len(older) + [False]
        assert fit.grid_anchor(op, [*grid, extra]) == [True] * len(grid) + [False]
        assert fit.grid_anchor(op, [*older[1:], extra]) is None  # not whole: a scoped run


def test_pointwise_convolutions_are_timed_over_a_large_map_too():
    """1x1 windows over a 48-pixel map, widening and narrowing, beside the 32- and
    8-pixel ones; a whole grid of revision 16 (without them) or 15 (without the 64-output
    first layers too) still anchors its curves until calibrated again."""
    grid = k.grid("conv")
    pointwise = {(s[1], s[2], s[3]) for s in grid if s[4] == 1 and s[5] == 1}
    assert {(96, 384, 48), (384, 96, 48)} <= pointwise
    assert {32, 48} <= {side for _, _, side in pointwise}
    layers_16 = [x for x in k.CONV_LAYERS if x not in k.POINTWISE_LARGE_MAPS]
    layers_15 = [x for x in layers_16 if x not in k.FIRST_LAYERS_AT_64]
    at_16, at_15 = (k.conv_grid(layers=layers) for layers in (layers_16, layers_15))
    assert len(at_15) < len(at_16) < len(grid)
    extra = (16, 64, 256, 56, 1, 1)  # a network's own layer, timed beside
    for op in ("conv", "conv_bwd"):
        for older in (at_16, at_15):
            assert fit.grid_anchor(op, [*older, extra]) == [True] * len(older) + [False]
    assert k.changes_since(16)[0] == k.REVISION_CHANGES[17]


def test_the_weight_gradient_is_timed_by_the_transposed_products_curve(db):
    """fcn5's weight gradients (X^T @ dY) from the transposed curve, the rest from the plain
    one: the made-up machine's transposed form is 1.5 times as slow."""
    from dlperf.perfmodel.local import product_times

    with Store(db) as store:
        made_up.calibrated(store)
        f = calibration.local_calibration(store).find("torch", 1)
    assert f.gemm_tn is not None
    for shape in ((2048, 4096, 64), (26752, 2048, 64)):
        assert f.gemm_tn.time(*shape) == pytest.approx(
            made_up.TN_SLOWER * made_up.gemm_s(*shape), rel=0.05)
    _, _, cfg = workloads.resolve("fcn5", None)
    fc2 = next(layer for layer in cfg.layers() if layer.name == "fc2")  # 2048 -> 2048
    fwd, bwd = product_times(fc2, 64, f)
    # PyTorch's forward reads its (out, in) weights transposed (``gemm_nt``)
    assert fwd == pytest.approx(f.gemm_nt.time(64, 2048, 2048), rel=1e-12)
    assert bwd == pytest.approx(f.gemm.time(64, 2048, 2048) + f.gemm_tn.time(2048, 2048, 64),
                                rel=1e-12)
    without = f.model_copy(update={"gemm_tn": None})  # a calibration made before it
    assert product_times(fc2, 64, without)[1] < bwd
    # a layer on every step of a sequence: its weight gradient contracts time x batch
    assert f.gemm_tn_seq is not None
    assert f.gemm_tn_seq.time(256, 10000, 4096) == pytest.approx(
        made_up.SEQ_SLOWER * made_up.gemm_s(256, 10000, 4096), rel=0.05)
    _, _, lstm = workloads.resolve("lstm32", None)
    proj = next(layer for layer in lstm.layers() if layer.name == "softmax_proj")
    (g,) = proj.gemms
    fwd, bwd = product_times(proj, 128, f)
    rows = g.m * 128
    assert bwd == pytest.approx(f.gemm.time(rows, g.k, g.n)
                                + f.gemm_tn_seq.time(g.k, g.n, rows), rel=1e-12)
    older = f.model_copy(update={"gemm_tn_seq": None})  # calibrated before revision 6
    assert product_times(proj, 128, older)[1] < bwd


def test_a_product_takes_at_least_the_memory_pass_of_its_fresh_result(db):
    """A wide weight gradient at a tiny batch: its 26752 x 2048 result's memory pass, not
    its FLOPs, sets its time; a compute-bound product keeps its curve's time; a 1x1
    convolution over a large map is bound by its output, and its gradients by theirs."""
    from dlperf.perfmodel.local import new_pages_s, one_product, product_times

    with Store(db) as store:
        made_up.calibrated(store)
        f = calibration.local_calibration(store).find("torch", 1)
    # fresh pages at 1 GB/s, as a machine whose allocator returns large blocks to the OS
    f = f.model_copy(update={"memory": fit.MemoryCurve(nbytes=(1e3, 1e9), seconds=(1e-6, 1.0))})
    wide = f.memory.time(2 * 4 * 26752 * 2048)
    assert f.gemm_tn.time(26752, 2048, 1) < wide
    # its result (219 MB, beyond glibc's 32 MiB mmap threshold) is new pages at every
    # step: they come on top of its arithmetic, and never below the fresh memory pass
    pages = new_pages_s(f, 26752 * 2048)
    assert pages > 0
    assert one_product(f, f.gemm_tn, 26752, 2048, 1) == max(
        f.gemm_tn.time(26752, 2048, 1) + pages, wide)
    assert one_product(f, f.gemm, 2048, 2048, 2048) == f.gemm.time(2048, 2048, 2048)
    # explain gives a profiled product the same time as the step model
    from dlperf.kinds.explain.options import ProfiledOp
    from dlperf.perfmodel import ops

    mm = ops.op_time(ProfiledOp(name="aten::mm", shapes=((26752, 1), (1, 2048)), calls=1,
                                time_s=1.0), f)
    assert f.gemm.time(26752, 2048, 1) < wide and mm.model_s == pytest.approx(
        one_product(f, f.gemm, 26752, 2048, 1))
    # a convolution the same way: a 1x1 layer's large output, and its input's gradient
    from dlperf.workloads.base import conv

    layer = conv("c", 64, 256, 1, 56)
    (g,) = layer.gemms
    fwd, bwd = product_times(layer, 16, f)
    out, d_input = 16 * 56 * 56 * 256, 16 * 56 * 56 * 64  # 51 and 13 MB: only the output's
    assert new_pages_s(f, out) > 0 and new_pages_s(f, d_input) == 0  # pages are new each call
    fresh = f.memory.time(2 * 4 * out)
    assert fresh > f.conv.time(16 * 56 * 56, 256, 64, 1)
    assert fwd == max(f.conv.time(16 * 56 * 56, 256, 64, 1) + new_pages_s(f, out), fresh)
    grads = f.memory.time(2 * 4 * (d_input + 64 * 256))
    assert bwd == max(f.conv_bwd.time(16 * 56 * 56, 256, 64, 1), grads)
    slow = f.model_copy(update={"memory": fit.MemoryCurve(nbytes=(1e3, 1e9),
                                                          seconds=(1e-5, 10.0))})
    assert product_times(layer, 16, slow)[1] == slow.memory.time(2 * 4 * (16 * 56 * 56 * 64
                                                                           + 64 * 256))


def test_a_new_pages_price_is_not_set_by_one_size_timed_in_a_slow_spell():
    """The price of a new page: the fresh pass less the in-place one, the median over the
    sizes whose result is mapped afresh (32 MiB and more); one of them four times slower
    (the host's first touches in a slow moment) leaves it as the others give it. With
    no size that large, the largest both passes timed sets it."""
    mib, price, in_place = 2**20, 0.6e-9, 1 / 40e9  # s a byte of result; s a byte moved
    results = [4 * mib * 2**i for i in range(7)]  # 4 .. 256 MiB
    moved = tuple(2.0 * r for r in results)

    def fresh(r: float, slow: float = 1.0) -> float:
        return 2 * r * in_place + (r * price * slow if r >= fit.MMAP_THRESHOLD_MAX else 0.0)

    update = fit.MemoryCurve(nbytes=moved, seconds=tuple(2 * r * in_place for r in results))
    steady = fit.MemoryCurve(nbytes=moved, seconds=tuple(fresh(r) for r in results))
    spell = fit.MemoryCurve(nbytes=moved, seconds=tuple(
        fresh(r, 4.6 if r == results[-1] else 1.0) for r in results))
    assert fit.new_page_byte_s(steady, update) == pytest.approx(price)
    assert fit.new_page_byte_s(spell, update) == pytest.approx(price)
    small = [r for r in results if r < fit.MMAP_THRESHOLD_MAX]
    below = fit.MemoryCurve(nbytes=tuple(2.0 * r for r in small), seconds=tuple(
        2 * r * in_place + r * price for r in small))
    assert fit.new_page_byte_s(below, update) == pytest.approx(price)
    assert fit.new_page_byte_s(steady, None) == 0.0


def test_a_memory_pass_timed_in_a_slow_spell_is_left_out_of_its_curve():
    """A memory pass's sample still unsteady when fitted (its threads busy, its two calls
    far apart) is left out of the curve where two steady sizes remain, which then reads
    between them; the op's unsteadiness is still counted from every sample."""
    from dlperf.perfmodel import steadiness

    shapes = [(n,) for n in (2**22, 2**23, 2**24, 2**25)]

    def pass_of(shape, calls, busy=1.0):
        med = sorted(calls)[len(calls) // 2] if len(calls) % 2 else sum(calls) / 2
        return made_up.sample("memory", shape).model_copy(update={
            "median_s": med, "times_s": calls, "cpu_util": busy})

    steady = [pass_of(s, (made_up.true_s("memory", s),) * 2) for s in shapes]
    # 2.5 times the others at the median: unsteady, not far from them (far_from_fresh_sizes)
    slow = pass_of(shapes[-1], (4 * made_up.true_s("memory", shapes[-1]),
                                made_up.true_s("memory", shapes[-1])))
    assert steadiness.unsteady(slow, threads=1)
    d = fit.fit_dispatch(*([made_up.sample(op, s) for s in k.grid(op)]
                           for op in ("dispatch", "dispatch_train")))
    whole = fit.fit_memory(steady, d)
    with_spell = [*steady[:-1], slow]
    assert fit.fit_memory(fit.steady(with_spell, 1), d) == fit.fit_memory(steady[:-1], d)
    big = slow.bytes
    assert fit.fit_memory(fit.steady(with_spell, 1), d).time(big) == pytest.approx(
        whole.time(big), rel=0.05)
    assert fit.fit_memory(with_spell, d).time(big) > 2 * whole.time(big)  # kept, it slows all
    # a sample that idles its threads spreads of its own accord: kept
    idle = slow.model_copy(update={"cpu_util": 0.3})
    assert fit.steady([*steady[:-1], idle], 1)[-1] == idle
    # with fewer than two steady sizes, every sample stays
    assert fit.steady([steady[0], slow], 1) == [steady[0], slow]
    assert steadiness.unsteady_share(with_spell, 1) == {"memory": 0.25}


def test_a_memory_pass_far_from_the_other_large_sizes_is_left_out_and_said():
    """A memory pass past 32 MiB that took many times longer per byte than the other
    sizes that large (two calls agreeing: steady by its own spread) is left out of its
    curve, which then reads as the other sizes give it, and the calibration's quality
    line names it; one merely twice as slow, or with too few sizes that large, stays."""
    from dlperf.cli.calibrate import quality_line

    shapes = {op: [tuple(s) for s in k.grid(op)] for op in calibration.LOCAL_OPS
              if op not in ("bn", "pool", "lstm")}
    clean = fit.Samples.of([made_up.sample(op, s) for op, ss in shapes.items() for s in ss])
    big = max(shapes["memory"], key=lambda s: s[0])
    assert 4 * big[0] >= fit.MMAP_THRESHOLD_MAX  # the grid has sizes past it

    def slowed(by: float) -> fit.Samples:
        return fit.Samples.of([x.model_copy(update={
            "median_s": x.median_s * by, "times_s": (x.median_s * by,) * 2})
            if x.op == "memory" and x.shape == big else x for x in clean.items])

    plain = fit.fit_local(clean, "tensorflow", 1)
    assert plain.far_passes == {} and fit.far_from_fresh_sizes(clean.of_op("memory")) == []
    far = fit.fit_local(slowed(40.0), "tensorflow", 1)
    label = f"memory {4 * big[0] / 2**20:.0f} MiB"
    assert list(far.far_passes) == [label] and far.far_passes[label] > fit.FAR_FROM_FRESH
    nbytes = 8.0 * big[0]
    assert far.memory.time(nbytes) == pytest.approx(plain.memory.time(nbytes), rel=0.05)
    kept = fit.fit_memory(slowed(40.0).of_op("memory"), far.dispatch)  # every sample
    assert kept.time(nbytes) > 10 * plain.memory.time(nbytes)
    line = quality_line([far.model_copy(update={"other_cpu_share": {"memory": 0.01}})])
    assert "undisturbed" in line and f"tensorflow x1 {label}" in line and "left out" in line
    # beside a disturbed calibration, still named
    disturbed = plain.model_copy(update={"framework": "torch", "other_cpu_share": {"gemm": 0.4}})
    line = quality_line([disturbed, far.model_copy(update={"other_cpu_share": {"gemm": 0.01}})])
    assert "DISTURBED" in line and f"tensorflow x1 {label}" in line
    # twice as slow: within what the machine does; kept, and nothing said
    assert fit.fit_local(slowed(2.0), "tensorflow", 1).far_passes == {}
    # fewer than FAR_FRESH_SIZES sizes past 32 MiB: no median to set it against
    few = [x for x in slowed(40.0).of_op("memory")
           if x.bytes / 2 < fit.MMAP_THRESHOLD_MAX or x.shape[0] >= big[0] // 2]
    assert fit.far_from_fresh_sizes(few) == []


def test_a_products_new_pages_are_counted_once_even_at_a_timed_shape():
    """PyTorch's calibration product makes a fresh result per call, so a sample whose
    result is beyond glibc's mmap threshold carries its new pages; the fit takes them out
    (``fit.without_new_pages``) and the step model adds them once (``new_pages_s``): at
    the very shape timed, the prediction is the sample, not the sample and its pages."""
    from dlperf.perfmodel.fit import MMAP_THRESHOLD_MAX
    from dlperf.perfmodel.local import new_pages_s, one_product

    shapes = {op: [tuple(s) for s in k.grid(op)] for op in calibration.LOCAL_OPS
              if op not in ("bn", "pool", "lstm")}
    wide = (26752, 2048, 8)  # a weight gradient's 219 MB result at a small batch
    shapes["gemm_tn"].append(wide)
    clean = fit.Samples.of([made_up.sample(op, s) for op, ss in shapes.items() for s in ss])
    plain = fit.fit_local(clean, "torch", 1)
    byte_s = fit.new_page_byte_s(plain.memory, plain.update)
    assert byte_s > 0

    def faulted(s):  # what the worker measures: the arithmetic and the result's pages
        if not s.op.startswith("gemm") or 4 * s.shape[0] * s.shape[1] < MMAP_THRESHOLD_MAX:
            return s
        return s.model_copy(update={"median_s": s.median_s + 4 * s.shape[0] * s.shape[1]
                                    * byte_s})

    measured = fit.Samples.of([faulted(s) for s in clean.items])
    f = fit.fit_local(measured, "torch", 1)
    (sample,) = [s for s in measured.of_op("gemm_tn") if s.shape == wide]
    assert new_pages_s(f, 26752 * 2048) > 0.1 * sample.median_s  # pages that matter
    got = one_product(f, f.gemm_tn, *wide)
    assert got == pytest.approx(sample.median_s - made_up.CALL_S, rel=0.03)
    # a framework that pools its memory keeps its samples as measured
    tf = fit.fit_local(measured, "tensorflow", 1)
    assert tf.gemm_tn.time(*wide) == pytest.approx(sample.median_s - made_up.CALL_S, rel=0.03)


def test_a_jax_products_result_pages_are_its_steps_block_and_its_convolutions_keep_theirs():
    """XLA's jitted product, a calibration kernel alone, returns a result beyond glibc's
    mmap threshold in new pages at every call; in a step the result lies in the step's
    temporaries block, whose pages the step pays once (``local.fresh_block_s``). So the
    fit takes a JAX product's pages off its sample and the step model adds none to the
    product: at the very shape timed, a product is its sample without its pages, never
    less than writing its result into kept pages. XLA's convolutions map scratch of their
    own in a step as alone: their samples stay as measured."""
    from dlperf.perfmodel.fit import MMAP_THRESHOLD_MAX
    from dlperf.perfmodel.local import new_pages_s, one_product

    shapes = {op: [tuple(s) for s in k.grid(op)] for op in calibration.LOCAL_OPS
              if op not in ("bn", "pool", "lstm")}
    wide = (26752, 2048, 8)  # FCN-5's weight gradient, 219 MB, at a small batch
    shapes["gemm_tn"].append(wide)
    clean = fit.Samples.of([made_up.sample(op, s) for op, ss in shapes.items() for s in ss])
    plain = fit.fit_local(clean, "jax", 1)
    byte_s = fit.new_page_byte_s(plain.memory, plain.update)
    assert byte_s > 0

    def faulted(s):  # what the worker measures: the kernel and its results' pages
        made = fit.results(s) if s.op.startswith(("gemm", "conv")) else ()
        big = [4 * e for e in made if 4 * e >= MMAP_THRESHOLD_MAX]
        return s.model_copy(update={"median_s": s.median_s + sum(big) * byte_s})

    measured = fit.Samples.of([faulted(s) for s in clean.items])
    f = fit.fit_local(measured, "jax", 1)
    (sample,) = [s for s in measured.of_op("gemm_tn") if s.shape == wide]
    (before,) = [s for s in clean.of_op("gemm_tn") if s.shape == wide]
    pages = 4 * wide[0] * wide[1] * byte_s
    assert pages > 0.1 * sample.median_s  # pages that matter
    assert new_pages_s(f, wide[0] * wide[1]) == 0  # the step adds none per product
    got = one_product(f, f.gemm_tn, *wide)
    assert got == pytest.approx(max(before.median_s - made_up.CALL_S,
                                    f.in_place.time(2 * 4 * wide[0] * wide[1])), rel=0.03)
    assert got < sample.median_s - 0.5 * pages
    # the same samples read as PyTorch's: the pages come back per result
    torch = fit.fit_local(measured, "torch", 1)
    assert one_product(torch, torch.gemm_tn, *wide) == pytest.approx(
        sample.median_s - made_up.CALL_S, rel=0.03)
    # a convolution whose input's gradient (134 MB) is beyond the threshold keeps its pages
    conv = (256, 128, 32, 32, 1, 1)
    (timed,) = [s for s in measured.of_op("conv_bwd") if s.shape == conv]
    (kept,) = fit.without_new_pages([timed], "jax", "cpu", byte_s, 4, f.in_place)
    assert kept.median_s == timed.median_s
    (taken,) = fit.without_new_pages([timed], "torch", "cpu", byte_s, 4, f.in_place)
    assert taken.median_s < timed.median_s


def test_an_outer_products_sample_keeps_its_arithmetic_beside_its_pages():
    """A weight gradient at a micro-batch of one sample is an outer product: its result's
    new pages are most of its sample (PyTorch: 4096 x 9216 from one row, 59 ms into fresh
    pages, 5 ms into kept ones). The fit keeps the sample less its pages, not half the
    sample, and never less than writing the result into kept pages, a copy's traffic at
    the in-place curve (noise in the pages' price must not make a product free)."""
    from dlperf.perfmodel.kernels import KernelSample

    kept = fit.MemoryCurve(nbytes=(1e3, 1e9), seconds=(1e-7, 0.02))  # 50 GB/s
    byte_s = 0.4e-9  # new pages at 2.5 GB/s
    m, n = 12544, 4096
    result = 4 * m * n
    pages = result * byte_s  # 82 ms
    floor = kept.time(2 * result)  # 8.2 ms
    outer = KernelSample(op="gemm_tn", shape=(m, n, 1), median_s=pages + 0.012)
    (got,) = fit.without_new_pages([outer], "torch", "cpu", byte_s, 4, kept)
    assert got.median_s == pytest.approx(0.012)  # the arithmetic, not half of 94 ms
    noisy = outer.model_copy(update={"median_s": 0.9 * pages})  # pages priced too high
    (got,) = fit.without_new_pages([noisy], "torch", "cpu", byte_s, 4, kept)
    assert got.median_s == pytest.approx(floor)
    tiny = outer.model_copy(update={"median_s": 0.5 * floor})  # faster than the floor
    (got,) = fit.without_new_pages([tiny], "torch", "cpu", byte_s, 4, kept)
    assert got.median_s == tiny.median_s  # never raised above the sample
    # a framework that pools its memory keeps the sample as measured
    (got,) = fit.without_new_pages([outer], "tensorflow", "cpu", byte_s, 4, kept)
    assert got.median_s == outer.median_s


def test_a_dense_layers_weight_gradient_has_the_sides_its_framework_stores():
    """PyTorch keeps a dense layer's weights as outputs x inputs (``nn.Linear.weight``),
    so its weight gradient is dY^T @ X, outputs rows; Keras and flax keep inputs x outputs,
    X^T @ dY. The transposed product's curve is not symmetric in its sides, so the step
    model reads it in the framework's order."""
    from dlperf.perfmodel.local import one_product, product_times
    from dlperf.workloads.base import dense

    fitted = made_up_fit()
    lopsided = fitted.gemm_tn.model_copy(update={"h": (512.0, 16.0, fitted.gemm_tn.h[2]),
                                                 "points": (), "residuals": ()})
    torch_fit = fitted.model_copy(update={"gemm_tn": lopsided})
    tf_fit = torch_fit.model_copy(update={"framework": "tensorflow"})
    layer = dense("fc", 3000, 64)  # 3000 inputs, 64 outputs
    out_in = one_product(torch_fit, torch_fit.gemm_tn, 64, 3000, 8)
    in_out = one_product(torch_fit, torch_fit.gemm_tn, 3000, 64, 8)
    assert abs(out_in / in_out - 1) > 0.01  # the order shows
    # the input gradient reads the weights as stored (PyTorch's dY W) or transposed
    # (Keras' dY W^T, at the curve of ``gemm_nt``)
    d_input = one_product(torch_fit, torch_fit.gemm, 8, 3000, 64)
    d_input_nt = one_product(tf_fit, tf_fit.gemm_nt, 8, 3000, 64)
    assert d_input_nt > d_input  # the made-up machine's transposed read is slower
    assert product_times(layer, 8, torch_fit)[1] == pytest.approx(d_input + out_in)
    assert product_times(layer, 8, tf_fit)[1] == pytest.approx(d_input_nt + in_out)


def test_a_convolutions_new_pages_are_counted_once_at_a_timed_shape():
    """As the products': PyTorch's calibration convolution makes fresh results per call,
    so a backward sample whose input gradient is beyond glibc's mmap threshold carries its
    new pages; the fit takes them out (``fit.without_new_pages``) and the step adds
    them per result: at the very shape timed, the prediction is the sample. Its traffic
    is priced without new pages (the in-place update's curve), a pooling framework's by
    the memory pass as timed (``fit.traffic_curve``)."""
    from dlperf.perfmodel.fit import MMAP_THRESHOLD_MAX
    from dlperf.perfmodel.local import new_pages_s

    shapes = {op: [tuple(s) for s in k.grid(op)] for op in calibration.LOCAL_OPS
              if op not in ("bn", "pool", "lstm")}

    def mapped(s):  # a machine whose fresh results beyond the threshold fault at 1 GB/s
        if s.op != "memory" or 4 * s.shape[0] < MMAP_THRESHOLD_MAX:
            return s
        return s.model_copy(update={"median_s": s.median_s + 4 * s.shape[0] / 1e9})

    clean = fit.Samples.of([mapped(made_up.sample(op, s)) for op, ss in shapes.items()
                            for s in ss])
    plain = fit.fit_local(clean, "torch", 1)
    byte_s = fit.new_page_byte_s(plain.memory, plain.update)

    def faulted(s):  # what the worker measures: the convolution and its results' pages
        if not s.op.startswith("conv"):
            return s
        big = [4 * e for e in fit.conv_results(s.op, s.shape) if 4 * e >= MMAP_THRESHOLD_MAX]
        return s.model_copy(update={"median_s": s.median_s + sum(big) * byte_s})

    measured = fit.Samples.of([faulted(s) for s in clean.items])
    f = fit.fit_local(measured, "torch", 1)
    wide = (256, 128, 32, 32, 1, 1)  # a 1x1 backward: its input's gradient is 134 MB
    (sample,) = [s for s in measured.of_op("conv_bwd") if s.shape == wide]
    d_input, d_weights = fit.conv_results("conv_bwd", wide)
    pages = new_pages_s(f, d_input) + new_pages_s(f, d_weights)
    assert new_pages_s(f, d_weights) == 0 and pages > 0.3 * sample.median_s
    m, n, kk = k.conv_gemm(wide)
    (before,) = [s for s in clean.of_op("conv_bwd") if s.shape == wide]
    # the pages taken off, the curve gives the sample without them, and the step adds them
    assert f.conv_bwd.time(m, n, kk, 1, 1) == pytest.approx(before.median_s - made_up.CALL_S,
                                                            rel=0.03)
    assert f.conv_bwd.time(m, n, kk, 1, 1) + pages == pytest.approx(
        sample.median_s - made_up.CALL_S, rel=0.03)
    assert f.conv_bwd.memory == f.update  # the traffic's curve: no new pages in it
    tf = fit.fit_local(measured, "tensorflow", 1)
    assert tf.conv_bwd.memory == tf.memory
    # TensorFlow's samples kept as measured: its curve carries most of the sample's pages
    assert tf.conv_bwd.time(m, n, kk, 1, 1) > before.median_s + 0.5 * pages


def _layer_and_cost(network: str, name: str, batch: int):
    """The layer ``name`` of ``network`` and its cost at ``batch`` (fp32), with the layers."""
    from dlperf.perfmodel.costs import layer_costs

    _, _, cfg = workloads.resolve(network, None)
    layers = cfg.layers()
    costs = layer_costs(layers, cfg.input_shape(), batch, 4)
    (layer, cost), = [(x, c) for x, c in zip(layers, costs, strict=True) if x.name == name]
    return layer, cost, layers


def test_workers_sharing_the_cores_slow_every_part_of_a_layer_once(db):
    """With 4 workers on 2 cores each layer's timing is twice its time alone, every term
    of it: also the new pages of AlexNet's fc1 weight gradient (151 MB at batch 1, beyond
    glibc's mmap threshold), which were once slowed twice (x4), and predicted a 4-stage
    pipeline of AlexNet 52% too slow."""
    from dlperf.perfmodel.local import fitted_timing, new_pages_s

    with Store(db) as store:
        made_up.calibrated(store)
        alone = calibration.local_calibration(store).find("torch", 1)
    # fresh pages at 1 GB/s, as a machine whose allocator returns large blocks to the OS
    alone = alone.model_copy(update={
        "memory": fit.MemoryCurve(nbytes=(1e3, 1e9), seconds=(1e-6, 1.0))})
    shared = alone.model_copy(update={"slowdown": 2.0})
    layer, cost, _ = _layer_and_cost("alexnet", "fc1", 1)
    assert new_pages_s(alone, layer.params) > 0.01  # the pages are part of its time
    a, b = fitted_timing(layer, cost, 1, alone), fitted_timing(layer, cost, 1, shared)
    for part in ("compute_s", "memory_s", "update_s", "overhead_s", "forward_s"):
        assert getattr(b, part) == pytest.approx(2 * getattr(a, part)), part


def test_the_softmax_loss_and_batch_norm_are_timed_by_their_own_curves(db):
    """The loss layer takes the cross-entropy kernel's time for its logits (the made-up
    machine's loss runs at a seventh of its memory bandwidth), a batch normalisation the
    bn kernel's for its bytes; a calibration made before revision 7 (8) has no such
    curve and the memory pass stands in."""
    from dlperf.perfmodel.local import fitted_timing

    with Store(db) as store:
        made_up.calibrated(store)
        f = calibration.local_calibration(store).find("torch", 1)
    assert f.xent is not None
    loss, cost, _ = _layer_and_cost("lstm32", "softmax_xent", 128)
    assert loss.op == "loss"
    logits = 128 * 32 * 10000
    got = fitted_timing(loss, cost, 128, f).memory_s
    assert got == pytest.approx(2 * 4 * logits / made_up.XENT_BPS, rel=0.05)
    older = fitted_timing(loss, cost, 128, f.model_copy(update={"xent": None})).memory_s
    assert older == pytest.approx(f.memory.time(cost.fwd_bytes) + f.memory.time(cost.bwd_bytes))
    assert older < got / 2
    # batch normalisation the same way, by its own curve (before revision 8: memory)
    assert f.bn is not None
    norm, cost, _ = _layer_and_cost("resnet50", "stem_bn", 8)
    nbytes = cost.fwd_bytes + cost.bwd_bytes
    assert fitted_timing(norm, cost, 8, f).memory_s == pytest.approx(nbytes / made_up.BN_BPS,
                                                                    rel=0.05)
    older = fitted_timing(norm, cost, 8, f.model_copy(update={"bn": None})).memory_s
    assert older == pytest.approx(f.memory.time(cost.fwd_bytes) + f.memory.time(cost.bwd_bytes))


def test_a_max_pool_is_timed_by_the_pool_kernels_curve(db):
    """A max pool and its gradient take the pool kernel's time for the layer's bytes (the
    made-up machine's runs at a fifteenth of its memory bandwidth); a calibration made
    before revision 13 has no such curve and the memory pass stands in."""
    from dlperf.perfmodel.local import fitted_timing

    with Store(db) as store:
        made_up.calibrated(store)
        f = calibration.local_calibration(store).find("torch", 1)
    assert f.pool is not None
    pool, cost, layers = _layer_and_cost("alexnet", "pool1", 16)
    (relu,) = [x for x in layers if x.name == "relu1"]  # the pool's input
    inp, out = 16 * relu.out_elems, 16 * pool.out_elems
    nbytes = cost.fwd_bytes + cost.bwd_bytes
    assert nbytes == k.pool_bytes(inp, out)  # the kernel's rule is the layer's
    got = fitted_timing(pool, cost, 16, f).memory_s
    assert got == pytest.approx(nbytes / made_up.POOL_BPS, rel=0.05)
    older = fitted_timing(pool, cost, 16, f.model_copy(update={"pool": None})).memory_s
    assert older == pytest.approx(f.memory.time(cost.fwd_bytes) + f.memory.time(cost.bwd_bytes))
    assert older < got / 2


def test_an_lstm_layer_is_timed_whole_by_the_lstm_kernels_curve_at_its_hidden_size(db):
    """An LSTM layer takes the LSTM kernel's time (the library's own layer timed whole)
    at its shape: at a calibrated shape, that sample's time (the made-up machine runs the
    layer at a third of its products' rate, whatever its width); between two hidden
    sizes, the FLOP rate the two widths ran at for its batch and steps, so the same time
    to within the calls' fixed cost (read at the layer's bytes instead, each width's curve
    stands for another batch: the grid's 128 and 512 units gave half of it); a
    calibration made before revision 14 has none and the layer's products stand in."""
    from dlperf.perfmodel.local import fitted_timing

    with Store(db) as store:
        made_up.calibrated(store)
        f = calibration.local_calibration(store).find("torch", 1)
    assert sorted(f.lstm) == list(k.LSTM_HIDDEN)
    layer, cost, _ = _layer_and_cost("lstm32", "lstm2", 128)
    shape = (128, 32, 256, 256)  # lstm32's second layer at batch 128
    assert cost.fwd_bytes + cost.bwd_bytes == k.nbytes("lstm", shape)  # the kernel's rule
    own = f.model_copy(update={"lstm": fit.fit_by_side(
        [made_up.sample("lstm", shape), made_up.sample("lstm", (16, 32, 256, 256))],
        f.dispatch, axis=3)})
    t = fitted_timing(layer, cost, 128, own)
    assert t.compute_s == pytest.approx(k.flops("lstm", shape) / made_up.LSTM_RATE
                                        + made_up.CALL_S, rel=1e-3)
    assert t.forward_s == pytest.approx(t.compute_s * layer.fwd_flops / layer.train_flops())
    between = fitted_timing(layer, cost, 128, f).compute_s  # hidden 128 and 512 around it
    assert between == pytest.approx(t.compute_s, rel=0.02)
    older = fitted_timing(layer, cost, 128, f.model_copy(update={"lstm": {}})).compute_s
    assert older < 0.7 * t.compute_s  # its products, at the GEMM curves' rates


def test_a_bias_is_a_pass_over_the_output_each_way_and_only_where_there_is_one(db):
    """A dense or convolution layer with a bias adds it over its output (read and written
    once) and sums the output's gradient into it (read once), at the in-place pass's
    bandwidth; a convolution without one (ResNet's, before its batch norm) and an LSTM
    (its bias inside the cell) pay nothing for it."""
    from dlperf.perfmodel.local import bias_elems, fitted_timing, product_times

    with Store(db) as store:
        made_up.calibrated(store)
        f = calibration.local_calibration(store).find("torch", 1)
    proj, cost, _ = _layer_and_cost("lstm32", "softmax_proj", 128)
    assert bias_elems(proj) == 10000
    out = 4 * 128 * proj.out_elems
    t = fitted_timing(proj, cost, 128, f)
    assert t.memory_s == pytest.approx(f.in_place.time(2 * out) + f.in_place.time(out + 4e4))
    fwd, _ = product_times(proj, 128, f)  # the add is forward, the sum backward
    assert t.forward_s == pytest.approx((fwd + f.in_place.time(2 * out)) * f.slowdown)
    conv, cost, _ = _layer_and_cost("alexnet", "conv1", 16)
    assert bias_elems(conv) == 96 and fitted_timing(conv, cost, 16, f).memory_s > 0
    for net, name in (("resnet50", "s1b1_c1"), ("lstm32", "lstm1")):
        layer, cost, _ = _layer_and_cost(net, name, 16)
        assert fitted_timing(layer, cost, 16, f).memory_s == 0.0, name


def test_batch_norm_is_timed_by_the_curves_of_the_channel_counts_around_it(db):
    """Few channels over many elements run slower (fewer reductions to spread): each
    calibrated channel count has its curve, a layer between two is interpolated in log
    time and log channels, one outside takes the nearest; without them the pooled curve."""
    from dlperf.perfmodel.kernels import KernelSample, nbytes

    with Store(db) as store:
        made_up.calibrated(store)
        f = calibration.local_calibration(store).find("torch", 1)
    d = f.dispatch
    rate = {16: 1e11, 256: 1.6e12}  # bytes/s by channel count

    def bn(batch: int, c: int, side: int) -> KernelSample:
        shape = (batch, c, side)
        t = d.call_s + d.op_s + nbytes("bn", shape) / rate[c]
        return KernelSample(op="bn", shape=shape, median_s=t, times_s=(t,), flops=0.0,
                            bytes=nbytes("bn", shape))

    samples = [bn(b, c, s) for c, s in ((16, 64), (256, 16)) for b in (1, 16, 256)]
    curves = fit.fit_by_channels(samples, d)
    assert sorted(curves) == [16, 256]
    g = f.model_copy(update={"bn_channels": curves})
    n = 64e6
    few, many = g.bn_time(n, 16), g.bn_time(n, 256)
    assert few == pytest.approx(n / rate[16], rel=0.01)
    assert many == pytest.approx(n / rate[256], rel=0.01)
    assert g.bn_time(n, 64) == pytest.approx((few * many) ** 0.5)  # halfway in log channels
    assert g.bn_time(n, 2048) == many and g.bn_time(n, 3) == few
    assert f.model_copy(update={"bn_channels": {}}).bn_time(n, 64) == f.bn.time(n)


def test_memory_curve_is_the_bandwidth_and_never_falls_with_size():
    d = fit.fit_dispatch(_samples("dispatch"))
    m = fit.fit_memory(_samples("memory"), d)
    assert m.dram_bytes_per_s == pytest.approx(made_up.DRAM_BPS, rel=0.02)
    assert list(m.seconds) == sorted(m.seconds)
    assert m.time(3e7) == pytest.approx(3e7 / made_up.DRAM_BPS, rel=0.05)
    u = fit.fit_memory(_samples("update"), d)
    assert u.dram_bytes_per_s == pytest.approx(made_up.UPDATE_BPS, rel=0.02)


# ----------------------------------------------------------------------------- the kernel kind
def _kernel_spec(framework: str, parts: dict[str, list[tuple[int, ...]]], **kw) -> RunSpec:
    kw.setdefault("revision", k.REVISION)
    o = KernelOptions(parts=tuple(KernelPart(op=op, shapes=tuple(s)) for op, s in parts.items()),
                      min_time_s=0.01, **kw)
    return RunSpec(kind="kernel", network="kernels", framework=framework, batch_size=1,
                   options=o)


TINY = {"gemm": [(8, 8, 8), (16, 8, 4)], "gemm_tn": [(8, 4, 16)], "gemm_nt": [(8, 4, 16)],
        "gemm_tn_seq": [(8, 4, 3, 5)],
        "conv": [(1, 3, 4, 8, 3, 1), (1, 3, 4, 9, 5, 2)],
        "conv_bwd": [(1, 3, 4, 8, 3, 1), (2, 3, 4, 9, 5, 2)],
        "conv_wgrad": [(1, 3, 4, 8, 3, 1), (2, 3, 4, 9, 5, 2)], "memory": [(1024,)], "update": [(2048,)],
        "xent": [(4, 16), (2, 1000)], "bn": [(2, 3, 5)], "pool": [(2, 3, 9)],
        "lstm": [(2, 3, 4, 5)], "dispatch": [(1,), (4,)], "dispatch_train": [(1,), (3,)]}


@pytest.mark.parametrize("framework", ["torch", "tensorflow", "jax"])
def test_worker_times_every_op_with_the_frameworks_own_kernels(framework):
    if not framework_table.installed(framework):
        pytest.skip(f"{framework} not installed")
    from dlperf.engine.worker import execute

    # scoped to FCN-5: its one-thread worker trains that network's runtime alone, not the
    # grid's four (JAX compiles each; the runtimes have tests of their own)
    r = execute(_kernel_spec(framework, TINY, scope=("fcn5@64",)))
    assert r.ok, r.failure
    assert isinstance(r.outcome, KernelOutcome)
    assert set(r.outcome.train_runtime_bytes) == {"fcn5"}
    # the libraries' files' pages as its training left them: part of that runtime
    assert 0 < r.outcome.baseline_file_rss_bytes < r.outcome.train_runtime_bytes["fcn5"]
    got = {(s.op, s.shape) for s in r.outcome.samples}
    assert got == {(op, s) for op, shapes in TINY.items() for s in shapes}
    for s in r.outcome.samples:
        assert s.median_s > 0 and len(s.times_s) >= 3
        assert s.flops == k.flops(s.op, s.shape) and s.bytes == k.nbytes(s.op, s.shape)


def test_tensorflow_pads_its_convolution_kernels_as_its_keras_layers_do():
    """'SAME' at stride 1, a padded input and 'VALID' otherwise (keras_models._conv): the
    output has the side conv_out gives, and the gradients the shapes of their operands."""
    if not framework_table.installed("tensorflow"):
        pytest.skip("tensorflow not installed")
    from dlperf.backends import tf_kernels

    for shape in ((2, 3, 4, 9, 3, 1), (2, 3, 4, 9, 5, 2), (1, 4, 2, 8, 1, 2)):
        batch, c_in, c_out, side, window, stride = shape
        out = k.conv_out(side, window, stride)
        fwd = tf_kernels.kernel("conv", shape, "/CPU:0")
        fwd.step()
        assert tuple(fwd._out.shape) == (batch, out, out, c_out)
        bwd = tf_kernels.kernel("conv_bwd", shape, "/CPU:0")
        bwd.step()
        dx, dw = bwd._out
        assert tuple(dx.shape) == tuple(bwd.args[0].shape) and tuple(dw.shape) == (
            window, window, c_in, c_out)


def test_a_calibration_by_older_kernels_says_so_with_the_command_that_times_them_again(db):
    """A calibration timed with an older revision of dlperf's kernels is still used, and
    its description says what changed since and how to time them again; a current one
    says nothing of it."""
    with Store(db) as store:
        for r in made_up.kernel_results(threads=(1,), allreduce=False):
            o = r.spec.options.model_copy(update={"revision": k.REVISION - 1})
            store.add(r.model_copy(update={"spec": r.spec.model_copy(update={"options": o})}))
        (old,) = calibration.local_calibration(store).fits
    assert old.revision == k.REVISION - 1
    note = old.older_kernels()
    assert f"revision {k.REVISION - 1} (now {k.REVISION}" in note
    assert "'dlperf calibrate --frameworks torch --threads 1'" in note
    assert note in old.describe()
    assert k.REVISION_CHANGES[k.REVISION] in note
    # two revisions behind: both changes, the older first
    older = old.model_copy(update={"revision": 14}).older_kernels()
    assert f"revision 14 (now {k.REVISION}: {k.REVISION_CHANGES[15]}; " in older
    # a scoped calibration (the main job's) is timed again at its networks' shapes: their
    # default batches need no --batch-size; another batch names every batch
    scoped = old.model_copy(update={"scope": ("alexnet@16", "fcn5@64", "lstm32@128")})
    assert ("'dlperf calibrate --frameworks torch --threads 1 --networks alexnet,fcn5,"
            "lstm32' times them again") in scoped.older_kernels()
    other = old.model_copy(update={"scope": ("alexnet@16", "alexnet@32")})
    assert "--threads 1 --networks alexnet --batch-size 16,32'" in other.older_kernels()
    with Store(db) as store:  # calibrated again: the current kernels, no note
        for r in made_up.kernel_results(threads=(1,), allreduce=False):
            t = r.finished_at + 10
            store.add(r.model_copy(update={"started_at": t, "finished_at": t}))
        (new,) = calibration.local_calibration(store).fits
    assert new.revision == k.REVISION and new.older_kernels() is None
    assert "revision" not in new.describe()


def test_a_trained_chain_without_the_optimizer_is_not_read_as_one_with_it(db):
    """Revisions before 5 trained their chain without an optimizer (three kernels a
    layer): their trained samples are left out and the plain chain stands in."""
    from dlperf.core.spec import RunResult

    versions = calibration.specs(["torch"], [1], allreduce=False)[0].options.versions
    parts = {op: [tuple(s) for s in k.grid(op)] for op in ("dispatch", "dispatch_train")}
    for revision, t0 in ((4, 1.0), (k.REVISION, 2.0)):
        spec = _kernel_spec("torch", parts, versions=versions, revision=revision)
        if revision == k.REVISION:  # another kind of kernel run: not replaced by the old one
            spec = spec.model_copy(update={"network": "kernels-new"})
        samples = tuple(made_up.sample(op, s) for op, shapes in parts.items() for s in shapes)
        with Store(db) as store:
            store.add(RunResult(spec=spec, status="ok", outcome=KernelOutcome(samples=samples),
                                started_at=t0, finished_at=t0 + 0.5))
            (stored,) = calibration.load(store)
        trained = stored.samples.of_op("dispatch_train")
        assert len(trained) == (0 if revision == 4 else len(parts["dispatch_train"]))


def test_repeated_calibrations_count_by_each_kernels_median(db):
    """calibrate --repeat: the runs of one configuration merge, each sample the median of
    the runs' medians; a run of another grid or revision stands alone, newest first."""
    from dlperf.core.spec import RunResult

    versions = calibration.specs(["torch"], [1], allreduce=False)[0].options.versions
    parts = {"memory": [(1024,)], "dispatch": [(1,), (4,)]}
    assert [s.repeat for s in calibration.specs(["torch"], [1], allreduce=False, repeat=3)] == [
        0, 1, 2]

    def add(store, spec, scale, t0):
        samples = tuple(made_up.sample(op, s).model_copy(update={
            "median_s": made_up.true_s(op, s) * scale}) for op, shapes in parts.items()
            for s in shapes)
        store.add(RunResult(spec=spec, status="ok", outcome=KernelOutcome(samples=samples),
                            started_at=t0, finished_at=t0 + 0.5))

    spec = _kernel_spec("torch", parts, versions=versions)
    with Store(db) as store:
        for r, scale in enumerate((1.0, 3.0, 1.2)):  # one disturbed run of three
            add(store, spec.model_copy(update={"repeat": r}), scale, 1.0 + r)
        (stored,) = calibration.load(store)
        (mem,) = stored.samples.of_op("memory")
        assert mem.median_s == pytest.approx(1.2 * made_up.true_s("memory", (1024,)))
        assert len(mem.times_s) == 9  # every timed call kept
        # a newer calibration of another revision replaces all three
        add(store, _kernel_spec("torch", parts, versions=versions, revision=k.REVISION + 1),
            2.0, 10.0)
        (stored,) = calibration.load(store)
        (mem,) = stored.samples.of_op("memory")
        assert mem.median_s == pytest.approx(2.0 * made_up.true_s("memory", (1024,)))


def test_a_failing_shape_is_recorded_and_the_others_go_on():
    from dlperf.engine.worker import execute

    # a tensor of negative size cannot be made
    r = execute(_kernel_spec("torch", {"gemm": [(8, 8, 8)], "memory": [(-1,)]}))
    assert r.ok and len(r.outcome.samples) == 1
    assert list(r.outcome.failures) == ["memory -1"]
    assert r.warnings == ["1 kernel shapes failed"]


def test_kernel_runs_go_through_the_runner_and_the_calibration_reads_them(db):
    """One real kernel run (a tiny grid) and one collectives run among 2 gloo processes
    (all-reduce, all-gather, reduce-scatter) with the cost of two processes on one core,
    launched, stored and read back as samples of torch at 1 thread."""
    from dlperf import api

    versions = calibration.specs(["torch"], [1], allreduce=False)[0].options.versions
    todo = [_kernel_spec("torch", TINY, versions=versions),
            _kernel_spec("torch", {"allreduce": [(4096,), (65536,)], "allgather": [(4096,)],
                                   "reducescatter": [(4096,)], "share": [(1,), (2,)]},
                         world=2, versions=versions).model_copy(
                             update={"network": "allreduce"})]
    results = api.run_specs(todo, db=db, timeout_s=300)
    assert [r.status for r in results] == ["ok", "ok"], [r.failure for r in results]
    with Store(db) as store:
        (stored,) = calibration.load(store)
        assert again_same(store, results)
    assert (stored.framework, stored.threads) == ("torch", 1)
    assert {s.op for s in stored.samples.items} == {*TINY, "allreduce", "allgather",
                                                    "reducescatter", "share"}
    ar = stored.samples.of_op("allreduce", world=2)
    assert len(ar) == 2 and all(s.median_s > 0 for s in ar)
    for op in ("allgather", "reducescatter"):  # gloo's own, timed like the all-reduce
        (got,) = stored.samples.of_op(op, world=2)
        assert got.shape == (4096,) and got.median_s > 0
    # a step alone, and each of two on one core: two times in each (rounds before and
    # after; two processes), every one a real step's seconds (how they compare is the
    # machine's, timed, and not asserted here)
    alone, two = sorted(stored.samples.of_op("share"), key=lambda s: s.shape)
    assert len(alone.times_s) == 2 and len(two.times_s) == 2
    assert all(t > 0 for t in (*alone.times_s, *two.times_s))


def again_same(store: Store, results) -> bool:
    back = {r.spec.run_id: r.outcome for r in store.results(kind="kernel")}
    return all(back[r.spec.run_id] == r.outcome for r in results)


# ----------------------------------------------------------------------------- prediction
def test_calibration_fits_every_framework_and_thread_count_stored(db):
    with Store(db) as store:
        made_up.calibrated(store, threads=(1, 2))
        cal = calibration.local_calibration(store)
    assert {(f.framework, f.threads) for f in cal.fits} == {("torch", 1), ("torch", 2)}
    f = cal.find("torch", 1)
    assert f.gemm.time(512, 512, 512) == pytest.approx(made_up.gemm_s(512, 512, 512), rel=0.05)
    assert set(f.allreduce) == {2, 4}


def test_threads_beyond_the_physical_cores_are_predicted_from_the_cores_fit(db, monkeypatch):
    """DLBench's 2P column: on 2 physical cores, 4 threads take the 2-thread fit (a thread
    beyond the cores adds no FMA units), unslowed; 2 threads uncalibrated stay so, and
    workers sharing the cores are still slowed."""
    from dlperf.core import environment

    monkeypatch.setattr(environment, "physical_cores", lambda: 2)
    with Store(db) as store:
        made_up.calibrated(store, threads=(1, 2))
        cal = calibration.local_calibration(store)
    assert cal.cores == 2
    assert cal.find("torch", 4) is cal.find("torch", 2) is not None
    assert cal.model("torch", 4).fit.threads == 2 and cal.model("torch", 4).fit.slowdown == 1
    assert cal.model("torch", 1, workers=4).fit.slowdown == 2
    spec = RunSpec(network="fcn5", framework="torch", threads=4, batch_size=64)
    two = RunSpec(network="fcn5", framework="torch", threads=2, batch_size=64)
    assert predict_for_spec(spec, cal).time_s == pytest.approx(predict_for_spec(two, cal).time_s)
    from dlperf.perfmodel.machine_fits import MachineFits

    only_one = MachineFits(tuple(f for f in cal.fits if f.threads == 1), 1.0, 2)
    assert only_one.find("torch", 4) is None and only_one.find("torch", 2) is None


def test_a_prediction_past_the_cores_says_it_stands_on_the_cores_calibration(db, tmp_path,
                                                                           monkeypatch):
    """4 threads on 2 cores take the 2-thread fit; ``predict`` says so in a note and the
    DLBench table marks the cell '^' with a footnote naming the command that times the
    kernels at 4 threads; a calibrated thread count gets neither."""
    from dlperf import api
    from dlperf.core import environment
    from dlperf.kinds.calibrate.validate import predict_here

    monkeypatch.setattr(environment, "physical_cores", lambda: 2)
    with Store(db) as store:
        made_up.calibrated(store, threads=(1, 2))
        cal = calibration.local_calibration(store)
        batch = workloads.get("fcn5").default_batch
        for threads in (2, 4):
            store.add(result("fcn5", threads, 0.5))
        notes = {t: predict_here(store, "fcn5", threads=t)[0].notes for t in (2, 4)}
    assert cal.beyond_cores("torch", 4) == 2
    assert cal.beyond_cores("torch", 2) is None and cal.beyond_cores("tensorflow", 4) is None
    said = "4 threads are predicted with the 2-thread calibration"
    assert any(n.startswith("threads: " + said) and "--threads 4" in n for n in notes[4])
    assert not any(n.startswith("threads:") for n in notes[2])
    dl = next(s for s in api.report(db=db, out=tmp_path / "rep").sections
              if s.name == "dlbench").tables[0]
    [row] = [r for r in dl.rows if r[0] == "fcn5" and r[2] == str(batch)]
    two, four = (row[dl.headers.index(h) + 1] for h in ("2 threads", "4 threads"))
    assert four.endswith("^") and not two.endswith("^")
    assert any(f.startswith("^ more threads than the cores (1 cell): " + said)
               for f in dl.footnotes)


def test_predict_here_gives_the_largest_batch_also_with_the_memory_models_error_here(
        db, monkeypatch, capsys):
    """With steps measured here, ``dlperf predict`` on this machine gives beside the model's
    largest batch the one whose peak grown by the model's 90th-percentile |error| over
    those steps still fits (the batch ``dlperf advise`` advises); with none, only the
    model's."""
    from dlperf.core import environment

    monkeypatch.setattr(validate, "runtime_baselines", lambda store: {("torch", "cpu"): 3e8})
    with Store(db) as store:
        made_up.calibrated(store)
        alone = validate.predict_here(store, "fcn5")[0]
        assert alone.memory_margin is None and alone.max_batch_with_margin is None
        for batch, peak in ((32, 9e8), (64, 1.3e9)):
            r = result("fcn5", 1, 0.5, batch=batch)
            store.add(r.model_copy(update={"metrics": r.metrics.model_copy(
                update={"peak_rss_bytes": int(peak)})}))
        cases, _ = validate.memory_cases(store, {("torch", "cpu"): 3e8})
        p = validate.predict_here(store, "fcn5")[0]

        def total(b):
            return validate.predict_here(store, "fcn5", batch_size=b)[0].memory.total

        error = max(abs(c.error) for c in cases)  # the 90th percentile of two, interpolated
        assert len(cases) == 2 and 0 < p.memory_margin.error <= error
        assert "2 steps of all frameworks" in p.memory_margin.basis
        grow, memory = 1 + p.memory_margin.error, environment.machine()["memory_bytes"]
        spare = p.max_batch_with_margin
        assert spare < p.max_batch
        assert total(spare) * grow <= memory < total(spare + 1) * grow
    assert main(["predict", "-n", "fcn5", "--device", "cpu", "--db", str(db)]) == 0
    assert (f"by the model, {spare} leaving {p.memory_margin.error:.1%} for its error: the "
            "memory model's 90th percentile") in capsys.readouterr().out


def test_a_calibration_of_other_library_versions_is_not_used(db, monkeypatch):
    from dlperf.core import environment

    with Store(db) as store:
        made_up.calibrated(store)
        real = environment.packages()
        monkeypatch.setattr(environment, "packages", lambda: {**real, "torch": "0.0.1"})
        assert calibration.local_calibration(store).fits == ()


def test_a_step_is_predicted_from_the_kernels_and_says_what_it_cannot_predict(db):
    with Store(db) as store:
        made_up.calibrated(store)
        cal = calibration.local_calibration(store)
    spec = RunSpec(network="fcn5", framework="torch", threads=1, batch_size=64)
    p = predict_for_spec(spec, cal)
    assert p is not None and p.time_s > 0
    b = p.breakdown
    assert b.compute_s > 0 and b.overhead_s > 0
    # launches at a training step's per-op cost, one step call
    from dlperf.perfmodel.costs import kernels

    _, _, cfg = workloads.resolve("fcn5", None)
    launches = sum(kernels(layer) for layer in cfg.layers())
    assert b.overhead_s == pytest.approx(launches * made_up.TRAIN_OP_S + made_up.TRAIN_CALL_S,
                                         rel=1e-6)
    assert p.time_s == pytest.approx(sum(b.model_dump().values()), rel=1e-9)
    # fcn5's first layer at batch 64: its forward product alone, from the made-up machine
    assert b.compute_s > made_up.gemm_s(64, 4096, 26752) - made_up.OP_S
    assert "tensorflow at 1 thread(s) is not calibrated" == why_not(
        RunSpec(network="fcn5", framework="tensorflow", threads=1, batch_size=64), cal)
    assert why_not(spec.model_copy(update={"precision": "bf16"}), cal) == (
        "torch at 1 thread(s) at bf16 is not calibrated")
    assert why_not(RunSpec(kind="inference", network="fcn5", batch_size=1), cal)


def test_parallel_runs_use_the_loopback_all_reduce_and_share_the_cores(db):
    from dlperf.kinds.parallel.make import make_spec

    with Store(db) as store:
        made_up.calibrated(store)
        cal = calibration.local_calibration(store)
    one = predict_for_spec(RunSpec(network="fcn5", size="tiny", framework="torch", threads=1,
                                   batch_size=64), cal)
    sync = predict_for_spec(make_spec("fcn5", size="tiny", strategy="sync", workers=4,
                                      batch_size=64), cal)
    assert sync is not None and sync.breakdown.communication_s > 0
    alpha, _ = made_up.alpha_beta(4)
    assert sync.breakdown.communication_s >= alpha
    hybrid = make_spec("fcn5", size="tiny", strategy="hybrid", workers=4, groups=2, batch_size=64)
    assert "no formula" in why_not(hybrid, cal)
    assert one is not None


def test_pipeline_stages_share_only_the_cores_they_are_pinned_to(db):
    """Four stages of one thread: on four cores each has its own; on two, stage s shares
    core s mod 2 with one other (as dlperf parallel pins ranks), which slows the step,
    but by less than every stage at half speed would, since a stage that waits leaves its
    core to the busy one."""
    from dlperf.kinds.parallel.make import make_spec
    from dlperf.perfmodel.machine_fits import MachineFits

    with Store(db) as store:
        made_up.calibrated(store)
        cal = calibration.local_calibration(store)
    spec = make_spec("alexnet", size="tiny", strategy="pipeline", workers=4, batch_size=64)
    four = predict_for_spec(spec, MachineFits(cal.fits, cal.memory_gb, 4))
    two = predict_for_spec(spec, MachineFits(cal.fits, cal.memory_gb, 2))
    assert four is not None and two is not None
    assert four.time_s < two.time_s < 2 * four.time_s
    for p in (four, two):
        assert p.breakdown.total_s == pytest.approx(p.time_s)
        assert min(p.breakdown.model_dump().values()) >= 0
    assert any("block s mod 2" in n for n in two.notes)
    assert not any("block s mod" in n for n in four.notes)


# ----------------------------------------------------------------------------- validate
NETS = ("fcn5", "alexnet", "lstm32")
TIMES = {"fcn5": 1.25, "alexnet": 0.8, "lstm32": 1.5}  # measured / predicted


def _measured_store(store, times=TIMES) -> list:
    made_up.calibrated(store)
    cal = calibration.local_calibration(store)
    for net in NETS:
        spec = RunSpec(network=net, framework="torch", threads=1,
                       batch_size=workloads.get(net).default_batch)
        store.add(result(net, 1, predict_for_spec(spec, cal).time_s * times[net]))
    return cal


def test_validate_compares_every_measured_configuration_with_its_prediction(db):
    with Store(db) as store:
        cal = _measured_store(store)
        cases, skipped = validate.cases(store, cal)
    assert {c.row.spec.network for c in cases} == set(NETS) and not skipped
    for c in cases:  # predicted / measured - 1, from the made-up measurements
        assert c.error == pytest.approx(1 / TIMES[c.row.spec.network] - 1, rel=1e-9)
    (total,) = validate.summarize(cases)
    # |errors| 0.2 (fcn5), 0.25 (alexnet), 0.333 (lstm32)
    assert total.n == 3 and total.median_abs == pytest.approx(0.25, rel=1e-6)


def test_leave_one_network_out_never_fits_on_the_network_it_predicts(db, tmp_path):
    def corrected(times):
        with Store(tmp_path / f"{times['alexnet']}.db") as store:
            cal = _measured_store(store, times)
            cases, _ = validate.cases(store, cal)
        return {c.row.spec.network: c for c in validate.corrected(cases, "lono")}

    a = corrected(TIMES)
    # only alexnet's measurement differs: now 50% slower than predicted, as lstm32 is
    b = corrected({**TIMES, "alexnet": 1.5})
    assert "alexnet" not in a["alexnet"].factors.fitted_on
    assert a["alexnet"].corrected_s == pytest.approx(b["alexnet"].corrected_s, rel=1e-9)
    # fcn5's correction is fitted on alexnet and lstm32: none while they disagree (20%
    # fast, 50% slow: a factor from either predicts the other worse than none), one
    # factor once both are 50% slow
    assert a["fcn5"].factors.form == "none" and a["fcn5"].corrected_s == a["fcn5"].prediction.time_s
    assert b["fcn5"].factors.form == "scale" and b["fcn5"].factors.fitted_on == ("alexnet", "lstm32")
    scale = b["fcn5"].factors.compute  # 1.5, a little less: the prior's pull towards 1
    assert 1.4 < scale < 1.5 and b["fcn5"].factors.memory == scale
    assert b["fcn5"].corrected_s == pytest.approx(scale * a["fcn5"].prediction.time_s, rel=1e-9)


# ----------------------------------------------------------------------------- commands
def test_predict_on_this_machine_needs_a_calibration(db, capsys):
    assert main(["predict", "-n", "fcn5", "--device", "cpu", "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "dlperf calibrate" in err
    assert main(["predict", "-n", "fcn5", "--device", "cpu", "--precision", "bf16",
                 "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip()  # not refused as fp32-only: what to calibrate
    assert len(err.splitlines()) == 1 and "dlperf calibrate" in err
    # a precision the kernels cannot run at here: said so, not a calibration to run
    for precision, reason in (("tf32", "GPU format"), ("fp16", "PyTorch only")):
        assert main(["predict", "-n", "fcn5", "--device", "cpu", "-f", "jax", "--precision",
                     precision, "--db", str(db)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and reason in err[0]


def test_predict_on_this_machine_prints_the_measurement_beside_it(db, capsys):
    with Store(db) as store:
        _measured_store(store)
    assert main(["predict", "-n", "fcn5", "--device", "cpu", "--threads", "1",
                 "--db", str(db), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["measured_s"] == pytest.approx(doc["time_s"] * TIMES["fcn5"], rel=1e-9)
    assert doc["error"] == pytest.approx(1 / TIMES["fcn5"] - 1, rel=1e-9)
    assert main(["predict", "-n", "fcn5", "--device", "cpu", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "measured" in text and "error -20.0%" in text and "calibrated on this machine" in text
    # no measurement at another batch size: said, not invented
    assert main(["predict", "-n", "fcn5", "--device", "cpu", "-b", "7", "--db", str(db)]) == 0
    assert "no measurement of this configuration" in capsys.readouterr().out


def test_predict_says_how_far_to_trust_it_from_the_other_networks_measured_here(db, capsys):
    """A prediction on this machine carries the model's validated error: the 90th
    percentile |error| over the steps of the other networks measured here with its
    framework, never its own network's (a check, not an echo); none from fewer than two."""
    from dlperf.kinds.calibrate import trust

    with Store(db) as store:
        _measured_store(store)
        p = trust.with_time_error(store, calibration.local_calibration(store),
                                  validate.predict_here(store, "fcn5")[0],
                                  framework="torch", device="cpu", threads=1)
        # alexnet +25%, lstm32 -33.3%; fcn5's own -20% left out
        others = [1 / TIMES["alexnet"] - 1, 1 / TIMES["lstm32"] - 1]
        assert p.validated_error is not None and p.validated_error.n == 2
        assert p.validated_error.p90 == pytest.approx(validate.p90([abs(e) for e in others]))
        assert p.validated_error.median == pytest.approx(sum(abs(e) for e in others) / 2)
        assert "other networks measured here with torch" in p.validated_error.basis
        # the parallel runs of a strategy: none measured, none claimed
        cal = calibration.local_calibration(store)
        spec = RunSpec(network="fcn5", framework="torch", threads=1, batch_size=64)
        assert trust.time_error(store, cal, spec, "sync", 2) is None
    assert main(["predict", "-n", "alexnet", "--device", "cpu", "--db", str(db), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["validated_error"]["n"] == 2
    assert main(["predict", "-n", "fcn5", "--device", "cpu", "--db", str(db)]) == 0
    assert f"validated +-{p.validated_error.p90:.0%} (90th percentile |error| over 2 steps" \
        in capsys.readouterr().out
    with Store(db) as store:  # steps at another precision never stand in: none, said so
        bf16 = RunSpec(network="fcn5", framework="torch", threads=1, batch_size=64,
                       precision="bf16")
        assert trust.time_error(store, calibration.local_calibration(store), bf16) is None


def test_a_parallel_prediction_is_trusted_as_far_as_its_strategy_and_workers_were(monkeypatch):
    """A parallel run's validated error is read from runs of its strategy on as many
    workers, of other networks at the same size: the tiny networks' runs (milliseconds of
    fixed costs) and other worker counts never stand in."""
    from types import SimpleNamespace

    from dlperf.kinds.calibrate import trust

    def case(net, strategy, workers, error, size="full"):
        spec = SimpleNamespace(network=net, size=size)
        return SimpleNamespace(row=SimpleNamespace(spec=spec), error=error,
                               prediction=SimpleNamespace(strategy=strategy, devices=workers))

    pool = [case("fcn5", "pipeline", 4, -0.10), case("alexnet", "pipeline", 4, 0.26),
            case("resnet50", "pipeline", 4, -0.29), case("alexnet", "pipeline", 2, 0.9),
            case("fcn5", "sync", 4, 0.9), case("alexnet", "pipeline", 4, 0.9, "tiny")]
    monkeypatch.setattr(validate, "cases", lambda *a, **k: (pool, []))
    spec = RunSpec(network="resnet50", framework="torch", threads=1, batch_size=16)
    v = trust.time_error(None, None, spec, "pipeline", 4)
    assert v.n == 2 and v.p90 == pytest.approx(validate.p90([0.10, 0.26]))
    assert "pipeline runs of other networks on 4 workers" in v.basis
    assert trust.time_error(None, None, spec, "pipeline", 8) is None


def test_a_step_is_vouched_for_by_steps_of_its_framework_device_and_precision_only():
    """The errors the DLBench table's 'validated error' column and ``predict``'s validated
    line read for a step: other networks' steps at the step's framework, device and
    precision; never its own network, a parallel run (whose workers are PyTorch's), a
    step at another precision or on another device."""
    from types import SimpleNamespace

    def case(net, error, *, kind="step", fw="torch", device="cpu", precision="fp32"):
        spec = SimpleNamespace(kind=kind, network=net, framework=fw, device=device,
                               precision=precision)
        return SimpleNamespace(row=SimpleNamespace(spec=spec), error=error)

    pool = [case("alexnet", -0.10), case("lstm32", 0.20), case("fcn5", 0.5),
            case("alexnet", 0.9, kind="parallel"), case("lstm32", 0.9, precision="bf16"),
            case("lstm32", 0.9, device="gpu"), case("alexnet", 0.9, fw="jax")]
    spec = RunSpec(network="fcn5", framework="torch", threads=1, batch_size=64)
    assert sorted(validate.other_steps_errors(pool, spec)) == [0.10, 0.20]
    jax = RunSpec(network="fcn5", framework="jax", threads=1, batch_size=64)
    assert validate.other_steps_errors(pool, jax) == [0.9]


def test_validate_command_prints_the_error_table_and_json(db, capsys):
    with Store(db):  # a store with no calibration in it
        pass
    assert main(["validate", "--db", str(db)]) == 2
    assert "dlperf calibrate" in capsys.readouterr().err
    with Store(db) as store:
        _measured_store(store)
    assert main(["validate", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "median |error|" in text and "worst cases" in text
    assert main(["validate", "--leave-one-network-out", "--json", "--db", str(db)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mode"] == "lono" and len(doc["cases"]) == 3
    assert doc["summary"]["all"][0]["n"] == 3
    assert all(math.isfinite(c["predicted_s"]) for c in doc["cases"])
    assert main(["validate", "--kinds", "nope", "--db", str(db)]) == 2


def test_a_gpu_is_calibrated_at_one_thread_by_default():
    assert calibration.default_threads("gpu") == [1]
    assert calibration.default_threads()[0] == 1


def test_calibrate_dry_run_lists_the_kernel_runs(capsys):
    assert main(["calibrate", "--frameworks", "torch", "--threads", "1", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and "kernels" in lines[0] and "allreduce" in lines[1]
    assert main(["calibrate", "--frameworks", "torch", "--threads", "1", "--repeat", "2",
                 "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and "(repeat 1)" in lines[-1]
    assert main(["calibrate", "--frameworks", "nope", "--dry-run"]) == 2
    assert main(["calibrate", "--repeat", "0", "--dry-run"]) == 2


def test_the_report_puts_the_calibrated_prediction_beside_each_measured_cell(db, tmp_path,
                                                                              monkeypatch):
    from dlperf import api
    from tests.report_fixtures import other_machine

    with Store(db) as store:
        _measured_store(store)
        with other_machine(monkeypatch):  # never predicted from this machine's curves
            store.add(result("fcn5", 1, 9.0))
    rep = api.report(db=db, out=tmp_path / "rep")
    pred = next(s for s in rep.sections if s.name == "prediction").tables[0]
    assert len(pred.rows) == 3  # this machine's three, not the other machine's
    by_net = {v[0]: v for v in pred.values}
    # validated error of alexnet: the 90th percentile of the other two networks' |error|
    others = [abs(1 / TIMES[n] - 1) for n in ("fcn5", "lstm32")]
    assert by_net["alexnet"][-2] == pytest.approx(validate.p90(others), rel=1e-9)
    assert by_net["alexnet"][-3] == pytest.approx(1 / TIMES["alexnet"] - 1, rel=1e-9)
    dl = next(s for s in rep.sections if s.name == "dlbench").tables[0]
    assert "pred." in dl.headers
    plain = api.report(db=db, out=tmp_path / "plain", predictions=False)
    assert "prediction" not in {s.name for s in plain.sections}


# ----------------------------------------------------------------------------- explain
def _fit():
    return fit.fit_local(fit.Samples.of([made_up.sample(p.op, tuple(s), o.world)
                                         for spec in calibration.specs(["torch"], [1])
                                         for o in [spec.options] for p in o.parts
                                         for s in p.shapes]), "torch", 1)


def test_pytorchs_one_thread_1x1_convolution_of_a_small_batch_is_timed_as_per_sample_products():
    """ATen runs a 1x1, stride-1 convolution of a batch below 16 on one thread without
    oneDNN: one product per sample (weights x the sample's channels x pixels). Any other
    batch, stride, window, thread count or framework takes the convolution curves."""
    from dlperf.perfmodel import local
    from dlperf.workloads.base import conv

    f = _fit()
    layer = conv("c1", 64, 256, 1, 56, bias=False)
    fwd, bwd = local.product_times(layer, 8, f)
    px = 56 * 56
    assert fwd == pytest.approx(8 * max(f.gemm.time(256, px, 64), local._fresh(f, 256 * px)))
    assert bwd == pytest.approx(8 * (max(f.gemm.time(64, px, 256), local._fresh(f, 64 * px))
                                     + max(f.gemm_tn.time(256, 64, px),
                                           local._fresh(f, 256 * 64))))
    conv_fwd = lambda batch, stride=1: max(  # noqa: E731
        f.conv.time(batch * px, 256, 64, 1, stride) + local.new_pages_s(f, batch * px * 256),
        local._fresh(f, batch * px * 256))
    assert local.product_times(layer, 16, f)[0] == pytest.approx(conv_fwd(16))
    two = f.model_copy(update={"threads": 2})
    assert local.product_times(layer, 8, two)[0] == pytest.approx(conv_fwd(8))
    strided = conv("proj", 64, 256, 1, 56, bias=False, stride=2)
    assert local.product_times(strided, 8, f)[0] == pytest.approx(conv_fwd(8, 2))
    three = conv("c2", 64, 64, 3, 56, bias=False)
    assert local.product_times(three, 8, f)[0] != pytest.approx(
        8 * f.gemm.time(64, px, 9 * 64))
    jax = f.model_copy(update={"framework": "jax"})
    assert local.product_times(layer, 8, jax)[0] == pytest.approx(conv_fwd(8))
    # ResNet-50 (v1.5): the stride sits on the 3x3 and on the projection of stages 2-4
    _, _, cfg = workloads.resolve("resnet50", None)
    stride = {x.name: x.gemms[0].stride for x in cfg.layers() if x.op == "conv"}
    assert [stride[f"s{i}b1_proj"] for i in (1, 2, 3, 4)] == [1, 2, 2, 2]
    assert stride["s2b1_c2"] == 2 and stride["s2b1_c1"] == stride["s2b2_c2"] == 1
    assert stride["stem"] == 2


def test_profiled_ops_are_timed_by_the_curve_of_what_does_their_work():
    from dlperf.kinds.explain.options import ProfiledOp
    from dlperf.perfmodel import ops
    from dlperf.perfmodel.local import one_product

    f = _fit()
    mm = ops.op_time(ProfiledOp(name="aten::mm", shapes=((2048, 64), (64, 4096)), calls=2,
                                time_s=0.01), f)
    assert mm.kind == "gemm" and mm.flops == 2 * 2 * 2048 * 4096 * 64
    # its 32 MiB result: new pages at every call, beside the curve (``local.one_product``)
    assert mm.model_s == pytest.approx(2 * one_product(f, f.gemm, 2048, 4096, 64), rel=1e-12)
    assert one_product(f, f.gemm, 2048, 4096, 64) > f.gemm.time(2048, 4096, 64)
    assert "(2048x64) @ (64x4096), inner dimension 64" == mm.shape_text()
    # XLA's dots by their layout: a transposed first operand by the transposed product's
    # curve, a transposed second by the product's that reads its weights transposed, both
    # transposed by the sequence's weight gradient's, the rest by the GEMM's
    shapes = ((256, 4096), (4096, 1000))
    assert f.gemm_nt is not None
    for name, curve in (("xla:dot", f.gemm), ("xla:dot_nt", f.gemm_nt),
                        ("xla:dot_tn", f.gemm_tn), ("xla:dot_tt", f.gemm_tn_seq),
                        ("tf:matmul", f.gemm), ("tf:matmul_nt", f.gemm_nt),
                        ("tf:matmul_tn", f.gemm_tn)):
        t = ops.op_time(ProfiledOp(name=name, shapes=shapes, calls=1, time_s=0.1), f)
        assert t.kind == "gemm" and t.model_s == pytest.approx(curve.time(256, 1000, 4096))
    addmm = ops.op_time(ProfiledOp(name="aten::addmm", shapes=((10,), (8, 5), (5, 10), (), ()),
                                   calls=1, time_s=1e-4), f)
    assert ops.gemm_shape("aten::addmm", addmm.shapes) == (1, 8, 10, 5)
    bmm = ops.gemm_shape("aten::bmm", ((12, 16, 8), (12, 8, 16)))
    assert bmm == (12, 16, 16, 8)
    relu = ops.op_time(ProfiledOp(name="aten::clamp_min", shapes=((64, 4096),), calls=1,
                                  time_s=1e-4), f)
    assert relu.kind == "memory" and relu.bytes == 4 * 2 * 64 * 4096
    assert relu.model_s == pytest.approx(f.dispatch.op_s + f.memory.time(relu.bytes))
    # ATen's relu calls clamp_min, which the profiler records beside it: the wrapper moves
    # nothing of its own (counted, ResNet-50's ReLUs were priced twice)
    for name in ("aten::relu", "aten::relu_"):
        wrapper = ops.op_time(ProfiledOp(name=name, shapes=((64, 4096),), calls=1,
                                         time_s=1e-6), f)
        assert wrapper.kind == "dispatch" and wrapper.model_s == pytest.approx(f.dispatch.op_s)
    # dtypes recorded (PyTorch under autocast): a half ReLU moves 2-byte elements; a copy
    # of a half tensor into an fp32 one (autocast's cast) reads 2 and writes 4 bytes each
    half = ops.op_time(ProfiledOp(name="aten::clamp_min", shapes=((64, 4096),), calls=1,
                                  time_s=1e-4, element_bytes=(2,)), f)
    assert half.bytes == 2 * 2 * 64 * 4096
    cast = ops.op_time(ProfiledOp(name="aten::copy_", shapes=((64, 4096), (64, 4096), ()),
                                  calls=1, time_s=1e-4, element_bytes=(4, 2, 0)), f)
    assert cast.bytes == (4 + 2) * 64 * 4096
    # in place (the update, a gradient's accumulation): no fresh result, the update's curve
    add_ = ops.op_time(ProfiledOp(name="aten::add_", shapes=((64, 4096), (64, 4096), ()),
                                  calls=1, time_s=1e-4), f)
    assert add_.bytes == 3 * 4 * 64 * 4096 and f.update is not None
    assert add_.model_s == pytest.approx(f.dispatch.op_s + f.update.time(add_.bytes))
    assert f.update.time(add_.bytes) < f.memory.time(add_.bytes)
    view = ops.op_time(ProfiledOp(name="aten::view", shapes=((64, 4096), ()), calls=3,
                                  time_s=1e-6), f)
    assert view.kind == "dispatch" and view.model_s == pytest.approx(3 * f.dispatch.op_s)
    assert ops.classify("autograd::engine::evaluate_function: AddmmBackward0") == "dispatch"
    # autograd's gradient accumulation node and PyTorch 2.x's detach: their children (or
    # nothing) move the data, never a pass over their operand
    for name in ("torch::autograd::AccumulateGrad", "detach", "aten::resolve_conj"):
        assert ops.classify(name) == "dispatch", name
    # operands not recorded: shown, never given a model time it could be compared with
    fused = ops.op_time(ProfiledOp(name="aten::_foreach_add_", shapes=((), (), ()), calls=1,
                                   time_s=5e-4), f)
    assert fused.kind == "unmodelled" and fused.excess_s == 0
    conv = ops.op_time(ProfiledOp(name="aten::mkldnn_convolution",
                                  shapes=((2, 3, 8, 8), (4, 3, 3, 3), (4,), (), ()), calls=1,
                                  time_s=1e-4, flops=2.0 * 2 * 64 * 4 * 27), f)
    assert conv.kind == "conv" and conv.model_s == pytest.approx(f.conv.time(128, 4, 27, 3))


def test_a_normalisations_and_a_pools_passes_are_timed_by_their_layers_curves():
    """The step model times a batch normalisation and a max pool by their own calibrated
    curves, forward and backward together; explain does the same for their ops (never a
    plain memory pass), shares the layer's time between the two passes in the measured
    proportion, and counts the wrappers that call them as dispatch."""
    from dlperf.kinds.explain.options import ProfiledOp
    from dlperf.perfmodel import ops
    from dlperf.perfmodel.kernels import bn_bytes, pool_bytes

    f = _fit()
    assert f.bn is not None and f.pool is not None
    x, c = (2, 256, 56, 56), 256
    e = 2 * 256 * 56 * 56
    fwd = ProfiledOp(name="aten::native_batch_norm", shapes=(x, (c,), (c,), (c,), (c,)),
                     calls=1, time_s=3e-3)
    bwd = ProfiledOp(name="aten::native_batch_norm_backward",
                     shapes=(x, x, (c,), (c,), (c,), (c,), (c,)), calls=1, time_s=1e-3)
    whole = f.bn_time(bn_bytes(e, c), c)
    alone = ops.op_time(fwd, f)  # one pass alone: its share of the layer's bytes
    assert alone.kind == "memory" and alone.bytes == 4 * (2 * e + 2 * c)
    assert alone.model_s == pytest.approx(f.dispatch.op_s + whole * (2 * e + 2 * c)
                                          / (5 * e + 6 * c))
    assert alone.model_s != pytest.approx(ops.op_time(ProfiledOp(
        name="aten::clamp_min", shapes=(x,), calls=1, time_s=3e-3), f).model_s)
    t = {o.name: o for o in ops.op_times([fwd, bwd], f)}
    pair = t["aten::native_batch_norm"].model_s + t["aten::native_batch_norm_backward"].model_s
    assert pair == pytest.approx(2 * f.dispatch.op_s + whole)
    # both passes at the layer's ratio to its calibration: 3 to 1, as measured
    assert t["aten::native_batch_norm"].model_s == pytest.approx(0.75 * pair)
    # PyTorch's max pool: the forward's output from the calibrated window and stride;
    # the backward takes (output gradient, input); TensorFlow's pool gives both shapes
    xin, out = (2, 64, 112, 112), (2, 64, 56, 56)
    i, o = 2 * 64 * 112 * 112, 2 * 64 * 56 * 56
    pool = ops.op_time(ProfiledOp(name="aten::max_pool2d_with_indices", shapes=(xin,),
                                  calls=1, time_s=9e-3), f)
    assert pool.model_s == pytest.approx(f.dispatch.op_s + f.pool.time(pool_bytes(i, o))
                                         * (i + o) / (3 * i + 2 * o))
    tf_grad = ops.op_time(ProfiledOp(name="tf:_MklNativeMaxPoolGrad",
                                     shapes=(xin, out, out, xin), calls=1, time_s=1e-3), f)
    assert tf_grad.bytes == 4 * (o + 2 * i)
    paired = ops.op_times([ProfiledOp(name="aten::max_pool2d_with_indices", shapes=(xin,),
                                      calls=1, time_s=9e-3),
                           ProfiledOp(name="aten::max_pool2d_with_indices_backward",
                                      shapes=(out, xin), calls=1, time_s=1e-3)], f)
    assert sum(p.model_s for p in paired) == pytest.approx(2 * f.dispatch.op_s
                                                            + f.pool.time(pool_bytes(i, o)))
    assert paired[0].share_of_calibrated == pytest.approx(paired[1].share_of_calibrated)
    for name in ("aten::batch_norm", "aten::_batch_norm_impl_index", "aten::max_pool2d",
                 "aten::log_softmax", "aten::cross_entropy_loss", "aten::nll_loss"):
        assert ops.classify(name) == "dispatch", name


def test_a_convolution_without_onednn_is_timed_once_on_the_op_that_does_the_work():
    """PyTorch's slow path: conv2d -> thnn_conv2d -> _slow_conv2d_forward, and
    convolution_backward -> _slow_conv2d_backward (same operands): the wrappers are calls,
    the inner ops carry the convolution's model time, once each."""
    from dlperf.kinds.explain.options import ProfiledOp
    from dlperf.perfmodel import ops

    f = _fit()
    g, x, w = (8, 256, 56, 56), (8, 64, 56, 56), (256, 64, 1, 1)
    profiled = [
        ProfiledOp(name="aten::thnn_conv2d", shapes=(x, w, (), (256,)), calls=1, time_s=1e-5),
        ProfiledOp(name="aten::_slow_conv2d_forward", shapes=(x, w, (), (256,)), calls=1,
                   time_s=7e-3),
        ProfiledOp(name="aten::convolution_backward", shapes=(g, x, w, (), ()), calls=1,
                   time_s=3e-5),
        ProfiledOp(name="aten::_slow_conv2d_backward", shapes=(g, x, w, ()), calls=1,
                   time_s=2e-2),
    ]
    t = {o.name: o for o in ops.op_times(profiled, f)}
    assert t["aten::thnn_conv2d"].kind == t["aten::convolution_backward"].kind == "dispatch"
    assert t["aten::_slow_conv2d_forward"].kind == "conv"
    slow = t["aten::_slow_conv2d_backward"]
    assert slow.kind == "conv_bwd"
    assert slow.model_s == pytest.approx(f.conv_bwd.time(8 * 56 * 56, 256, 64, 1))
    # with oneDNN (no slow child) the backward op keeps the gradients' time
    alone = ops.op_times(profiled[2:3], f)[0]
    assert alone.kind == "conv_bwd" and alone.model_s == pytest.approx(slow.model_s)


def test_a_strided_library_convolution_takes_its_rows_from_its_conv2d_flop_count():
    """torch.profiler counts FLOPs on 'aten::conv2d' only; the cuDNN or oneDNN op it ends
    in (same input and weight) gets its output rows from that count, not from the
    input's pixels (a stride of 4 would make them 16 times too many); the stride, for
    the input's traffic, from the input's pixels over the output's."""
    from dlperf.kinds.explain.options import ProfiledOp
    from dlperf.perfmodel import local, ops

    f = _fit()
    x, w = (8, 3, 224, 224), (64, 3, 11, 11)
    rows = 8 * 55 * 55
    flops = 2.0 * rows * 64 * 363
    profiled = [
        ProfiledOp(name="aten::conv2d", shapes=(x, w, (64,)), calls=1, time_s=1e-5,
                   flops=flops),
        ProfiledOp(name="aten::cudnn_convolution", shapes=(x, w, ()), calls=1, time_s=1e-3),
    ]
    t = {o.name: o for o in ops.op_times(profiled, f)}
    lib = t["aten::cudnn_convolution"]
    assert lib.kind == "conv" and lib.flops == pytest.approx(flops)
    assert lib.model_s == pytest.approx(f.conv.time(rows, 64, 363, 11, 4))
    assert lib.model_s > f.conv.time(rows, 64, 363, 11, 1)  # 16 times the input's pixels
    alone = ops.op_times(profiled[1:], f)[0]  # no conv2d record: the input's pixels (and
    # their output's new pages, 103 MB of it: ``local.new_pages_s``)
    assert alone.model_s == pytest.approx(f.conv.time(8 * 224 * 224, 64, 363, 11, 1)
                                          + local.new_pages_s(f, 8 * 224 * 224 * 64))
    # on a GPU conv2d launches no kernel of its own (no device time): the profile keeps it
    # for its FLOPs all the same, and drops a timeless event that counts none
    from dlperf.backends.torch_profile import kept

    assert kept("aten::conv2d", 0.0, flops) and not kept("aten::view", 0.0, None)
    assert kept("aten::relu", 3.0, None) and not kept("ProfilerStep#1", 9.0, None)


def test_the_diagnosis_names_a_kind_of_op_that_loses_in_many_small_groups():
    """Ten convolutions each 5% of the step over their model time name no single op, but
    together they are half the step's gap: the diagnosis names the kind, its time and its
    ratio to the calibrated curves, the slower way round."""
    from dlperf.kinds.explain.analysis import Explanation
    from dlperf.kinds.explain.options import ProfiledOp, ProfileOutcome
    from dlperf.perfmodel.ops import OpTime

    ops = [OpTime(f"xla:convolution#{i}", (), "conv", 1, 0.1, 0.05, 1e9, 0.0)
           for i in range(10)]
    ops.append(OpTime("xla:fusion", (), "memory", 1, 0.05, 0.05, 0.0, 1e6))
    profile = ProfileOutcome(profiler="jax", steps=1, step_s=1.1,
                             ops=(ProfiledOp(name="xla:fusion", shapes=(), calls=1,
                                             time_s=0.05),))
    e = Explanation(result=None, profile=profile, ops=ops, fit=_fit(), prediction=None)
    text = e.diagnosis()
    assert text.startswith("convolutions take") and "(91% of it), 2 times" in text
    assert "10 op groups" in text
    faster = Explanation(result=None, profile=profile, fit=_fit(), prediction=None,
                         ops=[OpTime("aten::cudnn_convolution", (), "conv", 1, 0.05, 0.5,
                                     1e9, 0.0)])
    assert "0.1 times" in faster.diagnosis() and "faster" in faster.diagnosis()


def test_the_diagnosis_names_the_op_whose_many_shapes_lose_most_of_a_kind():
    """XLA names a fusion after what it does, one name at many shapes: twelve
    transpose_copy_fusion groups, none alone notable, lose most of the memory-bound ops'
    gap, and the diagnosis names them with their calls, time and model; a kind whose loss
    is spread over ops of different names names none."""
    from dlperf.kinds.explain.analysis import Explanation
    from dlperf.kinds.explain.options import ProfileOutcome
    from dlperf.perfmodel.ops import OpTime

    ops = [OpTime("xla:transpose_copy_fusion", ((i + 1, 8),), "memory", 2, 0.06, 0.01, 0.0,
                  1e6) for i in range(12)]
    ops += [OpTime(f"xla:add_fusion#{i}", (), "memory", 1, 0.02, 0.01, 0.0, 1e6)
            for i in range(5)]
    profile = ProfileOutcome(profiler="jax", steps=1, step_s=2.0, ops=())
    e = Explanation(result=None, profile=profile, ops=ops, fit=_fit(), prediction=None)
    text = e.diagnosis()
    assert text.startswith("memory-bound ops take")
    assert "most of it in 24 calls of xla:transpose_copy_fusion (12 shapes)" in text
    assert "720 ms against 120 ms modelled" in text
    spread = Explanation(result=None, profile=profile, fit=_fit(), prediction=None,
                         ops=[OpTime(f"xla:fusion#{i}", (), "memory", 1, 0.1, 0.05, 0.0, 1e6)
                              for i in range(10)])
    assert "most of it" not in spread.diagnosis()


def test_explain_profiles_a_torch_step_and_names_the_op_that_loses_most(db, capsys):
    with Store(db) as store:
        made_up.calibrated(store)
    assert main(["explain", "-n", "fcn5", "--size", "tiny", "-b", "16", "--steps", "2",
                 "--db", str(db), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = {o["name"] for o in doc["ops"]}
    assert {"aten::addmm", "aten::mm"} & names  # the framework's own op names
    assert doc["measured_s"] > 0 and doc["profiled_step_s"] > 0
    assert doc["ops_s"] == pytest.approx(sum(o["measured_s"] for o in doc["ops"]))
    gemms = [o for o in doc["ops"] if o["kind"] == "gemm"]
    assert gemms and all(o["model_s"] > 0 and o["flops"] > 0 for o in gemms)
    assert doc["diagnosis"] and doc["predicted_s"] > 0
    assert main(["explain", "-n", "fcn5", "--size", "tiny", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "diagnosis:" in text and "Op groups per step" in text


HLO = """HloModule jit_train_step

%fused_computation (param_0: f32[8,4], param_1: f32[4,6]) -> f32[8,6] {
  %param_0 = f32[8,4]{1,0} parameter(0)
  %param_1 = f32[4,6]{1,0} parameter(1)
  ROOT %dot.3 = f32[8,6]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (x: f32[2,8,4], w: f32[4,6], img: f32[2,9,9,3], k: f32[3,3,3,5]) -> f32[8,6] {
  %x = f32[2,8,4]{2,1,0} parameter(0)
  %w = f32[4,6]{1,0} parameter(1)
  %img = f32[2,9,9,3]{3,2,1,0} parameter(2)
  %k = f32[3,3,3,5]{3,2,1,0} parameter(3)
  %dot.1 = f32[4,6]{1,0} dot(%x, %y.2), lhs_contracting_dims={0,1}, rhs_contracting_dims={0,1}
  %y.2 = f32[2,8,6]{2,1,0} parameter(4)
  %flat = f32[8,4]{1,0} parameter(5)
  %ynn_fusion = f32[8,6]{1,0} fusion(%flat, %w), kind=kCustom, calls=%fused_computation
  %convolution.4 = f32[2,9,9,5]{3,2,1,0} convolution(%img, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  %g = f32[2,9,9,5]{3,2,1,0} parameter(6)
  %convolution.9 = f32[3,3,3,5]{3,2,1,0} convolution(%img, %g), window={size=9x9 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf
  %add.5 = f32[8,6]{1,0} add(%ynn_fusion, %ynn_fusion)
  %transpose_copy_fusion.7 = f32[6,8]{1,0} fusion(%add.5), kind=kLoop, calls=%fused_copy
  %dot.8 = f32[4,6]{1,0} dot(%flat, %transpose_copy_fusion.7), lhs_contracting_dims={0}, rhs_contracting_dims={1}
  ROOT %while.6 = (s32[], f32[8,6]{1,0}) while(%t), condition=%c, body=%b
}
"""


def made_up_fit() -> fit.LocalFit:
    """The made-up machine's curves, fitted from its samples of every op."""
    items = [made_up.sample(op, tuple(s)) for op in calibration.LOCAL_OPS for s in k.grid(op)]
    return fit.fit_local(fit.Samples.of(items), "torch", 1)


def test_explain_names_products_tensor_cores_cannot_tile_on_a_gpu():
    """On a GPU at bf16, products with a dimension no multiple of 8 that ran at under half
    their calibrated rate are named with the padding that aligns them (a GPT-2 head over
    50257 tokens ran at 10-15% of it on an H100); aligned or fast products are not, and
    neither is anything on a CPU or at fp32."""
    from dlperf.kinds.explain.analysis import Explanation
    from dlperf.kinds.explain.options import ProfileOutcome
    from dlperf.perfmodel.ops import OpTime

    def op(shapes, measured_s, model_s, calls=1.0):
        return OpTime("aten::mm", shapes, "gemm", calls, measured_s, model_s, 1e12, 0.0)

    ops = [op(((8192, 768), (768, 50257)), 6.6e-3, 0.65e-3),
           op(((50257, 8192), (8192, 768)), 4.3e-3, 0.63e-3),
           op(((8192, 768), (768, 3072)), 0.7e-3, 0.67e-3, calls=12),  # aligned
           op(((8192, 768), (768, 50257)), 1e-3, 0.9e-3)]  # unaligned, but at 90%
    profile = ProfileOutcome(profiler="torch profiler", steps=1, step_s=0.085)
    gpu = made_up_fit().model_copy(update={"device": "gpu", "precision": "bf16"})
    (note,) = Explanation(None, profile, ops, gpu, None).notes()
    assert note.startswith("2 matrix product calls with a dimension of 50257 (no multiple "
                           "of 8 at bf16) ran at 10%-15% of the calibrated rate")
    assert "10.9 ms (13% of the step)" in note and "padding it to 50264" in note
    for device, precision in (("cpu", "bf16"), ("gpu", "fp32")):
        other = gpu.model_copy(update={"device": device, "precision": precision})
        assert Explanation(None, profile, ops, other, None).notes() == []


def test_explain_says_when_the_machine_ran_at_another_speed_than_calibrated():
    """Each op's share of its calibrated rate is read against curves timed at the
    calibration's speed: a profiled run whose speed probe took 40% longer gets a note that
    the shares carry it; one within the probe's spread, or not probed, gets none."""
    from types import SimpleNamespace

    from dlperf.kinds.explain.analysis import Explanation
    from dlperf.kinds.explain.options import ProfileOutcome

    cal = made_up_fit().model_copy(update={"speed_probe": {"compute": 0.010, "memory": 0.020}})
    profile = ProfileOutcome(profiler="torch profiler", steps=1, step_s=0.1)

    def notes(probe):
        run = SimpleNamespace(metrics=SimpleNamespace(speed_probe=probe, median_s=0.1))
        return Explanation(run, profile, [], cal, None).notes()

    (note,) = notes({"compute": 0.014, "memory": 0.021})
    assert note.startswith("the machine ran at another speed than calibrated: the speed "
                           "probe's matrix product took 40% longer than when torch x1 was "
                           "calibrated") and "--force" in note
    assert notes({"compute": 0.0105, "memory": 0.019}) == [] and notes(None) == []


def test_explain_says_when_the_ops_ran_side_by_side():
    """Ops whose times add up to more than the profiled step ran concurrently (XLA's
    independent instructions, TensorFlow's inter-op threads): a note says the per-op
    shares read low; a serial step's ops get none."""
    from types import SimpleNamespace

    from dlperf.kinds.explain.analysis import Explanation
    from dlperf.kinds.explain.options import ProfiledOp, ProfileOutcome
    from dlperf.perfmodel import ops

    cal = made_up_fit()
    profile = ProfileOutcome(profiler="jax profiler", steps=1, step_s=0.1)
    run = SimpleNamespace(metrics=SimpleNamespace(speed_probe=None, median_s=0.1))

    def notes(*times):
        timed = [ops.op_time(ProfiledOp(name="xla:add", shapes=((1024,),), calls=1,
                                        time_s=t), cal) for t in times]
        return Explanation(run, profile, timed, cal, None).notes()

    (note,) = notes(0.07, 0.08)
    assert note.startswith("the ops' times add up to 150% of the profiled step") \
        and "side by side" in note
    assert notes(0.05, 0.04) == []


def test_explain_says_when_the_profiler_slowed_the_step():
    """A profiled step far longer than the timed one (PyTorch's ResNet-50 on two threads
    here: 4.97 s against 3.65) was slowed by the profiler: a note says the op groups'
    times are the profiled step's, with the model's time beside; within
    ``PROFILER_SLOWED``, none."""
    from types import SimpleNamespace

    from dlperf.kinds.explain.analysis import PROFILER_SLOWED, Explanation
    from dlperf.kinds.explain.options import ProfiledOp, ProfileOutcome
    from dlperf.perfmodel import ops

    cal = made_up_fit()
    timed = [ops.op_time(ProfiledOp(name="aten::add", shapes=((1024,),), calls=1,
                                    time_s=3.0), cal)]
    prediction = SimpleNamespace(time_s=3.4)

    def notes(profiled_s, timed_s):
        run = SimpleNamespace(metrics=SimpleNamespace(speed_probe=None, median_s=timed_s))
        profile = ProfileOutcome(profiler="torch profiler", steps=1, step_s=profiled_s)
        return Explanation(run, profile, timed, cal, prediction).notes()

    (note,) = notes(4.97, 3.65)
    assert note.startswith("the profiler slowed the step: 4.97 s profiled against 3.65 s "
                           "timed without it (the model: 3.4 s); the op groups' times")
    assert notes(3.65 * PROFILER_SLOWED, 3.65) == [] and notes(3.5, 3.65) == []


def test_xla_instructions_are_read_from_the_hlo_and_the_trace():
    pytest.importorskip("jax")
    from dlperf.backends import jax_profile as jp

    table = jp.parse_hlo(HLO)
    assert table["x"].dims == (2, 8, 4) and table["dot.3"].computation == "fused_computation"
    # the weight gradient's form: contracting over (time, batch), its first operand read
    # transposed -> (4 x 16) @ (16 x 6)
    assert jp.describe(table["dot.1"], table) == ("xla:dot_tn", ((4, 16), (16, 6)), None)
    # both operands transposed, as JAX's compiled LSTM step runs its sequence's gradient
    assert jp.describe(table["dot.8"], table) == ("xla:dot_tt", ((4, 8), (8, 6)), None)
    # a fusion around one dot is that dot
    assert jp.describe(table["ynn_fusion"], table) == ("xla:dot", ((8, 4), (4, 6)), None)
    name, shapes, flops = jp.describe(table["convolution.4"], table)
    assert (name, shapes) == ("xla:convolution", ((2, 3, 9, 9), (5, 3, 3, 3)))
    assert flops == 2.0 * (2 * 9 * 9 * 5) * 9 * 3
    # the same layer's weight gradient, which XLA runs as a convolution of the input with
    # the output gradient: named apart, with the layer's geometry (input, output
    # gradient, window), and timed as half the calibrated backward pair
    name, shapes, flops = jp.describe(table["convolution.9"], table)
    assert (name, shapes) == ("xla:convolution_wgrad", ((2, 3, 9, 9), (2, 5, 9, 9), (3, 3)))
    assert flops == 2.0 * (2 * 9 * 9) * 5 * (3 * 3 * 3)
    from dlperf.kinds.explain.options import ProfiledOp
    from dlperf.perfmodel.ops import op_time

    fit_ = made_up_fit()
    t = op_time(ProfiledOp(name=name, shapes=shapes, calls=1, time_s=1e-3, flops=flops), fit_)
    assert t.kind == "conv_bwd" and t.flops == flops
    assert t.model_s == pytest.approx(fit_.conv_bwd.time(2 * 9 * 9, 5, 27, 3) / 2)
    assert jp.describe(table["add.5"], table) == ("xla:add", ((8, 6), (8, 6), (8, 6)), None)
    # a fusion around no product is named after the kind XLA gives it, without its number
    assert jp.describe(table["transpose_copy_fusion.7"], table) == (
        "xla:transpose_copy_fusion", ((8, 6), (6, 8)), None)
    assert jp.describe(table["while.6"], table) == ("xla:while", (), None)  # a tuple: unmodelled
    # a loop holding two ops: each keeps its own time, the loop what is left
    from dlperf.backends.trace_times import self_times

    times = self_times([("while.6", 0, 100), ("dot.1", 10, 40), ("add.5", 50, 60),
                           ("dot.1", 200, 230)])
    assert times == {"while.6": (1, pytest.approx(60e-9)), "dot.1": (2, pytest.approx(60e-9)),
                     "add.5": (1, pytest.approx(10e-9))}


def test_explain_profiles_a_jax_step_with_xla_instruction_names(db, capsys):
    if not framework_table.installed("jax"):
        pytest.skip("jax not installed")
    with Store(db) as store:
        made_up.calibrated(store, frameworks=("jax",), allreduce=False)
    assert main(["explain", "-n", "fcn5", "--size", "tiny", "-f", "jax", "-b", "16", "--steps",
                 "2", "--db", str(db), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    gemms = [o for o in doc["ops"] if o["kind"] == "gemm"]
    assert gemms and all(o["name"].startswith("xla:dot") and o["model_s"] > 0 for o in gemms)
    # fcn5's products, forward and both gradients, each at its own shapes
    assert len({tuple(map(tuple, o["shapes"])) for o in gemms}) >= 3
    assert 0 < doc["ops_s"] <= doc["profiled_step_s"] * 1.05
    assert doc["diagnosis"]


def test_explain_needs_a_calibration_and_a_profiler(db, capsys):
    assert main(["explain", "-n", "fcn5", "--db", str(db)]) == 2
    assert "dlperf calibrate" in capsys.readouterr().err
    with Store(db) as store:
        made_up.calibrated(store)
    if framework_table.installed("keras"):  # a framework without a wired profiler: one line
        from dlperf.backends.base import Profiling, UnsupportedError, capability

        with pytest.raises(UnsupportedError, match="torch, tensorflow and jax"):
            capability(backends.load("keras"), Profiling)


def test_tensorflow_ops_are_read_from_the_traced_graph():
    """A fused MatMul is found behind the node it is named after; transposes, convolutions
    and their gradients get their shapes and FLOPs from the graph."""
    if not framework_table.installed("tensorflow"):
        pytest.skip("tensorflow not installed")
    import tensorflow as tf

    from dlperf.backends import tf_profile as tp

    @tf.function
    def step(x, w, img, k):
        y = tf.sigmoid(tf.nn.bias_add(tf.linalg.matmul(x, w), tf.zeros(6)))
        g = tf.linalg.matmul(x, y, transpose_a=True)  # (4 x 8) @ (8 x 6): a weight gradient
        d = tf.linalg.matmul(y, w, transpose_b=True)  # (8 x 6) @ (6 x 4): an input gradient
        c = tf.nn.conv2d(img, k, 1, "SAME")
        dk = tf.raw_ops.Conv2DBackpropFilter(input=img, filter_sizes=tf.shape(k),
                                             out_backprop=c, strides=[1, 1, 1, 1],
                                             padding="SAME")
        return y, g, d, dk

    graph = step.get_concrete_function(tf.zeros((8, 4)), tf.zeros((4, 6)),
                                       tf.zeros((2, 9, 9, 3)), tf.zeros((3, 3, 3, 5))).graph
    ops = {op.name: op for op in graph.get_operations()}
    sig = next(n for n, o in ops.items() if o.type == "Sigmoid")
    assert tp.describe(sig, "_MklNativeFusedMatMul", ops) == ("tf:matmul", ((8, 4), (4, 6)), None)
    # a transposed operand named by its layout, whose curve times it (``ops.op_time``)
    tmm = next(n for n, o in ops.items() if o.type == "MatMul" and o.get_attr("transpose_a"))
    assert tp.describe(tmm, "_MklMatMul", ops) == ("tf:matmul_tn", ((4, 8), (8, 6)), None)
    nmm = next(n for n, o in ops.items() if o.type == "MatMul" and o.get_attr("transpose_b"))
    assert tp.describe(nmm, "_MklMatMul", ops) == ("tf:matmul_nt", ((8, 6), (6, 4)), None)
    conv = next(n for n, o in ops.items() if o.type == "Conv2D")
    flops = 2.0 * (2 * 9 * 9 * 5) * 9 * 3
    assert tp.describe(conv, "_MklNativeConv2D", ops) == (
        "tf:conv2d", ((2, 3, 9, 9), (5, 3, 3, 3)), flops)
    dk = next(n for n, o in ops.items() if o.type == "Conv2DBackpropFilter")
    assert tp.describe(dk, "_MklNativeConv2DBackpropFilter", ops)[1:] == (
        ((2, 3, 9, 9), (5, 3, 3, 3)), flops)
    assert tp.describe("not/in/the/graph", "Relu", ops) == ("tf:Relu", (), None)


def test_explain_profiles_a_tensorflow_step(db, capsys):
    if not framework_table.installed("tensorflow"):
        pytest.skip("tensorflow not installed")
    with Store(db) as store:
        made_up.calibrated(store, frameworks=("tensorflow",), allreduce=False)
    assert main(["explain", "-n", "fcn5", "--size", "tiny", "-f", "tensorflow", "-b", "16",
                 "--steps", "2", "--db", str(db), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    gemms = [o for o in doc["ops"] if o["kind"] == "gemm"]
    assert gemms and all(o["name"].startswith("tf:matmul") and o["model_s"] > 0
                         for o in gemms)
    assert 0 < doc["ops_s"] <= doc["profiled_step_s"] * 1.05 and doc["diagnosis"]


def test_a_calibration_measured_again_replaces_the_earlier_one(db):
    """Another grid (another identity) measured later: only the newer samples are fitted."""
    with Store(db) as store:
        made_up.calibrated(store)
        (old,) = calibration.load(store)
        later = made_up.kernel_results()[0]
        o = later.spec.options
        small = o.model_copy(update={"parts": o.parts[:1] + tuple(
            p.model_copy(update={"shapes": p.shapes[:2]}) for p in o.parts[1:])})
        spec = later.spec.model_copy(update={"options": small})
        keep = {(p.op, tuple(s)) for p in small.parts for s in p.shapes}
        samples = tuple(s for s in later.outcome.samples if (s.op, s.shape) in keep)
        store.add(later.model_copy(update={"spec": spec, "outcome": KernelOutcome(
            samples=samples), "finished_at": later.finished_at + 10}))
        (new,) = calibration.load(store)
    # the machine's own ops (all-reduce, core sharing) are added to every entry
    local = [s for s in new.samples.items if s.op not in calibration.MACHINE_OPS]
    assert len(local) == len(samples) < len([s for s in old.samples.items
                                             if s.op not in calibration.MACHINE_OPS])


def test_validate_against_a_catalogue_entry_needs_no_calibration(db, capsys):
    """The measured steps predicted from a catalogue entry alone: how far to trust the
    model for hardware that was never calibrated, checked on hardware that was measured."""
    from dlperf.perfmodel import predict

    with Store(db) as store:
        store.add(result("fcn5", 1, 0.5))
        store.add(result("alexnet", 2, 1.5))
    assert main(["validate", "--catalogue", "xeon-8380", "--json", "--db", str(db)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mode"] == "catalogue" and len(doc["cases"]) == 2
    fcn5 = next(c for c in doc["cases"] if c["network"] == "fcn5")
    expected = predict("fcn5", device="xeon-8380", batch_size=64).time_s
    assert fcn5["predicted_s"] == pytest.approx(expected, rel=1e-12)
    assert fcn5["error"] == pytest.approx(expected / 0.5 - 1, rel=1e-12)
    assert main(["validate", "--catalogue", "no-such-gpu", "--db", str(db)]) == 2
    assert main(["validate", "--catalogue", "xeon-8380", "--machine", "zzz", "--db", str(db)]) == 2
    assert "--machine:" in capsys.readouterr().err


def test_a_gpu_kernel_is_queued_several_calls_per_synchronisation():
    """On a GPU each timed step queues GPU_CALLS calls and synchronises once; the sample
    is one call's share. On a CPU every call is timed on its own."""
    from dlperf.backends.base import Trainer
    from dlperf.kinds.calibrate import run as cw

    class Counting(Trainer):
        def __init__(self):
            self.calls = self.syncs = 0

        def step(self):
            self.calls += 1

        def sync(self):
            self.syncs += 1

    made = []

    class Fake:  # the one method of a backend that the kernels use
        def kernel(self, op, shape, device):
            made.append(Counting())
            return made[-1]

    o = KernelOptions(parts=(KernelPart(op="memory", shapes=((4096,),)),), min_time_s=0.001,
                      versions={}, revision=1)
    for device in ("gpu", "cpu"):
        made.clear()
        spec = RunSpec(kind="kernel", network="kernels", framework="torch", device=device,
                       threads=1, batch_size=1, options=o)
        (sample,) = cw._shapes(o, o.parts[0], spec, Fake(), lambda e: None, {})
        calls = cw.GPU_CALLS if device == "gpu" else 1
        assert made[0].calls == calls * made[0].syncs
        assert len(sample.times_s) <= made[0].syncs
    q = cw.Queued(Counting(), 4)
    assert q.per_call([0.8, 0.4]) == [0.2, 0.1]


def test_a_kernel_that_keeps_fewer_threads_busy_of_its_own_is_not_timed_again(monkeypatch):
    """A CPU shape that kept its threads less than BUSY busy is timed again, unless the
    machine's counters saw its CPUs undisturbed; a second attempt alike the first (the
    same CPU use and time: the kernel's own use of the threads, as XLA runs many ops on
    one) ends it; one unlike it goes on to ATTEMPTS, and the busiest attempt is kept."""
    from dlperf.backends.base import Trainer
    from dlperf.core.disturbance import Disturbance
    from dlperf.core.timing import Timing
    from dlperf.kinds.calibrate import run as cw

    class Idle(Trainer):
        def step(self):
            pass

        def sync(self):
            pass

    o = KernelOptions(parts=(KernelPart(op="memory", shapes=((4096,),)),), versions={},
                      revision=1)

    discards = []

    def attempts(utils, times, others=None):
        seq, made = iter(zip(utils, times, others or [None] * len(utils), strict=True)), []

        def fake(step, sync, m, clock=None, discard=None):
            u, t, other = next(seq)
            discards.append(discard)
            seen = None if other is None else Disturbance(other_share=other, steal_share=0.0,
                                                          cpus=2, seconds=0.5)
            made.append(Timing(steps_s=[t] * 3, cpu_s=3 * t * u, wall_s=3 * t,
                               disturbance=seen))
            return made[-1]

        monkeypatch.setattr(cw, "measure_window", fake)
        return made, cw._timed(cw.Queued(Idle(), 1), o, 2, "cpu")

    made, best = attempts([1.0, 1.05, 1.9], [0.010, 0.0102, 0.008])
    assert len(made) == 2 and best is made[1]  # alike: no third attempt
    assert discards == [None, 0]  # the second attempt's kernel is warm: no cold call
    made, best = attempts([1.0, 1.5, 1.2], [0.010, 0.008, 0.009])
    assert len(made) == 3 and best is made[1]  # unlike: the busiest of three
    made, _ = attempts([1.0, 1.05, 1.0], [0.010, 0.013, 0.010])
    assert len(made) == 3  # the same CPU use but another time: a disturbance
    made, _ = attempts([1.8, 1.0, 1.0], [0.010, 0.010, 0.010])
    assert len(made) == 1  # busy enough at once
    # the machine's counters saw the CPUs the kernel's alone: its idle thread is its own
    made, _ = attempts([1.0, 1.9, 1.9], [0.010, 0.008, 0.008], [0.02, 0.0, 0.0])
    assert len(made) == 1
    # ... or saw another process take them: timed again
    made, best = attempts([1.0, 1.9, 1.9], [0.010, 0.008, 0.008], [0.4, 0.0, 0.0])
    assert len(made) == 2 and best is made[1]


# ----------------------------------------------------------------------------- precisions
def test_a_mixed_precision_calibration_predicts_steps_at_its_precision(db, capsys):
    """A bf16 calibration is its own (framework, threads, precision). On the made-up
    machine, whose bandwidth is the same at every precision, a layer's memory passes
    move half the bytes in bf16 and take half the time; products are timed by their FLOPs
    (the same here). A precision never calibrated is said so."""
    with Store(db) as store:
        made_up.calibrated(store)
        made_up.calibrated(store, precision="bf16", allreduce=False)
        cal = calibration.local_calibration(store)
    assert sorted(f.label for f in cal.fits) == ["torch x1", "torch x1 bf16"]
    spec = RunSpec(network="alexnet", framework="torch", threads=1, batch_size=16)
    fp32 = predict_for_spec(spec, cal)
    bf16 = predict_for_spec(spec.model_copy(update={"precision": "bf16"}), cal)
    assert fp32 is not None and bf16 is not None and bf16.precision == "bf16"
    relu = {p: next(layer for layer in x.layers if layer.name == "relu1")
            for p, x in (("fp32", fp32), ("bf16", bf16))}
    assert relu["bf16"].time_s == pytest.approx(relu["fp32"].time_s / 2, rel=0.05)
    conv = {p: next(layer for layer in x.layers if layer.name == "conv3")
            for p, x in (("fp32", fp32), ("bf16", bf16))}
    assert conv["bf16"].time_s == pytest.approx(conv["fp32"].time_s, rel=0.05)
    assert why_not(spec.model_copy(update={"precision": "fp16"}), cal) == (
        "torch at 1 thread(s) at fp16 is not calibrated")
    # dlperf predict on this machine takes the bf16 calibration (not refused as fp32-only)
    assert main(["predict", "-n", "alexnet", "--device", "cpu", "--threads", "1", "-b", "16",
                 "--precision", "bf16", "--db", str(db), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["precision"] == "bf16" and doc["time_s"] == pytest.approx(bf16.time_s)
    assert main(["predict", "-n", "alexnet", "--device", "cpu", "--precision", "bf16",
                 "-s", "sync", "--gpus", "2", "--db", str(db)]) == 2
    assert "parallel strategies run at fp32" in capsys.readouterr().err
    with pytest.raises(Exception, match="--precision fp16"):
        cal.model("torch", 1, precision="fp16")


def test_explain_profiles_a_mixed_precision_step_against_its_precisions_calibration(db, capsys):
    """explain --precision bf16 profiles the step under autocast and reads the bf16
    calibration; the profiler's dtypes give the ops' bytes: the products' operands are
    half, and some memory-bound op moves 2-byte elements. Without that calibration: one
    line, exit 2."""
    with Store(db) as store:
        made_up.calibrated(store)
    assert main(["explain", "-n", "fcn5", "--size", "tiny", "-b", "8", "--steps", "1",
                 "--precision", "bf16", "--db", str(db)]) == 2
    assert "--precision bf16" in capsys.readouterr().err
    assert main(["explain", "-n", "fcn5", "-f", "jax", "--precision", "fp16",
                 "--db", str(db)]) == 2  # no framework but PyTorch calibrates mixed precision
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "PyTorch only" in err[0]
    with Store(db) as store:
        made_up.calibrated(store, precision="bf16", allreduce=False)
    assert main(["explain", "-n", "fcn5", "--size", "tiny", "-b", "8", "--steps", "1",
                 "--precision", "bf16", "--db", str(db), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "bf16" in doc["label"] and doc["predicted_s"] > 0
    with Store(db) as store:
        (run,) = [r for r in store.results(kind="profile") if r.spec.precision == "bf16"]
    gemms = [o for o in run.outcome.ops if o.name in ("aten::addmm", "aten::mm")]
    assert gemms and all(2 in (o.element_bytes or ()) for o in gemms)
    memory = {o["name"]: o for o in doc["ops"] if o["kind"] == "memory"}
    halves = [o for o in run.outcome.ops if o.name in memory and o.element_bytes
              and set(b for b in o.element_bytes if b) == {2}]
    assert halves and all(memory[o.name]["bytes"] > 0 for o in halves)


def test_kernels_timed_on_the_devices_clock_keep_their_whole_time():
    """A sample from the GPU's own clock holds the kernel's work alone: the fits take no
    call or launch off it, as they do off a wall-clock sample."""
    d = fit.fit_dispatch(_samples("dispatch"))
    wall = _samples("memory")
    device = [s.model_copy(update={"clock": "device", "median_s": s.median_s - d.call_s
                                    - d.op_s}) for s in wall]
    a, b = fit.fit_memory(wall, d), fit.fit_memory(device, d)
    assert b.seconds == pytest.approx(a.seconds, rel=1e-6)
    s = device[-1]
    assert fit.net_time(s, d) == s.median_s and fit.net_time(wall[-1], d) < wall[-1].median_s


def test_mixed_precision_kernels_run_on_half_operands_under_autocast():
    """PyTorch's kernels at bf16: the products, passes, loss and batch norm on bf16
    operands (autocast computes the loss in fp32), the update on fp32 weights; each
    sample's bytes at the precision's element (the update's and the loss's at fp32)."""
    import torch

    from dlperf.backends.torch_kernels import kernel

    gemm = kernel("gemm", (8, 8, 8), "cpu", torch.bfloat16)
    gemm.step()
    assert gemm.out.dtype == torch.bfloat16
    update = kernel("update", (64,), "cpu", torch.bfloat16)
    update.step()
    assert update.x.dtype == torch.float32
    bn = kernel("bn", (2, 4, 4), "cpu", torch.bfloat16)
    bn.step()
    assert bn.x.dtype == torch.bfloat16 and bn.bn.weight.dtype == torch.float32
    xent = kernel("xent", (8, 16), "cpu", torch.bfloat16)
    xent.step()
    assert xent.x.dtype == torch.bfloat16 and xent.out.dtype == torch.bfloat16
    assert k.nbytes("xent", (8, 16), k.element_bytes("bf16")) == 2 * 4 * 8 * 16
    assert k.nbytes("memory", (64,), k.element_bytes("bf16")) == 2 * 2 * 64
    assert k.nbytes("update", (64,), k.element_bytes("bf16")) == 2 * 4 * 64
    assert k.element_bytes("tf32") == k.element_bytes("fp32") == 4


@pytest.mark.parametrize("shape", [(2, 3, 8, 9, 3, 2), (2, 4, 8, 7, 1, 1), (2, 3, 4, 23, 11, 4)])
def test_a_convolutions_output_gradient_has_its_forwards_output_shape(shape):
    """PyTorch's convolution kernels make the output's gradient from the shape arithmetic
    (``kernels.conv_out``), not by running the forward: the shape is the forward's, and
    both gradients run on it."""
    import torch
    import torch.nn.functional as F

    from dlperf.backends.torch_kernels import kernel

    bwd = kernel("conv_bwd", shape, "cpu")
    with torch.no_grad():
        forward = F.conv2d(bwd.x, bwd.w, stride=bwd.stride, padding=bwd.pad)
    assert bwd.g.shape == forward.shape
    bwd.step()
    bwd.sync()


@pytest.mark.parametrize("args, message", [
    (["--precision", "tf32"], "tf32 is a GPU format"),
    (["--precision", "bf16", "--frameworks", "torch,tensorflow"], "PyTorch only"),
])
def test_calibrate_refuses_a_precision_its_kernels_cannot_run_at(args, message, capsys):
    assert main(["calibrate", "--dry-run", "--threads", "1", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_calibrate_plans_a_precision_without_the_all_reduce():
    (spec,) = calibration.specs(["torch"], [1], precision="bf16")
    assert spec.precision == "bf16" and spec.network == "kernels"


def test_reference_curves_are_written_from_a_gpu_calibration(db, tmp_path):
    """``python -m dlperf.kinds.calibrate.shipped_fits`` reads a PyTorch GPU calibration at each
    precision from a store and writes the reference file that catalogue GPUs are scaled
    from, with its source."""
    from dlperf.kinds.calibrate.shipped_fits import main as write
    from dlperf.perfmodel.scaled import ReferenceFits

    with Store(db) as store:
        for p in ("fp32", "bf16"):
            made_up.calibrated(store, precision=p, device="gpu", allreduce=False)
    out = tmp_path / "ref.json"
    assert write(["--db", str(db), "--entry", "h100-sxm", "--out", str(out)]) == 0
    ref = ReferenceFits.model_validate_json(out.read_text())
    assert ref.device == "h100-sxm" and {f.precision for f in ref.fits} == {"fp32", "bf16"}
    assert all(f.device == "gpu" for f in ref.fits) and "dlperf calibrate" in ref.source
    with pytest.raises(SystemExit) as e:
        write(["--db", str(db), "--entry", "nope", "--out", str(out)])
    assert e.value.code == 2


def test_a_jax_step_pays_the_new_pages_of_its_temporaries_block(db, monkeypatch):
    """XLA:CPU allocates a step's temporaries as one block per call (``local.FRESH_BLOCK``):
    a JAX step adds its temporaries' bytes (the memory model's activations, live gradient
    and transient) at what a fresh result costs over an in-place one; a PyTorch step, on
    the same machine's curves, does not. On the made-up machine a
    fresh result moves at DRAM_BPS and an in-place update at UPDATE_BPS, both reading and
    writing each element: a byte of result costs 2 / DRAM_BPS - 2 / UPDATE_BPS more."""
    from dlperf.perfmodel import local
    from dlperf.perfmodel.memory import largest_layer_bytes, step_memory

    with Store(db) as store:
        made_up.calibrated(store, frameworks=("torch", "jax"))
        cal = calibration.local_calibration(store)
    per_byte = 2 / made_up.DRAM_BPS - 2 / made_up.UPDATE_BPS
    jax_fit, torch_fit = cal.find("jax", 1), cal.find("torch", 1)
    assert local.fresh_byte_s(jax_fit) == pytest.approx(per_byte, rel=0.02)
    _, _, cfg = workloads.resolve("alexnet", None)
    # the block: what the memory model counts of JAX's step beyond its weights and
    # runtime, its one live weight gradient (the largest layer's) among them
    m = step_memory(cfg.layers(), 16, "fp32", framework="jax")
    assert m.gradients == largest_layer_bytes(cfg.layers()) > 0
    block = (m.activations + m.gradients + m.transient) * per_byte
    assert local.fresh_block_s(cfg.layers(), 16, jax_fit) == pytest.approx(block, rel=0.02)
    assert local.fresh_block_s(cfg.layers(), 16, torch_fit) == 0.0
    p = {fw: predict_for_spec(RunSpec(network="alexnet", framework=fw, threads=1,
                                      batch_size=16), cal) for fw in ("torch", "jax")}
    # JAX's step is its kernels plus the block: without the block's term, shorter by it
    monkeypatch.setattr(local, "FRESH_BLOCK", ())
    kernels_only = predict_for_spec(RunSpec(network="alexnet", framework="jax", threads=1,
                                            batch_size=16), cal)
    assert p["jax"].breakdown.memory_s - kernels_only.breakdown.memory_s == pytest.approx(
        block, rel=0.02)
    assert p["jax"].time_s - kernels_only.time_s == pytest.approx(block, rel=0.02)
    assert any("temporaries afresh" in n for n in p["jax"].notes)
    assert not any("temporaries afresh" in n for n in p["torch"].notes)


def test_a_catalogue_gpu_runs_on_each_frameworks_own_reference_curves(db, tmp_path,
                                                                      monkeypatch, capsys):
    """The reference file holds every framework the GPU calibrated (here JAX's kernels made
    1.5 times as slow as PyTorch's): a catalogue GPU's prediction uses the named
    framework's curves and says whose; a framework without curves takes PyTorch's and
    says so."""
    from dlperf.kinds.calibrate.shipped_fits import main as write

    with Store(db) as store:
        made_up.calibrated(store, device="gpu", allreduce=False)
        for r in made_up.kernel_results(frameworks=("jax",), device="gpu", allreduce=False):
            slow = tuple(x.model_copy(update={"median_s": x.median_s * 1.5,
                                              "times_s": tuple(t * 1.5 for t in x.times_s)})
                         for x in r.outcome.samples)
            store.add(r.model_copy(update={"outcome": r.outcome.model_copy(
                update={"samples": slow})}))
    out = tmp_path / "ref.json"
    assert write(["--db", str(db), "--entry", "h100-sxm", "--out", str(out)]) == 0
    assert "--frameworks torch,jax" in out.read_text()
    monkeypatch.setenv("DLPERF_REFERENCE_FITS", str(out))
    got = {}
    for fw in ("torch", "jax", "tensorflow"):
        capsys.readouterr()
        assert main(["predict", "-n", "fcn5", "-f", fw, "-d", "a100-80gb", "--json"]) == 0
        got[fw] = json.loads(capsys.readouterr().out)
    assert got["torch"]["curves"] == "torch" and got["jax"]["curves"] == "jax"
    assert got["jax"]["time_s"] > 1.2 * got["torch"]["time_s"]
    assert got["tensorflow"]["curves"] == "torch"
    assert got["tensorflow"]["time_s"] == pytest.approx(got["torch"]["time_s"])
    assert any("no tensorflow curves" in n for n in got["tensorflow"]["notes"])


def test_the_prediction_plot_marks_each_configuration_and_labels_plain_seconds(monkeypatch,
                                                                               tmp_path):
    from matplotlib import ticker

    from dlperf.kinds.calibrate import plots

    kept = {}
    monkeypatch.setattr(plots, "save", lambda fig, path: kept.setdefault("fig", fig) and path)
    pts = [plots.Point(0.30, 0.32, "torch", "fcn5", 1),
           plots.Point(0.40, 0.25, "jax", "alexnet", 2),  # 1.6x too fast: labelled
           plots.Point(0.50, 0.45, "tensorflow", "lstm32", 2)]
    plots.predicted_vs_measured(pts, tmp_path / "p.png")
    ax = kept["fig"].axes[0]
    legend = {t.get_text() for t in ax.get_legend().get_texts()}
    assert {"torch", "jax", "tensorflow", "fcn5", "alexnet", "lstm32"} <= legend
    assert [t.get_text() for t in ax.texts] == ["alexnet jax x2"]
    assert isinstance(ax.xaxis.get_minor_formatter(), ticker.NullFormatter)
    labels = [ax.xaxis.get_major_formatter()(v, 0) for v in (0.2, 0.5, 1.0)]
    assert labels == ["0.2", "0.5", "1"]


def test_a_kernel_timed_beside_a_busy_process_records_it_and_the_calibration_says_so(
        db, capsys):
    """A busy loop on the worker's CPU while its kernels are timed shows in the outcome
    (``KernelOutcome.other_cpu_share``); a calibration holding such an op says it is
    disturbed wherever its predictions are printed, with the command that fixes it."""
    import os
    import subprocess
    import sys

    from dlperf.cli.calibrate import quality_line
    from dlperf.core.disturbance import DISTURBED
    from dlperf.engine.worker import execute

    cpu, old = min(os.sched_getaffinity(0)), os.sched_getaffinity(0)
    # shapes that take long enough together for the counters' 10 ms ticks (about 1 s)
    spec = RunSpec(kind="kernel", network="kernels", framework="torch", batch_size=1,
                   options=KernelOptions(parts=(KernelPart(op="gemm", shapes=tuple(
                       (m, 256, 256) for m in (256, 384, 512, 640))),), min_time_s=0.15,
                       revision=k.REVISION))
    os.sched_setaffinity(0, {cpu})
    hog = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, "
                            f"{{{cpu}}})\nwhile True: pass"])
    try:
        r = execute(spec)
    finally:
        hog.kill()
        hog.wait()
        os.sched_setaffinity(0, old)
    assert r.ok and r.outcome.other_cpu_share["gemm"] > DISTURBED
    # a stored calibration with a disturbed op: the fit, predict, the table and calibrate
    with Store(db) as store:
        for res in made_up.kernel_results(threads=(1,), allreduce=False):
            share = {p.op: (0.4 if p.op == "gemm" else 0.01) for p in res.spec.options.parts}
            store.add(res.model_copy(update={"outcome": res.outcome.model_copy(
                update={"other_cpu_share": share})}))
        fit_ = calibration.local_calibration(store).find("torch", 1)
        store.add(result("fcn5", 1, 0.05))
    assert fit_.disturbed == {"gemm": 0.4}
    line = quality_line([fit_])
    assert "DISTURBED" in line and "gemm 40%" in line and "--force" in line
    assert "undisturbed" in quality_line([fit_.model_copy(update={
        "other_cpu_share": {"gemm": 0.02}})])
    assert main(["predict", "-n", "fcn5", "--device", "cpu", "--db", str(db)]) == 0
    assert "DISTURBED" in capsys.readouterr().out
    assert main(["report", "--db", str(db), "--out", str(db.parent / "rep")]) == 0
    md = (db.parent / "rep" / "report.md").read_text()
    assert "predicted from a disturbed calibration: torch x1" in md


def test_a_busy_sample_whose_calls_spread_was_timed_while_the_machine_moved():
    """``steadiness.unsteady``: a sample whose median call took more than UNSTEADY times
    its fastest tenth, its threads busy; not one that kept a thread idle (XLA's small ops
    spread of their own accord), nor a steady one, nor one of a single call. A window of
    two calls that never agreed (a page-fault spell under a long memory pass) is."""
    from dlperf.perfmodel import steadiness

    def at(times, cpu):
        return k.KernelSample(op="memory", shape=(4096,), median_s=sorted(times)[len(times) // 2],
                              times_s=tuple(times), cpu_util=cpu)

    spread = [1.0] * 3 + [1.5] * 7
    assert steadiness.spread(at(spread, 1.0)) == pytest.approx(1.5)
    assert steadiness.unsteady(at(spread, 1.0), threads=1)
    assert not steadiness.unsteady(at(spread, 1.0), threads=2)  # a thread idle half the time
    assert not steadiness.unsteady(at(spread, None), threads=1)  # not measured
    assert not steadiness.unsteady(at([1.0] * 9 + [1.2], 1.0), threads=1)
    assert steadiness.spread(at([1.0], 1.0)) == 1.0
    assert steadiness.unsteady(at([0.179, 1.237], 0.94), threads=1)
    assert not steadiness.unsteady(at([1.0, 1.05], 1.0), threads=1)  # a settled window
    assert not steadiness.unsteady(at([0.179, 1.237], 0.6), threads=1)  # a thread idle
    shares = steadiness.unsteady_share([at(spread, 1.0)] * 2 + [at([1.0] * 5, 1.0)] * 2, 1)
    assert shares == {"memory": 0.5}
    assert steadiness.unsteady_share([at(spread, 1.0)] * 3, 1) == {}  # too few to tell


def test_an_unsteady_sample_is_timed_again_at_the_end_and_the_steadier_kept(monkeypatch):
    """At the end of a kernel run each unsteady sample is timed once more and replaced
    only by a steadier timing (its spread, never its time); a resumed one and a GPU's are
    kept as they were. The outcome counts them."""
    from dlperf.backends.base import Trainer
    from dlperf.core.timing import Timing
    from dlperf.engine.worker import execute
    from dlperf.kinds.calibrate import run as cw
    from dlperf.perfmodel import steadiness

    class Idle(Trainer):
        def step(self):
            pass

        def sync(self):
            pass

    class Fake:
        def kernel(self, op, shape, device):
            return Idle()

    def sample(op, times):
        return k.KernelSample(op=op, shape=(4096,), median_s=sorted(times)[len(times) // 2],
                              times_s=tuple(times), cpu_util=1.0)

    spread = [1.0] * 3 + [1.5] * 7
    again = iter([[1.6] * 10, [0.9] * 3 + [1.8] * 7])  # steadier (though slower); more spread
    monkeypatch.setattr(cw, "_timed", lambda *a: Timing(steps_s=next(again), cpu_s=1.0,
                                                        wall_s=1.0))
    o = KernelOptions(parts=(KernelPart(op="memory", shapes=((4096,),)),), versions={},
                      revision=1)
    spec = RunSpec(kind="kernel", network="kernels", framework="torch", batch_size=1,
                   threads=1, options=o)
    steady, memory, update = sample("gemm", [1.0] * 10), sample("memory", spread), sample(
        "update", spread)
    emitted = []
    got, retimed, replaced = cw._steadier(o, spec, Fake(), emitted.append,
                                          [steady, memory, update], {("update", (4096,))})
    assert (retimed, replaced) == (1, 1) and got[0] is steady and got[2] is update
    assert got[1].median_s == 1.6 and [e["op"] for e in emitted] == ["memory"]
    got, retimed, replaced = cw._steadier(o, spec, Fake(), emitted.append, [memory], set())
    assert (retimed, replaced) == (1, 0) and got == [memory]
    # steadier, but with its thread idle half the time (another process took it): kept out
    monkeypatch.setattr(cw, "_timed", lambda *a: Timing(steps_s=[1.6] * 10, cpu_s=0.5,
                                                        wall_s=1.0))
    assert cw._steadier(o, spec, Fake(), emitted.append, [memory], set())[0] == [memory]
    gpu = spec.model_copy(update={"device": "gpu"})
    assert cw._steadier(o, gpu, Fake(), emitted.append, [memory], set()) == ([memory], 0, 0)
    # a real kernel run: every product taken as unsteady is timed again, and counted
    monkeypatch.undo()
    monkeypatch.setattr(steadiness, "unsteady", lambda s, threads: s.op == "gemm")
    run = spec.model_copy(update={"options": KernelOptions(parts=(
        KernelPart(op="gemm", shapes=((64, 64, 64), (128, 64, 64))),
        KernelPart(op="memory", shapes=((4096,),))), min_time_s=0.01, revision=k.REVISION)})
    r = execute(run)
    assert r.ok and r.outcome.retimed == 2 and 0 <= r.outcome.steadier <= 2
    assert len(r.outcome.samples) == 3


def test_a_calibration_timed_while_the_machine_moved_says_so_where_it_predicts(db, capsys):
    """A stored calibration whose memory passes spread with their threads busy (timed
    twice, still unsteady) is UNSTEADY: its quality line names the op and the share, and
    its predictions say so with the command that fixes it. Read off the samples, so a
    calibration stored before dlperf looked says it too."""
    from dlperf.cli.calibrate import quality_line

    with Store(db) as store:
        for res in made_up.kernel_results(threads=(1,), allreduce=False):
            moved = tuple(s.model_copy(update={
                "cpu_util": 1.0, "times_s": (s.median_s / 1.5,) * 3 + (s.median_s,) * 7})
                if s.op == "memory" else s for s in res.outcome.samples)
            store.add(res.model_copy(update={"outcome": res.outcome.model_copy(
                update={"samples": moved, "other_cpu_share": {"memory": 0.01},
                        "retimed": 15, "steadier": 4})}))
        fit_ = calibration.local_calibration(store).find("torch", 1)
        store.add(result("fcn5", 1, 0.05))
    assert fit_.unsteady_ops == {"memory": 1.0} and fit_.doubtful and not fit_.disturbed
    assert fit_.retimed == (15, 4)
    line = quality_line([fit_])
    assert "UNSTEADY" in line and "memory 100%" in line and "--force" in line
    steady = fit_.model_copy(update={"unsteady": {"memory": 0.1}, "retimed": (3, 2)})
    line = quality_line([steady, steady.model_copy(update={"threads": 2, "retimed": (1, 1)})])
    assert "undisturbed" in line and "4 samples timed again" in line and "3 replaced" in line
    assert main(["predict", "-n", "fcn5", "--device", "cpu", "--db", str(db)]) == 0
    assert "UNSTEADY" in capsys.readouterr().out


def test_an_uncalibrated_machine_names_the_calibration_of_its_device():
    from dlperf.core.errors import UsageError
    from dlperf.perfmodel.machine_fits import MachineFits

    empty = MachineFits.of([], 16.0, 2)
    with pytest.raises(UsageError, match="2 cores"):
        empty.model("torch", 1)
    with pytest.raises(UsageError) as e:
        empty.model("torch", 1, "gpu")
    assert "dlperf calibrate --device gpu' first" in str(e.value) and "cores" not in str(e.value)


def test_the_cost_of_sharing_a_core_is_calibrated_with_the_all_reduce(db):
    """The 2-process all-reduce run also times a step alone on a CPU and two at once on
    it; the fit takes their ratio over processor sharing's, and the parallel model uses it
    instead of the constant measured on another machine (which a calibration without it
    still falls back to, saying so)."""
    from dlperf.core import environment
    from dlperf.perfmodel import predict, sharing

    specs = calibration.specs(["torch"], [1])
    (two,) = [s for s in specs if s.network == "allreduce" and s.options.world == 2]
    collectives = ["allreduce", "allgather", "reducescatter", "broadcast"]
    assert [p.op for p in two.options.parts] == [*collectives, "share"]
    assert all([p.op for p in s.options.parts] == collectives for s in specs
               if s.network == "allreduce" and s.options.world != 2)
    with Store(db) as store:
        made_up.calibrated(store)
        cal = calibration.local_calibration(store)
    f = cal.find("torch", 1)
    assert f.sharing_cost == pytest.approx(made_up.SHARE_COST)
    workers = 2 * environment.physical_cores()  # two to a core, whatever the machine
    m = cal.model("torch", 1, "cpu", workers=workers)
    kw = dict(size="tiny", device=m.device, strategy="sync", devices=workers,
              batch_size=8 * workers, link=m.link)
    p = predict("fcn5", efficiencies=m.efficiencies, **kw)
    assert f"x{made_up.SHARE_COST:.3g} slower" in " ".join(p.notes)
    # a calibration from before the op: the constant, and a note naming the command
    stale = m.efficiencies.model_copy(update={"kernels": {
        k: v.model_copy(update={"sharing_cost": None, "sharing": ()})
        for k, v in m.efficiencies.kernels.items()}})
    p = predict("fcn5", efficiencies=stale, **kw)
    assert any(f"x{sharing.CORE_SHARING_COST:g} beyond processor sharing" in n
               and "dlperf calibrate" in n for n in p.notes)


def test_the_collectives_processes_measure_a_parallel_workers_runtime():
    """A parallel worker holds more than the framework alone: gloo's process group, and a
    DistributedDataParallel's reducer and what its first step loads. The calibration's
    collectives measure both in their own processes, once their tensors are freed."""
    from dlperf.backends.torch_backend import TorchBackend

    times, runtime = TorchBackend().allreduce([4096, 65536], 2, 2, 1)
    assert len(times) == 2 and all(len(t) == 2 and min(t) > 0 for t in times)
    assert runtime is not None
    # torch itself is over 100 MB resident; a backward loads more, the DDP step more again
    assert 100e6 < runtime.gloo_bytes <= runtime.backward_bytes <= runtime.ddp_bytes < 2e9
    # a parameter-server worker's RPC agent, in processes of its own: more again
    assert runtime.rpc_bytes is not None and runtime.ddp_rpc_bytes is not None
    assert runtime.gloo_bytes < runtime.rpc_bytes <= runtime.ddp_rpc_bytes < 2e9


def test_a_parallel_worker_is_predicted_with_the_runtime_of_its_strategy(db):
    """Stored with the collectives' run, the workers' runtimes become the baseline of a
    parallel prediction: DDP's for sync, mixed and fsdp, gloo's alone for async and the
    pipeline; a step keeps its framework's, and a calibration without them falls back."""
    from dlperf.kinds.calibrate.prediction import predict_for_spec
    from dlperf.kinds.parallel.make import make_spec
    from dlperf.perfmodel.machine_fits import worker_baseline

    gloo, ddp = 250e6, 330e6
    with Store(db) as store:
        made_up.calibrated(store)
        before = calibration.local_calibration(store)
        (row,) = [r for r in store.results(kind="kernel")
                  if r.spec.network == "allreduce" and r.spec.options.world == 2][-1:]
        store.add(row.model_copy(update={
            "outcome": row.outcome.model_copy(update={"gloo_runtime_bytes": int(gloo),
                                                      "ddp_runtime_bytes": int(ddp)}),
            "finished_at": (row.finished_at or 0) + 1}))
        assert calibration.worker_runtimes(store) == {("torch", "cpu", "gloo"): gloo,
                                                      ("torch", "cpu", "ddp"): ddp}
        cal = calibration.local_calibration(store)
    base = cal.baselines.get(("torch", "cpu"))  # the made-up kernels' (none recorded)
    assert base not in (gloo, ddp)
    for strategy, want in (("sync", ddp), ("mixed", ddp), ("fsdp", ddp), ("async", gloo),
                           ("pipeline", gloo), (None, base), ("single", base)):
        assert worker_baseline("torch", "cpu", strategy, cal.baselines, cal.workers) == want
        if strategy not in (None, "single"):
            spec = make_spec("fcn5", size="tiny", strategy=strategy, workers=2,
                             batch_size=8)
            got = predict_for_spec(spec, cal).memory.baseline
            assert got == want, strategy
            assert predict_for_spec(spec, before).memory.baseline == (base or 0.0), strategy
    assert worker_baseline("torch", "cpu", "sync", cal.baselines, {}) == base


def test_the_kernel_outcome_keeps_the_largest_runtime_its_processes_measured():
    from dlperf.backends.base import WorkerRuntime
    from dlperf.kinds.calibrate.run import _runtime_fields
    from dlperf.perfmodel.kernels import KernelOutcome

    got = _runtime_fields([WorkerRuntime(1, 3, rpc_bytes=5), WorkerRuntime(2, 2,
                                                                         backward_bytes=7)])
    assert got == {"gloo_runtime_bytes": 2, "backward_runtime_bytes": 7,
                   "ddp_runtime_bytes": 3, "rpc_runtime_bytes": 5,
                   "ddp_rpc_runtime_bytes": None}
    assert set(got) <= set(KernelOutcome.model_fields)
    assert all(v is None for v in _runtime_fields([]).values())


def test_a_failed_rpc_rank_gives_no_runtime_at_once():
    """A spawned rank that fails (here its target cannot take the rank's arguments)
    leaves its peers waiting for it: the calibration gets no RPC runtime, in seconds, not
    after the ranks' time-out, and no rank outlives the call."""
    import multiprocessing
    import os
    import time

    from dlperf.backends import torch_rpc_runtime

    t = time.monotonic()
    assert torch_rpc_runtime.rpc_runtimes(2, target=os.abort) is None
    assert time.monotonic() - t < 30
    assert not multiprocessing.active_children()


def test_async_and_mixed_workers_take_the_rpc_runtime_of_the_nearest_world(db):
    """The collectives' runs at 2 and 4 processes each store the RPC agent's runtime
    (``rpc_runtime_bytes``, and with DDP's step ``ddp_rpc_runtime_bytes``): an async
    worker's baseline is the one measured among as many processes as it has peers, the
    nearest world otherwise; a mixed worker's the DDP one; a pipeline's stage and a
    hybrid's worker take gloo's with a backward (``backward_runtime_bytes``); sync DDP's."""
    from dlperf.perfmodel.machine_fits import worker_baseline

    with Store(db) as store:
        made_up.calibrated(store)
        for row in [r for r in store.results(kind="kernel") if r.spec.network == "allreduce"]:
            w = row.spec.options.world
            store.add(row.model_copy(update={
                "outcome": row.outcome.model_copy(update={
                    "gloo_runtime_bytes": 250_000_000, "ddp_runtime_bytes": 330_000_000,
                    "backward_runtime_bytes": 300_000_000,
                    "rpc_runtime_bytes": 270_000_000 + w * 1_000_000,
                    "ddp_rpc_runtime_bytes": 350_000_000 + w * 1_000_000}),
                "finished_at": (row.finished_at or 0) + 1}))
        workers = calibration.worker_runtimes(store)
    assert workers[("torch", "cpu", "rpc@2")] == 272e6
    assert workers[("torch", "cpu", "ddp+rpc@4")] == 354e6
    for strategy, world, want in (("async", 2, 272e6), ("async", 4, 274e6),
                                  ("async", 3, 274e6), ("async", 8, 274e6),
                                  ("mixed", 2, 352e6), ("sync", 4, 330e6),
                                  ("pipeline", 4, 300e6), ("hybrid", 2, 300e6)):
        assert worker_baseline("torch", "cpu", strategy, {}, workers, world=world) == want


def test_a_step_is_predicted_with_its_frameworks_runtime_when_training_that_network(db):
    """The 1-thread kernel worker records per network the framework's runtime when it
    trains (``kinds.calibrate.runtime``); a step's memory takes its network's, a network
    not measured the least any took, and a calibration without them the libraries'."""
    from dlperf.kinds.calibrate.prediction import predict_for_spec
    from dlperf.kinds.calibrate.validate import predict_here
    from dlperf.perfmodel.machine_fits import runtime_baseline

    fcn, alex = 300e6, 340e6
    libraries_alone = "the baseline is torch's libraries alone"
    with Store(db) as store:
        made_up.calibrated(store)
        before = calibration.local_calibration(store)
        row = max((r for r in store.results(kind="kernel") if r.spec.network == "kernels"
                   and r.spec.framework == "torch" and r.spec.threads == 1),
                  key=lambda r: r.finished_at or 0)
        for later, trained in ((1, {}), (2, {"fcn5": int(fcn), "alexnet": int(alex)})):
            store.add(row.model_copy(update={
                "outcome": row.outcome.model_copy(update={
                    "baseline_rss_bytes": 230_000_000, "train_runtime_bytes": trained}),
                "finished_at": (row.finished_at or 0) + later}))
            if not trained:  # the libraries alone: predict says so, and how to measure it
                notes = predict_here(store, "fcn5", size="tiny", batch_size=4)[0].notes
                assert any(libraries_alone in n and "--force" in n for n in notes)
        runtimes = calibration.runtime_baselines(store)
        cal = calibration.local_calibration(store)
        p = predict_here(store, "fcn5", size="tiny", batch_size=4)[0]
    assert not any(libraries_alone in n for n in p.notes) and p.memory.baseline == fcn
    assert runtimes[("torch", "cpu", "fcn5")] == fcn
    assert runtimes[("torch", "cpu", "alexnet")] == alex
    for network, want in (("fcn5", fcn), ("alexnet", alex), ("resnet50", fcn), (None, fcn)):
        assert runtime_baseline("torch", "cpu", network, cal.baselines) == want
    spec = RunSpec(network="alexnet", size="tiny", framework="torch", threads=1,
                   batch_size=4)
    assert predict_for_spec(spec, cal).memory.baseline == alex
    # without them: the libraries' alone (none recorded by the made-up kernels)
    assert predict_for_spec(spec, before).memory.baseline == \
        (before.baselines.get(("torch", "cpu")) or 0.0)
    assert runtime_baseline("torch", "cpu", "alexnet", {("torch", "cpu"): 2e8}) == 2e8
    assert runtime_baseline("jax", "cpu", "alexnet", cal.baselines) is None


def test_the_kernel_worker_measures_the_runtime_of_training_each_network():
    """Trained for two steps at its tiny size in this process, a network's runtime is the
    peak resident memory less the model's tensors of that step: above the framework's
    libraries, and measured by the one-thread CPU fp32 grid's worker alone."""
    from dlperf.backends.torch_backend import TorchBackend
    from dlperf.core import environment
    from dlperf.kinds.calibrate import runtime
    from dlperf.perfmodel.kernels import KernelOptions, KernelPart

    o = KernelOptions(parts=(KernelPart(op="memory", shapes=((1024,),)),),
                      scope=("fcn5@64", "fcn5@128", "alexnet@16"))
    assert runtime.networks(o) == ("fcn5", "alexnet")
    assert runtime.networks(o.model_copy(update={"scope": ()})) == runtime.GRID_NETWORKS
    failures: dict[str, str] = {}
    backend = TorchBackend()
    backend.set_threads(1)
    peaks, runtimes = runtime.train_runtimes(o.model_copy(update={"scope": ("fcn5@64",)}),
                                             backend, failures)
    assert not failures and set(peaks) == set(runtimes) == {"fcn5"}
    assert 100e6 < runtimes["fcn5"] < peaks["fcn5"] <= environment.peak_resident_bytes()
    spec = RunSpec(kind="kernel", network="kernels", framework="torch", threads=1,
                   batch_size=1, options=o)
    assert runtime.measures(spec)
    for other in ({"threads": 2}, {"device": "gpu"}, {"network": "allreduce"}):
        assert not runtime.measures(spec.model_copy(update=other))


def test_core_sharing_keeps_the_median_of_its_rounds(monkeypatch):
    """Rounds of two processes on one CPU, each between rounds alone: a round the machine
    slowed (x2) is not the one kept, nor the least costly; the median round is."""
    from dlperf.backends import torch_kernels

    assert torch_kernels.SHARE_ROUNDS == 3
    script = iter([[1.0], [2.0, 2.0], [1.0], [4.0, 4.0], [1.0], [2.2, 2.2], [1.0]])
    asked = []

    class Pool:  # the rounds scripted, each asked for as many processes as it times
        def __init__(self, size, make):
            asked.append(("pool", size))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def round(self, procs, seconds):
            got = next(script)
            asked.append(procs)
            assert len(got) == procs
            return got

    monkeypatch.setattr(torch_kernels, "SharePool", Pool)
    alone, two = torch_kernels.core_sharing(0.1)
    assert (alone, two) == ([1.0, 1.0], [2.2, 2.2])
    assert asked == [("pool", 2), 1, 2, 1, 2, 1, 2, 1]  # one pool for all seven rounds
    from dlperf.perfmodel.fit import sharing_cost

    assert sharing_cost(alone, two) == pytest.approx(1.1)


def test_a_disturbed_op_timed_again_keeps_the_shapes_an_interrupted_run_had_timed(
        monkeypatch):
    """An op whose first timing was disturbed is timed once more: only the shapes this run
    timed, the ones resumed from an interrupted run kept as they were."""
    from dlperf.core import disturbance
    from dlperf.kinds.calibrate import run
    from dlperf.perfmodel.kernels import KernelSample

    part = KernelPart(op="memory", shapes=((1,), (2,), (3,)))
    spec = RunSpec(kind="kernel", network="kernels", framework="torch", batch_size=1,
                   options=KernelOptions(parts=(part,), min_time_s=0.1, revision=k.REVISION))

    def sample(n, s):
        return KernelSample(op="memory", shape=(n,), median_s=s, times_s=(s,), bytes=8.0 * n)

    resumed = {("memory", (1,)): sample(1, 0.5)}
    timed: list[list[int]] = []

    def shapes(o, part, spec, backend, emit, failures, done=None):
        kept = done or {}
        timed.append([s[0] for s in part.shapes if ("memory", tuple(s)) not in kept])
        return [kept.get(("memory", tuple(s))) or sample(s[0], 0.1 * len(timed))
                for s in part.shapes]

    shares = iter([0.5, 0.0])
    monkeypatch.setattr(run, "_shapes", shapes)
    monkeypatch.setattr(disturbance, "read", lambda: None)
    monkeypatch.setattr(disturbance, "between", lambda a, b: disturbance.Disturbance(
        other_share=next(shares), steal_share=0.0, cpus=1, seconds=1.0))
    got, share = run._watched_shapes(spec.options, part, spec, None, lambda e: None, {},
                                     resumed)
    assert timed == [[2, 3], [2, 3]] and share == 0.0
    assert got[0] is resumed[("memory", (1,))] and [s.median_s for s in got[1:]] == [0.2, 0.2]
