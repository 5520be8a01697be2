"""A first layer's backward is its weights' gradient alone: the kernel that times it in
each framework, the shapes a scoped calibration times, its curve (a share of the pair's)
and the step model's use of it, with half the pair standing in for a calibration that
did not time it."""

from __future__ import annotations

import pytest

from dlperf import workloads
from dlperf.core import framework_table
from dlperf.kinds.calibrate import plan as calibration
from dlperf.perfmodel import fit
from dlperf.perfmodel import kernels as k
from dlperf.perfmodel import network_kernels as nk
from dlperf.perfmodel.local import _conv_grads_s, product_times
from tests import calibration_fixtures as made_up
from tests.test_calibration import made_up_fit


def test_its_flops_bytes_and_grid_are_one_gradient_of_the_first_layers():
    shape = (2, 3, 8, 10, 3, 1)
    assert k.flops("conv_wgrad", shape) == k.flops("conv", shape) == k.flops("conv_bwd",
                                                                               shape) / 2
    x, w, y = 2 * 3 * 100, 9 * 3 * 8, 2 * 8 * 100  # reads the input and y's gradient
    assert k.nbytes("conv_wgrad", shape) == 4 * (x + w + y)
    assert fit.conv_results("conv_wgrad", shape) == (w,)  # its one result: the weights'
    grid = k.grid("conv_wgrad")
    # the convolutions' own three-channel layers, every window of them, at their sizes
    assert grid and set(grid) <= set(k.grid("conv")) and all(s[1] == 3 for s in grid)
    assert {s[4] for s in grid} == {layer[3] for layer in k.FIRST_CONV_LAYERS} == {3, 7, 11}
    assert set(k.grid("conv_wgrad", device="gpu")) <= set(k.grid("conv", device="gpu"))
    assert "conv_wgrad" in calibration.LOCAL_OPS


def test_a_networks_first_convolution_is_timed_as_its_weights_gradient_alone():
    """AlexNet's first layer goes to conv_wgrad, its other four to conv_bwd; a network
    without convolutions times none, and a calibration without the skeleton then none of
    its grid; with the skeleton, the grid's skeleton as for the other convolutions."""
    layers = workloads.get("alexnet").layers()
    convs = [x for x in layers if x.op == "conv"]
    shapes = nk.step_shapes(layers, 16)
    first = nk.conv_shape(convs[0].gemms[0], 16)
    assert not convs[0].input_grad and all(x.input_grad for x in convs[1:])
    assert shapes["conv_wgrad"] == {first} and first == (16, 3, 96, 224, 11, 4)
    assert first not in shapes["conv_bwd"] and len(shapes["conv_bwd"]) == 4
    assert first in shapes["conv"]
    fcn = nk.step_shapes(workloads.get("fcn5").layers(), 64)
    assert not fcn["conv_wgrad"]
    kinds = {"fc"}
    assert nk.scoped_grid("conv_wgrad", fcn, layer_kinds=kinds, with_skeleton=False) == []
    assert nk.scoped_grid("conv_wgrad", fcn, layer_kinds=kinds) == nk.skeleton(
        "conv_wgrad", k.grid("conv_wgrad"))
    assert nk.scoped_grid("conv_wgrad", shapes, layer_kinds={"conv"},
                          with_skeleton=False) == [first]
    parts, _ = calibration.scoped_parts([("alexnet", 16)], framework="torch",
                                        with_skeleton=False)
    assert {p.op: p.shapes for p in parts}["conv_wgrad"] == (first,)


def test_the_curve_is_the_pairs_times_the_share_its_samples_took():
    """On the made-up machine, whose weights' gradient takes ``WGRAD_SHARE`` of the pair,
    the scale is that share, and at a first layer no grid shape has (AlexNet's at 32) the
    time is that share of the pair's, without the call."""
    f = made_up_fit()
    assert f.conv_wgrad is not None
    assert f.conv_wgrad.scale == pytest.approx(made_up.WGRAD_SHARE, rel=0.05)
    for shape in (*k.grid("conv_wgrad")[:3], (32, 3, 96, 224, 11, 4), (16, 3, 64, 224, 7, 2)):
        m, n, kk = k.conv_gemm(shape)
        assert f.conv_wgrad.time(f.conv_bwd, m, n, kk, shape[4], shape[5]) == pytest.approx(
            made_up.true_s("conv_wgrad", shape) - made_up.CALL_S, rel=0.06)
    # a timed shape reads as timed (the residual smoother's exact rule)
    s = k.grid("conv_wgrad")[0]
    slow = made_up.sample("conv_wgrad", s).model_copy(update={"median_s": 1.0})
    curve = fit.fit_conv_wgrad([slow], f.dispatch, f.conv_bwd)
    m, n, kk = k.conv_gemm(s)
    assert curve.time(f.conv_bwd, m, n, kk, s[4], s[5]) == pytest.approx(
        1.0 - f.dispatch.call_s, rel=1e-6)
    assert fit.fit_conv_wgrad([], f.dispatch, f.conv_bwd) is None


def test_the_step_model_charges_a_first_layer_its_weights_gradient_alone():
    """AlexNet's first layer: its backward from the curve of the weights' gradient; the
    same calibration without that curve (one made before it was timed) charges half the
    pair; a layer fed by another keeps the pair."""
    f = made_up_fit()
    old = f.model_copy(update={"conv_wgrad": None})
    layers = workloads.get("alexnet").layers()
    first, second = [x for x in layers if x.op == "conv"][:2]
    g = first.gemms[0]
    rows = g.m * 16
    pair = f.conv_bwd.time(rows, g.n, g.k, g.window, g.stride)
    assert _conv_grads_s(first, g, rows, f) == f.conv_wgrad.time(
        f.conv_bwd, rows, g.n, g.k, g.window, g.stride)
    assert _conv_grads_s(first, g, rows, f) == pytest.approx(made_up.WGRAD_SHARE * pair,
                                                             rel=0.06)
    assert _conv_grads_s(first, g, rows, old) == pair / 2
    g2 = second.gemms[0]
    assert _conv_grads_s(second, g2, g2.m * 16, f) == f.conv_bwd.time(
        g2.m * 16, g2.n, g2.k, g2.window, g2.stride)
    # in the layer's (forward, backward): the backward is shorter by the difference
    (_, bwd_new), (_, bwd_old) = product_times(first, 16, f), product_times(first, 16, old)
    assert bwd_old - bwd_new == pytest.approx(pair / 2 - _conv_grads_s(first, g, rows, f),
                                              rel=1e-6)


@pytest.mark.parametrize("framework", ["torch", "tensorflow", "jax"])
def test_each_frameworks_kernel_computes_the_weights_gradient_of_the_pair(framework):
    """The weights' gradient the kernel computes alone equals the one the pair's kernel
    computes, and it has no input gradient."""
    if not framework_table.installed(framework):
        pytest.skip(f"{framework} not installed")
    import numpy as np

    shape = (2, 3, 4, 9, 5, 2)
    if framework == "torch":
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        from dlperf.backends import torch_kernels

        calls = []

        class Seen(TorchDispatchMode):  # the ATen ops the kernel's call runs
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                calls.append((func, args, out))
                return out

        one = torch_kernels.kernel("conv_wgrad", shape, torch.device("cpu"))
        with Seen():
            one.step()
        ((func, args, out),) = [c for c in calls if "convolution_backward" in str(c[0])]
        assert list(args[-1]) == [False, True, False] and out[0] is None
        pair = torch.ops.aten.convolution_backward(
            one.g, one.x, one.w, None, one.stride, one.pad, (1, 1), False, (0, 0), 1,
            (True, True, False))
        assert torch.allclose(out[1], pair[1])
        return
    if framework == "tensorflow":
        from dlperf.backends import tf_kernels

        one, two = (tf_kernels.kernel(op, shape, "/CPU:0") for op in ("conv_wgrad", "conv_bwd"))
    else:
        import jax

        from dlperf.backends import jax_kernels

        cpu = jax.devices("cpu")[0]
        one, two = (jax_kernels.kernel(op, shape, cpu) for op in ("conv_wgrad", "conv_bwd"))
    got, both = one._fn(*one.args), two._fn(*two.args)
    assert len(got) == 1 and len(both) == 2
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(both[1]), rtol=1e-5, atol=1e-5)


def test_explain_models_a_first_layers_profiled_backward_as_its_weights_gradient():
    """In ``dlperf explain``, PyTorch's ``convolution_backward`` and XLA's weight-gradient
    convolution over AlexNet's input (the data: ``data_fed_inputs``) get the step model's
    time for that layer; over another input, the pair's and the pair's half."""
    from dlperf.kinds.explain.options import ProfiledOp
    from dlperf.perfmodel import local, ops

    f = made_up_fit()
    fed = ops.data_fed_inputs(workloads.get("alexnet").layers(), 16)
    assert fed == {(16, 3, 224, 224)}
    x, w, g = (16, 3, 224, 224), (96, 3, 11, 11), (16, 96, 56, 56)
    rows, k_ = 16 * 56 * 56, 3 * 121
    torch_op = ProfiledOp(name="aten::convolution_backward", shapes=(g, x, w), calls=1,
                          time_s=0.05)
    wgrad = f.conv_wgrad.time(f.conv_bwd, rows, 96, k_, 11, 4)
    (first,) = ops.op_times([torch_op], f, fed)
    assert first.model_s == pytest.approx(wgrad + local.new_pages_s(f, 96 * k_))
    assert first.flops == pytest.approx(2.0 * rows * 96 * k_)
    (pair,) = ops.op_times([torch_op], f)  # not known to be fed by the data: both
    assert pair.model_s > first.model_s
    assert pair.model_s >= f.conv_bwd.time(rows, 96, k_, 11, 4)
    xla_op = ProfiledOp(name=ops.XLA_WGRAD, shapes=(x, g, (11, 11)), calls=1, time_s=0.05)
    assert ops.op_times([xla_op], f, fed)[0].model_s == pytest.approx(wgrad)
    assert ops.op_times([xla_op], f)[0].model_s == pytest.approx(
        f.conv_bwd.time(rows, 96, k_, 11, 4) / 2)
    # a calibration from before the weights' own curve: half the pair in both paths, as the
    # step model charges the layer (``local.weights_grad_s``), not the whole pair
    old = f.model_copy(update={"conv_wgrad": None})
    half = old.conv_bwd.time(rows, 96, k_, 11, 4) / 2
    assert ops.op_times([torch_op], old, fed)[0].model_s == pytest.approx(
        half + local.new_pages_s(old, 96 * k_))
    assert ops.op_times([xla_op], old, fed)[0].model_s == pytest.approx(half)
