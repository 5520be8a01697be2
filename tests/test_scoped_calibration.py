"""A calibration scoped to networks (``dlperf calibrate --networks``, the main job's): the
kernel shapes of their layers in the form the step model times them, a skeleton of the
grid beside them, the scoped runs merged with what is stored, and ``dlperf predict`` of
another network adding its shapes first."""

from __future__ import annotations

import json
import re

import pytest

from dlperf import workloads
from dlperf.cli import main
from dlperf.core.store import Store
from dlperf.kinds.calibrate import plan as calibration
from dlperf.kinds.calibrate.options import KernelOutcome
from dlperf.perfmodel import kernels as k
from dlperf.perfmodel import network_kernels as nk
from dlperf.perfmodel.fit import MIN_VARIANT_SAMPLES
from dlperf.perfmodel.kernels import conv_gemm, flops
from dlperf.workloads.base import conv, dense
from tests import calibration_fixtures as made_up


def test_a_dense_layer_times_its_forward_its_inputs_gradient_and_its_weights():
    first, second = dense("fc1", 300, 200, first=True), dense("fc2", 200, 10)
    shapes = nk.step_shapes([first, second], 8, "tensorflow")
    # forward (B x in) @ (in x out); the input's gradient (B x out) @ (out x in), not for
    # the first layer; the weights' gradient in^T @ dY, the batch inner
    assert shapes["gemm"] == {(8, 200, 300), (8, 10, 200), (8, 200, 10)}
    assert shapes["gemm_tn"] == {(300, 200, 8), (200, 10, 8)}
    assert not shapes["conv"] and not shapes["gemm_tn_seq"]
    # PyTorch keeps a dense layer's weights as outputs x inputs: dY^T @ X
    torch = nk.step_shapes([first, second], 8, "torch")
    assert torch["gemm"] == shapes["gemm"]
    assert torch["gemm_tn"] == {(200, 300, 8), (10, 200, 8)}
    # any framework's (what a calibration's held-out networks are read against): both
    assert nk.step_shapes([first, second], 8)["gemm_tn"] == shapes["gemm_tn"] | torch["gemm_tn"]
    # the product that reads the weights transposed: Keras' input gradient dY W^T (none
    # for the first layer); PyTorch's forward x W^T
    assert shapes["gemm_nt"] == {(8, 200, 10)}
    assert torch["gemm_nt"] == {(8, 200, 300), (8, 10, 200)}
    assert nk.step_shapes([first, second], 8)["gemm_nt"] == shapes["gemm_nt"] | torch["gemm_nt"]


def test_a_convolutions_kernel_has_the_layers_implicit_gemm():
    for c_in, c_out, window, out, stride in ((3, 96, 11, 55, 4), (96, 256, 5, 27, 1),
                                              (256, 384, 3, 13, 1), (64, 64, 1, 56, 1)):
        layer = conv("c", c_in, c_out, window, out, stride=stride)
        (g,) = layer.gemms
        (shape,) = nk.step_shapes([layer], 2)["conv"]  # within the bound at 2 samples
        assert conv_gemm(shape) == (2 * g.m, g.n, g.k), shape
        assert nk.step_shapes([layer], 2)["conv_bwd"] == {shape}


def test_a_sequences_weight_gradient_contracts_time_and_batch():
    (lstm,) = [x for x in workloads.get("lstm32").layers() if x.op == "lstm"][:1]
    shapes = nk.step_shapes([lstm], 4, "tensorflow")
    proj, rec = lstm.gemms
    # the input projection of all 32 steps at once: its weights' gradient over time x batch
    assert shapes["gemm_tn_seq"] == {(proj.k, proj.n, k.SEQ_STEPS, 32 * 4 // k.SEQ_STEPS)}
    # the recurrent product, one step at a time: the batch's rows
    assert (4, rec.n, rec.k) in shapes["gemm"] and (rec.k, rec.n, 4) in shapes["gemm_tn"]


def test_a_shape_beyond_the_bound_is_timed_on_fewer_rows_or_samples():
    big = dense("wide", 26752, 8192)
    (fwd,) = [s for s in nk.step_shapes([big], 512)["gemm"] if s[1] == 8192]
    assert flops("gemm", fwd) <= nk.MAX_SHAPE_FLOPS < flops("gemm", (512, 8192, 26752))
    assert fwd[1:] == (8192, 26752) and 1 <= fwd[0] < 512
    layer = conv("c", 256, 256, 3, 56)
    (c,) = nk.step_shapes([layer], 256)["conv"]
    assert c[1:] == nk.conv_shape(layer.gemms[0], 256)[1:] and c[0] < 256
    assert flops("conv", c) <= nk.MAX_SHAPE_FLOPS


def test_the_scoped_grid_is_the_skeleton_and_the_networks_shapes():
    needed = nk.step_shapes(workloads.get("alexnet").layers(), 16)
    for op in nk.SCOPED_OPS:
        got = nk.scoped_grid(op, needed, layer_kinds={"conv", "pool", "lstm"})
        full = k.grid(op)
        assert set(nk.skeleton(op, full)) | needed[op] == set(got)
        assert len(got) < len(full) + len(needed[op])
    assert nk.scoped_grid("memory", needed, layer_kinds=()) == k.grid("memory")
    for op in ("bn", "pool"):  # whole, for any network: one outside the scope has them
        assert nk.scoped_grid(op, needed, layer_kinds={"conv", "dense"}) == k.grid(op)
    # an LSTM: only for a network that has one, whole at its own shape beside the skeleton
    assert nk.scoped_grid("lstm", needed, layer_kinds={"conv", "pool"}) == []
    lstm32 = workloads.get("lstm32")
    needed = nk.step_shapes(lstm32.layers(), 128)
    cfg = lstm32.sizes["full"]
    assert needed["lstm"] == {(128, cfg.seq_len, cfg.embed, cfg.hidden)}  # embed == hidden
    assert set(nk.scoped_grid("lstm", needed, layer_kinds={"lstm"})) == {
        *k.grid("lstm")[::nk.SKELETON_STRIDE], (128, 32, 256, 256)}
    assert k.flops("lstm", (128, 32, 256, 256)) == 3 * 128 * sum(
        x.fwd_flops for x in lstm32.layers() if x.op == "lstm") / 2


def test_the_skeleton_of_a_convolution_keeps_every_window_size_at_both_ends():
    full = k.grid("conv")
    got = nk.skeleton("conv", full)
    windows = {s[4] for s in full}
    assert {1, 3, 5, 7, 11} <= windows
    for w in windows:  # the first and the last of each window's shapes, and every fourth
        mine = [s for s in full if s[4] == w]
        assert {*mine[::nk.SKELETON_STRIDE], mine[-1]} == {s for s in got if s[4] == w}
    # more than one 1x1 shape (every fourth of the whole grid kept one), fewer than all
    assert len([s for s in got if s[4] == 1]) >= 2 and len(got) < len(full)
    assert nk.skeleton("gemm", k.grid("gemm")) == k.grid("gemm")[::nk.SKELETON_STRIDE]


def test_a_scoped_plan_names_its_networks_and_keeps_every_required_op():
    (spec,) = calibration.specs(["torch"], [1], allreduce=False,
                                scope=[("fcn5", 64), ("lstm32", 128)])
    o = spec.options
    assert o.scope == ("fcn5@64", "lstm32@128")
    assert "for fcn5@64, lstm32@128" in o.label("torch", "cpu", 1)
    ops = {p.op for p in o.parts}
    assert set(calibration.REQUIRED_OPS) <= ops
    # no batch norm or pool in fcn5 and LSTM-32: timed for a network outside the scope
    assert {"bn", "pool"} <= ops
    (cnn,) = calibration.specs(["torch"], [1], allreduce=False, scope=[("alexnet", 16)])
    assert "lstm" not in {p.op for p in cnn.options.parts}  # AlexNet has no LSTM
    full = calibration.specs(["torch"], [1], allreduce=False)[0]
    assert sum(len(p.shapes) for p in o.parts) < sum(len(p.shapes) for p in full.options.parts)
    # a long shape on two agreeing calls, not three: the main job's minutes count
    assert o.min_steps == calibration.SCOPED_MIN_STEPS < full.options.min_steps
    # a whole grid's identity is what it was before scopes existed
    assert "scope" not in full.options.model_dump(exclude_defaults=True)


def _store_scoped(store: Store, scope, t0: float, scale: float = 1.0, revision=None):
    for r in made_up.kernel_results(allreduce=False, scope=tuple(scope)):
        spec = r.spec
        if revision is not None:
            spec = spec.model_copy(update={"options": spec.options.model_copy(
                update={"revision": revision})})
        samples = tuple(s.model_copy(update={"median_s": s.median_s * scale})
                        for s in r.outcome.samples)
        store.add(r.model_copy(update={"spec": spec, "outcome": KernelOutcome(samples=samples),
                                       "started_at": t0, "finished_at": t0 + 1}))


def test_without_the_skeleton_only_what_the_networks_run_is_timed():
    """``scoped_grid(with_skeleton=False)``: a product or a convolution at the networks'
    own shapes alone (its skeleton where they run none of it), the whole grid of the
    other ops, and no layer op of a kind the networks lack."""
    needed = nk.step_shapes(workloads.get("alexnet").layers(), 16)
    kinds = {x.op for x in workloads.get("alexnet").layers()}
    for op in ("gemm", "conv", "conv_bwd"):
        assert needed[op] and nk.scoped_grid(op, needed, layer_kinds=kinds,
                                             with_skeleton=False) == sorted(needed[op])
    # its five weight gradients are too few to fit the transposed product's own curve on:
    # the skeleton stays beside them (with fewer, the plain product's curve would stand in)
    assert len(needed["gemm_tn"]) < MIN_VARIANT_SAMPLES <= len(
        nk.scoped_grid("gemm_tn", needed, layer_kinds=kinds, with_skeleton=False))
    assert set(needed["gemm_tn"]) <= set(nk.scoped_grid("gemm_tn", needed, layer_kinds=kinds,
                                                        with_skeleton=False))
    # the main job's three networks run enough of them: their own alone
    both: dict = {}
    for net, batch in (("fcn5", 64), ("alexnet", 16), ("lstm32", 128)):
        for op, shapes in nk.step_shapes(workloads.get(net).layers(), batch, "jax").items():
            both.setdefault(op, set()).update(shapes)
    assert len(both["gemm_tn"]) >= MIN_VARIANT_SAMPLES
    assert nk.scoped_grid("gemm_tn", both, layer_kinds=kinds, with_skeleton=False) \
        == sorted(both["gemm_tn"])
    # AlexNet runs no product over a sequence: its skeleton, so that the op is timed
    assert not needed["gemm_tn_seq"]
    assert nk.scoped_grid("gemm_tn_seq", needed, layer_kinds=kinds, with_skeleton=False) \
        == nk.skeleton("gemm_tn_seq", k.grid("gemm_tn_seq"))
    assert nk.scoped_grid("pool", needed, layer_kinds=kinds, with_skeleton=False) \
        == k.grid("pool")
    for op in ("bn", "lstm"):  # no such layer in AlexNet
        assert nk.scoped_grid(op, needed, layer_kinds=kinds, with_skeleton=False) == []
    # a shape timed on fewer samples than the step runs keeps its op's skeleton: AlexNet's
    # convolutions at 128; none of the DLBench networks' layers at the benchmark's batches
    cut = nk.cut_ops(workloads.get("alexnet").layers(), 128)
    assert cut == {"conv", "conv_bwd"}
    for net, batch in (("alexnet", 32), ("fcn5", 128), ("lstm32", 256), ("resnet50", 32)):
        assert not nk.cut_ops(workloads.get(net).layers(), batch), net
    assert set(nk.scoped_grid("conv", needed, layer_kinds=kinds, with_skeleton=False,
                              cut=cut)) == set(nk.scoped_grid("conv", needed, layer_kinds=kinds))
    assert nk.scoped_grid("memory", needed, layer_kinds=kinds, with_skeleton=False) \
        == k.grid("memory")


def test_the_skeleton_once_is_at_the_thread_count_the_advice_predicts_at(monkeypatch):
    """``--skeleton cores``: the whole skeleton at all the physical cores (else half as
    many, a quarter, ..., else the most threads); at the others what the networks'
    predictions read (their shapes, the skeleton of an op whose shape is cut)."""
    assert calibration.halving_threads(4) == [4, 2, 1]  # as dlperf advise tries them
    assert calibration.halving_threads(3) == [3, 1]
    assert calibration.skeleton_threads([1, 2], 2) == 2
    assert calibration.skeleton_threads([1, 2, 4], 4) == 4
    assert calibration.skeleton_threads([1, 3], 4) == 1
    assert calibration.skeleton_threads([3], 2) == 3
    monkeypatch.setattr(calibration.environment, "physical_cores", lambda: 2)
    scope = [("fcn5", 64), ("alexnet", 16)]
    one, two = calibration.specs(["torch"], [1, 2], allreduce=False, scope=scope,
                                 skeleton="cores")
    every = calibration.specs(["torch"], [1, 2], allreduce=False, scope=scope)
    assert two.options == every[1].options and every[0].options != one.options
    shapes = {p.op: set(p.shapes) for p in one.options.parts}
    skeleton = set(nk.skeleton("gemm", k.grid("gemm")))
    assert not skeleton <= shapes["gemm"] and skeleton <= set(
        next(p.shapes for p in two.options.parts if p.op == "gemm"))
    # AlexNet's convolutions at 16 timed whole: no skeleton of them at one thread; at 128
    # they are timed on fewer samples, and the convolutions' skeleton stays
    conv_skeleton = set(nk.skeleton("conv", k.grid("conv")))
    assert not conv_skeleton & shapes["conv"]
    assert "bn" not in shapes and {"pool", *calibration.REQUIRED_OPS} <= set(shapes)
    timed = sum(len(p.shapes) for p in one.options.parts)
    assert timed < sum(len(p.shapes) for p in two.options.parts) - 20
    cut, _ = calibration.specs(["torch"], [1, 2], allreduce=False, skeleton="cores",
                               scope=[("fcn5", 64), ("alexnet", 128)])
    assert conv_skeleton <= {s for p in cut.options.parts if p.op == "conv" for s in p.shapes}
    with pytest.raises(ValueError, match="skeleton"):
        calibration.specs(["torch"], [1], scope=scope, skeleton="some")


def test_the_skeleton_once_in_one_framework_is_the_first_frameworks_at_the_cores(monkeypatch):
    """``--skeleton once`` (the main job's): 'cores' for the first framework listed, and
    the others time only what their networks' predictions read, at every thread count."""
    monkeypatch.setattr(calibration.environment, "physical_cores", lambda: 2)
    scope = [("fcn5", 64), ("alexnet", 16)]
    cores = calibration.specs(["torch", "tensorflow"], [1, 2], allreduce=False, scope=scope,
                              skeleton="cores")
    once = calibration.specs(["torch", "tensorflow"], [1, 2], allreduce=False, scope=scope,
                             skeleton="once")
    assert [(s.framework, s.threads) for s in once] == [(s.framework, s.threads) for s in cores]
    by = {(s.framework, s.threads): s.options for s in once}
    skeleton = set(nk.skeleton("gemm", k.grid("gemm")))

    def gemms(o) -> set:
        return {s for p in o.parts if p.op == "gemm" for s in p.shapes}

    assert skeleton <= gemms(by["torch", 2])
    assert not skeleton <= gemms(by["tensorflow", 2])
    assert not skeleton <= gemms(by["tensorflow", 1]) and not skeleton <= gemms(by["torch", 1])
    # the first framework's runs are those of 'cores'; the other's keep their networks' shapes
    assert [s.options for s in once if s.framework == "torch"] \
        == [s.options for s in cores if s.framework == "torch"]
    assert gemms(by["tensorflow", 2]) == gemms(by["tensorflow", 1])
    # the other framework at the cores times fewer shapes than with its skeleton
    assert sum(len(p.shapes) for p in by["tensorflow", 2].parts) \
        < sum(len(p.shapes) for s in cores if (s.framework, s.threads) == ("tensorflow", 2)
              for p in s.options.parts) - 20


def test_a_scoped_run_whose_shapes_a_stored_run_timed_is_not_run_again(db, monkeypatch, capsys):
    """A store calibrated with the skeleton at the cores in every framework holds what the
    main job's ``--skeleton once`` times: nothing to run, and no stored skeleton replaced.
    The other way round, the frameworks' skeletons are still to time; another scope, other
    library versions or another repetition are not covered."""
    monkeypatch.setattr(calibration.environment, "physical_cores", lambda: 2)
    scope = [("fcn5", 64), ("alexnet", 16)]
    kw = dict(allreduce=False, scope=tuple(scope))

    def plan(skeleton, **more):
        return calibration.specs(["torch", "tensorflow"], [1, 2], allreduce=False,
                                 scope=scope, skeleton=skeleton, **more)

    with Store(db) as store:
        assert calibration.uncovered(plan("once"), store) == plan("once")  # nothing stored
        made_up.calibrated(store, frameworks=("torch", "tensorflow"), threads=(1, 2),
                           skeleton="cores", **kw)
        assert calibration.uncovered(plan("once"), store) == []
        assert calibration.uncovered(plan("cores"), store) == []
        wider = calibration.specs(["torch"], [1], allreduce=False, skeleton="once",
                                  scope=[*scope, ("lstm32", 128)])
        assert calibration.uncovered(wider, store) == wider
        again = plan("once", repeat=2)
        assert [s.repeat for s in calibration.uncovered(again, store)] == [1] * 4
        stored = store.count()
    # the main job's command on that store: nothing run, the curves, the quality, the time
    assert main(["calibrate", "--frameworks", "torch,tensorflow", "--threads", "1,2",
                 "--no-allreduce", "--networks", "fcn5,alexnet", "--skeleton", "once",
                 "--db", str(db)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert any(line.startswith("calibration quality: ") for line in printed)
    assert re.fullmatch(r"calibrate: \d+ s", printed[-1]), printed[-1]
    with Store(db) as store:
        assert store.count() == stored
    with Store(db.parent / "once.db") as store:
        made_up.calibrated(store, frameworks=("torch", "tensorflow"), threads=(1, 2),
                           skeleton="once", **kw)
        left = calibration.uncovered(plan("cores"), store)
        assert [(s.framework, s.threads) for s in left] == [("tensorflow", 2)]
        other = [s.model_copy(update={"options": s.options.model_copy(
            update={"versions": {"torch": "0.0"}})}) for s in plan("once")]
        assert calibration.uncovered(other, store) == other


def test_advice_predicts_a_network_outside_the_scope_in_the_framework_with_the_skeleton(
        db, monkeypatch, capsys):
    """After the main job's calibration (``--skeleton once``, PyTorch first), ResNet-50 is
    predicted by PyTorch's two-thread curves, TensorFlow's calibration predicting only its
    own networks."""
    monkeypatch.setattr(calibration.environment, "physical_cores", lambda: 2)
    with Store(db) as store:
        made_up.calibrated(store, frameworks=("torch", "tensorflow"), threads=(1, 2),
                           allreduce=False, scope=(("fcn5", 64),), skeleton="once")
        fits = calibration.local_calibration(store)
        with_skeleton = {(s.framework, s.threads) for s in calibration.load(store)
                         if calibration.has_skeleton(s)}
    assert with_skeleton == {("torch", 2)}
    assert {(f.framework, f.threads) for f in fits.fits} == {
        (fw, t) for fw in ("torch", "tensorflow") for t in (1, 2)}
    assert main(["advise", "--task", "image-classification", "--samples", "1M",
                 "--hardware", "this", "--db", str(db)]) == 0
    advice = capsys.readouterr().out
    assert "predicted: resnet50 torch/eager cpu x2" in advice
    assert "resnet50: not measured here" not in advice


def test_a_calibration_without_its_skeleton_predicts_no_network_held_out(db, monkeypatch):
    """A network held out of a calibration that timed no skeleton at its thread count
    leaves it without samples (nothing outside its scope is predicted from it), where
    the one with the skeleton keeps the other networks' shapes and the skeleton."""
    monkeypatch.setattr(calibration.environment, "physical_cores", lambda: 2)
    with Store(db) as store:
        for r in made_up.kernel_results(threads=(1, 2), allreduce=False,
                                        scope=(("fcn5", 64), ("alexnet", 16)),
                                        skeleton="cores"):
            store.add(r)
        one, two = sorted(calibration.load(store), key=lambda s: s.threads)
    assert not calibration.has_skeleton(one) and calibration.has_skeleton(two)
    assert not calibration.without_network(one, "alexnet").samples.items
    assert calibration.has_skeleton(calibration.without_network(two, "alexnet"))
    assert calibration.without_network(one, "resnet50") is one  # not in its scope


def test_scoped_runs_add_to_each_other_and_to_the_whole_grid(db):
    with Store(db) as store:
        _store_scoped(store, [("fcn5", 64)], 1.0)
        (one,) = calibration.load(store)
        assert one.scope == ("fcn5@64",)
        _store_scoped(store, [("alexnet", 16)], 2.0)
        (two,) = calibration.load(store)
        assert two.scope == ("alexnet@16", "fcn5@64")
        have = {(s.op, s.shape) for s in two.samples.items}
        assert {(s.op, s.shape) for s in one.samples.items} <= have
        assert all(("conv", s) in have for s in nk.step_shapes(
            workloads.get("alexnet").layers(), 16)["conv"])
        # each shape once: where both timed it, the median of the two
        assert len(have) == len(two.samples.items)
        # the fitted calibration says what it covers
        fit = calibration.local_calibration(store).find("torch", 1)
        assert fit.covers("fcn5", 64) and fit.covers("alexnet", 16)
        assert not fit.covers("fcn5", 128) and not fit.covers("resnet50", 16)
        assert "timed at the shapes of alexnet@16, fcn5@64" in fit.describe()
        # the whole grid covers every network
        made_up.calibrated(store, allreduce=False)
        (whole,) = calibration.load(store)
        assert whole.scope is None
        assert calibration.local_calibration(store).find("torch", 1).covers("resnet50", 16)


def test_a_scoped_run_of_an_older_revision_is_not_mixed_in(db):
    with Store(db) as store:
        _store_scoped(store, [("fcn5", 64)], 1.0, scale=5.0, revision=k.REVISION - 1)
        _store_scoped(store, [("alexnet", 16)], 2.0)
        (stored,) = calibration.load(store)
    assert stored.scope == ("alexnet@16",)
    (mem,) = [s for s in stored.samples.of_op("memory") if s.shape == (4096,)]
    assert mem.median_s == pytest.approx(made_up.true_s("memory", (4096,)))


def test_calibrate_networks_dry_run_and_bad_flags(db, capsys):
    assert main(["calibrate", "--frameworks", "torch", "--threads", "1", "--networks",
                 "fcn5,alexnet", "--batch-size", "16,32", "--dry-run", "--db", str(db)]) == 0
    assert "for alexnet@16, alexnet@32, fcn5@16, fcn5@32" in capsys.readouterr().out
    for bad in (["--batch-size", "16"], ["--networks", "fcn5", "--fine"],
                ["--skeleton", "cores"], ["--networks", "fcn5", "--skeleton", "some"],
                ["--networks", "nosuchnet"], ["--dataflow", "--batch-size", "8"]):
        assert main(["calibrate", "--frameworks", "torch", "--dry-run", "--db", str(db),
                     *bad]) == 2, bad
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_predict_of_another_network_adds_its_shapes_first(db, capsys, monkeypatch):
    """A calibration scoped to fcn5: predicting alexnet times alexnet's shapes at its
    batch (the calibration's runs, not asserted here: the run itself is
    ``calibrate``'s), then predicts; a network it covers adds nothing."""
    from dlperf import api

    with Store(db) as store:
        _store_scoped(store, [("fcn5", 64)], 1.0)
    calls = []

    def record(frameworks, threads, **kw):
        calls.append((frameworks, threads, kw["scope"], kw["allreduce"]))
        with Store(db) as store:
            _store_scoped(store, kw["scope"], 5.0)

    monkeypatch.setattr(api, "calibrate", record)
    assert main(["predict", "-n", "alexnet", "--device", "cpu", "-b", "8", "--db", str(db)]) == 0
    assert calls == [(["torch"], [1], [("alexnet", 8)], False)]
    captured = capsys.readouterr()
    assert "adding alexnet@8's kernel shapes" in captured.err
    assert "timed at the shapes of alexnet@8, fcn5@64" in captured.out
    assert main(["predict", "-n", "fcn5", "--device", "cpu", "--db", str(db), "--json"]) == 0
    assert len(calls) == 1


def _recorded_calibrations(db, monkeypatch) -> list:
    """``api.calibrate`` made to store a made-up scoped run at once; the scopes it was
    asked for, in order."""
    from dlperf import api

    calls = []

    def record(frameworks, threads, **kw):
        calls.append(kw["scope"])
        with Store(db) as store:
            _store_scoped(store, kw["scope"], 5.0)

    monkeypatch.setattr(api, "calibrate", record)
    return calls


def test_a_parallel_prediction_adds_the_shapes_its_processes_run(db, capsys, monkeypatch):
    """Data parallelism runs a worker's share of the global batch, a pipeline its
    micro-batches: those are the shapes added (a refused configuration adds none)."""
    from dlperf.perfmodel.predict import process_batch

    assert process_batch(16, "single", 1) == 16
    assert process_batch(16, "sync", 4) == 4
    assert process_batch(16, "pipeline", 4) == 1  # 16 micro-batches: 4 a stage
    assert process_batch(16, "pipeline", 2, micro_batches=4) == 4
    assert process_batch(16, "sync", 3) is None and process_batch(16, "bogus", 2) is None
    assert process_batch(16, "pipeline", 2, micro_batches=0) is None
    with Store(db) as store:
        _store_scoped(store, [("fcn5", 64)], 1.0)
    calls = _recorded_calibrations(db, monkeypatch)
    for strategy, extra in (("sync", []), ("pipeline", ["--micro-batches", "8"])):
        assert main(["predict", "-n", "alexnet", "--device", "cpu", "-b", "16", "-s", strategy,
                     "--devices", "2", "--link", "eth100", *extra, "--db", str(db)]) == 0
    assert calls == [[("alexnet", 8)], [("alexnet", 2)]]
    assert "adding alexnet@2's kernel shapes" in capsys.readouterr().err
    assert main(["predict", "-n", "alexnet", "--device", "cpu", "-b", "16", "-s", "sync",
                 "--devices", "3", "--db", str(db)]) == 2
    assert len(calls) == 2


def test_a_pipeline_prediction_adds_its_micro_batch_to_a_whole_grid_calibration(
        db, capsys, monkeypatch):
    """The whole grid times no product at a micro-batch of a few samples, and its curve
    can miss those by a fifth: a pipeline's prediction adds its micro-batch's shapes to a
    whole-grid calibration too, once; a data-parallel one (a worker's share, the grid's
    range) and a single step add none, and the shapes a scoped run timed beside the
    whole grid are remembered as timed."""

    with Store(db) as store:
        made_up.calibrated(store, allreduce=False)
        fit = calibration.local_calibration(store).find("torch", 1)
        assert fit.covers("alexnet", 2) and not fit.timed_exactly("alexnet", 2)
    calls = _recorded_calibrations(db, monkeypatch)
    for strategy, extra in (("single", []), ("sync", []),
                            ("pipeline", ["--micro-batches", "8"]),
                            ("pipeline", ["--micro-batches", "8"])):
        assert main(["predict", "-n", "alexnet", "--device", "cpu", "-b", "16", "-s", strategy,
                     "--devices", "1" if strategy == "single" else "2", "--link", "eth100",
                     *extra, "--db", str(db)]) == 0
    assert calls == [[("alexnet", 2)]]
    assert "(the whole grid, no product at a pipeline's micro-batch)" in capsys.readouterr().err
    with Store(db) as store:
        (stored,) = calibration.load(store)
        fit = calibration.local_calibration(store).find("torch", 1)
    assert stored.scope is None and stored.timed_at == ("alexnet@2",)
    assert fit.timed_exactly("alexnet", 2) and not fit.timed_exactly("alexnet", 4)
    # validation holding alexnet out forgets that its shapes were timed
    scoped = calibration.Stored("torch", 1, "cpu", stored.samples, scope=("alexnet@2",),
                                timed_at=("alexnet@2",))
    assert calibration.without_network(scoped, "alexnet").timed_at == ()


def test_a_strided_convolution_is_timed_on_the_input_side_the_network_gives_it():
    # ResNet-50's stride-2 convolutions read a 56x56 (or 28, 14) map and its stem a 224x224
    # image; the smallest input with the same output is odd (55), which oneDNN runs
    # through a slower path, so the calibration must time the network's own side
    needed = nk.step_shapes(workloads.get("resnet50").layers(), 16)["conv"]
    strided = {(s[3], s[4], s[5]) for s in needed if s[5] > 1}
    assert (224, 7, 2) in strided and (56, 1, 2) in strided and (56, 3, 2) in strided
    assert all(side % 2 == 0 for side, _, _ in strided)
    (alex,) = [s for s in nk.step_shapes(workloads.get("alexnet").layers(), 16)["conv"]
               if s[5] == 4]
    assert alex[3] == 224
    # each timed shape has the layer's output pixels
    for layer in workloads.get("resnet50").layers():
        for g in layer.gemms:
            if layer.op == "conv":
                b, _, _, side, window, stride = nk.conv_shape(g, 1)
                assert k.conv_out(side, window, stride) ** 2 == g.m


def test_a_network_held_out_keeps_what_a_calibration_of_the_others_would_have_timed(db):
    """``without_network``: a calibration scoped to fcn5 and AlexNet, AlexNet held out, has
    exactly the samples of one scoped to fcn5 alone (AlexNet's convolutions gone, the
    skeleton and every op that is not scoped kept); a network not in its scope, or a
    calibration of the whole grid, is left as it is."""
    with Store(db) as store:
        _store_scoped(store, [("fcn5", 64), ("alexnet", 16)], 1.0)
        (both,) = calibration.load(store)
    held = calibration.without_network(both, "alexnet")
    parts, labels = calibration.scoped_parts([("fcn5", 64)])
    assert held.scope == labels == ("fcn5@64",)
    assert {(s.op, s.shape) for s in held.samples.items} == {
        (p.op, tuple(shape)) for p in parts for shape in p.shapes}
    own = nk.step_shapes(workloads.get("alexnet").layers(), 16)["conv"]
    assert own and not {("conv", s) for s in own} & {(s.op, s.shape) for s in held.samples.items}
    assert calibration.without_network(both, "resnet50") is both
    whole = calibration.Stored("torch", 1, "cpu", both.samples)
    assert calibration.without_network(whole, "alexnet") is whole


def test_a_network_the_calibration_did_not_time_is_quoted_the_error_of_networks_held_out(
        db, capsys, monkeypatch):
    """``dlperf validate --held-out-shapes`` predicts each network of a scoped calibration
    with its own shapes held out; a row of a network the calibration did not time (fcn8
    beside a calibration scoped to fcn5 and AlexNet) is quoted that error, not the error
    of networks whose shapes were timed, and advice says its shapes were not timed."""
    from dlperf.core import environment
    from dlperf.core.aggregate import ConfigResult
    from dlperf.kinds.calibrate import validate
    from dlperf.kinds.calibrate.prediction import predict_for_spec
    from tests.report_fixtures import result

    monkeypatch.setattr(environment, "physical_cores", lambda: 1)  # advice: its 1 thread
    with Store(db) as store:
        _store_scoped(store, [("fcn5", 64), ("alexnet", 16)], 1.0)
        model = validate.predictor(store)
        for net, slower in (("fcn5", 1.1), ("alexnet", 1.3), ("fcn8", 1.0)):
            t, _ = model(ConfigResult(spec=result(net, 1, 1.0).spec))
            store.add(result(net, 1, t * slower))
        untimed = validate.untimed_cases(store)
        assert sorted(c.row.spec.network for c in untimed) == ["alexnet", "fcn5"]
        for c in untimed:
            held = calibration.local_calibration(store, hold_out=c.row.spec.network)
            assert c.prediction.time_s == predict_for_spec(c.row.spec, held).time_s
        timed, _ = validate.cases(store, calibration.local_calibration(store))
        alex = {c.row.spec.network: c for c in timed}["alexnet"]
        assert [c for c in untimed if c.row.spec.network == "alexnet"][0].prediction.time_s \
            != alex.prediction.time_s  # its own convolutions moved its prediction
        # predict says so too, with the command that times them where one can
        def shapes(net, **kw):
            return [n for n in validate.predict_here(store, net, **kw)[0].notes
                    if n.startswith("shapes:")]

        assert not shapes("fcn5") and not shapes("alexnet", batch_size=16)
        [note] = shapes("fcn8")
        b8 = workloads.get("fcn8").default_batch
        assert f"did not time fcn8 [full]'s layer shapes at batch {b8}" in note
        assert f"'dlperf calibrate --networks fcn8 --batch-size {b8}'" in note
        [tiny] = shapes("fcn5", size="tiny", batch_size=64)
        assert "not of another size or parameter" in tiny
        model = validate.predictor(store)
        fcn8 = result("fcn8", 1, 1.0)
        assert not model.timed(fcn8.spec) and model.timed(result("fcn5", 1, 1.0).spec)
        _, error = model(ConfigResult(spec=fcn8.spec, results=[fcn8]))
        assert error == pytest.approx(validate.p90([abs(c.error) for c in untimed]))
    # the DLBench table marks the cell that stands on the skeleton
    from dlperf import api

    dl = next(s for s in api.report(db=db, out=db.parent / "rep").sections
              if s.name == "dlbench").tables[0]
    pred = {r[0]: r[dl.headers.index("1 thread") + 1] for r in dl.rows}
    assert pred["fcn8"].endswith("#") and not pred["fcn5"].endswith("#")
    assert any(f.startswith("# fcn8's layer shapes were not timed by the calibration (1 cell)")
               for f in dl.footnotes)
    assert main(["validate", "--held-out-shapes", "--json", "--db", str(db)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mode"] == "untimed" and len(doc["cases"]) == 2
    assert not any(c["shapes_timed"] for c in doc["cases"])
    # validate marks the row that stood on the skeleton
    assert main(["validate", "--json", "--db", str(db)]) == 0
    timed = {c["network"]: c["shapes_timed"] for c in json.loads(capsys.readouterr().out)["cases"]}
    assert timed == {"fcn5": True, "alexnet": True, "fcn8": False}
    assert main(["validate", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "fcn8 torch/eager cpu x1" in text and "# the calibration did not time" in text
    assert main(["advise", "--task", "image-classification", "--samples", "1M", "--db",
                 str(db)]) == 0
    advice = capsys.readouterr().out
    assert ("resnet50's layer shapes were not timed (a skeleton of the grid stands in: "
            "'dlperf calibrate --networks resnet50' times them)") in advice
    # another size than the network as defined: no calibration times its shapes
    assert "cnn [large]'s layer shapes were not timed (a skeleton of the grid stands in; " \
        "a calibration times a network as defined)" in advice


def _slowed(r, factor: float, ops: tuple[str, ...]):
    """``r`` with the samples of ``ops`` timed ``factor`` times as long (a run on a
    machine that ran slower for them)."""
    return r.model_copy(update={"outcome": r.outcome.model_copy(update={"samples": tuple(
        x.model_copy(update={"median_s": x.median_s * factor,
                             "times_s": tuple(t * factor for t in x.times_s)})
        if x.op in ops else x for x in r.outcome.samples)})})


def test_runs_that_time_their_shared_shapes_apart_are_reported_not_merged_silently(db):
    """A scoped run that timed the products it shares with the grid's run 1.4 times as
    long says so: the fit is doubtful, its quality line names the ops and the ratio and
    the networks to calibrate again; runs that agree within ``DISAGREE`` say nothing."""
    from dlperf.perfmodel import run_speed

    with Store(db) as store:
        made_up.calibrated(store, allreduce=False)
        for r in made_up.kernel_results(allreduce=False, scope=(("fcn5", 64),)):
            store.add(_slowed(r, 1.4, ("gemm", "gemm_nt")))
        fit = calibration.local_calibration(store).find("torch", 1)
    ratios = {op: max(r, 1 / r) for op, r in fit.run_speeds.items()}
    assert set(ratios) == {"gemm", "gemm_nt"}
    assert all(r == pytest.approx(1.4, rel=1e-6) for r in ratios.values())
    assert fit.doubtful and "RUNS DISAGREE" in fit.quality()
    assert "--networks and --batch-size it was scoped to (fcn5@64)" in fit.quality()
    assert "RUNS DISAGREE" in fit.describe()  # what a prediction from it prints

    with Store(db.with_name("agree.db")) as store:
        made_up.calibrated(store, allreduce=False)
        for r in made_up.kernel_results(allreduce=False, scope=(("fcn5", 64),)):
            store.add(_slowed(r, 1 + run_speed.DISAGREE / 2, ("gemm",)))
        fit = calibration.local_calibration(store).find("torch", 1)
    assert fit.run_speeds == {} and "RUNS DISAGREE" not in fit.quality()


def test_the_disagreement_of_runs_needs_enough_shared_shapes():
    """Two runs are set against each other op by op over the shapes both timed, at least
    ``MIN_SHARED`` of them; one run alone disagrees with nothing."""
    from dlperf.perfmodel import run_speed

    grid = [made_up.sample("gemm", (n, n, n)) for n in (64, 128, 256, 512, 1024, 2048)]
    slow = [x.model_copy(update={"median_s": 2 * x.median_s}) for x in grid]
    assert run_speed.disagreement([grid]) == {}
    assert run_speed.disagreement([grid, slow[:run_speed.MIN_SHARED]]) == {"gemm": 2.0}
    assert run_speed.disagreement([grid, slow[:run_speed.MIN_SHARED - 1]]) == {}
    # the run with the most shapes is the reference: the other is the one timed apart
    assert run_speed.disagreement([slow[:5], grid]) == {"gemm": 2.0}
