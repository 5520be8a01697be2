"""The input-size, layout and task experiments: their runs, the neutral definitions they
rest on (input side, widths, an equal parameter budget), the generators' common measure,
the tabular data set, and their report sections (results made up here, no training)."""

from __future__ import annotations

import numpy as np
import pytest

from dlperf import workloads
from dlperf.core.errors import UsageError
from dlperf.core.spec import RunSpec
from dlperf.core.store import Store
from dlperf.kinds.train import experiments as ex
from dlperf.kinds.train import experiments_section as report_ex
from dlperf.kinds.train import factor_section as fx
from dlperf.workloads.families.layouts import SHAPES, equal_budget, params_of
from tests.conftest import FAST
from tests.test_experiments import _step_result, _train_result


# ----------------------------------------------------------------------------- definitions
@pytest.mark.parametrize("net", ["ffn", "cnn"])
def test_input_side_sets_the_shape_and_the_torch_model_follows(net):
    import torch

    from dlperf.backends import torch_backend as tb

    wl = workloads.get(net)
    _, _, cfg = workloads.resolve(net, "small", {"side": 16})
    assert cfg.input_shape() == (1, 16, 16)
    tr = tb.build_trainer(cfg, 2, "eager", torch.device("cpu"))
    assert tuple(tr.x.shape) == (2, 1, 16, 16)
    assert tr.param_count == wl.param_count("small", {"side": 16})
    assert tr.flops_per_step() == wl.train_flops(2, "small", {"side": 16})
    # the guide's example: a 512 x 512 image has 262,144 inputs; the first dense layer
    # then holds nearly every weight
    name, share, big, big_share = fx.first_layer(net, {"side": 512})
    assert big_share > 0.99 and (net == "cnn" or (name == big and share > 0.99))
    with pytest.raises(UsageError):
        workloads.resolve(net, "small", {"side": -1})


def test_layouts_share_one_budget_and_are_shaped_as_named():
    budget = ex.LAYOUT_BUDGET
    got = equal_budget(budget)
    assert set(got) == set(SHAPES)
    for name, widths in got.items():
        assert abs(params_of(widths, workloads.get("ffn").config("small")) / budget - 1) < 0.03
        ratios = tuple(w // widths[0 if name != "shrinking" else -1] for w in widths)
        assert ratios == SHAPES[name]
    arms = {s.options.arm: s for s in ex.specs("layout", ex.Settings())}
    assert len(arms) == 3 and all(s.options.target == 0.95 for s in arms.values())


def test_task_arms_cover_every_task_with_one_target_and_scale():
    specs = ex.specs("task", ex.Settings(quick=True))
    tasks = {s.options.arm.split(":")[0] for s in specs}
    assert tasks == set(ex.TASKS)
    gen = [s for s in specs if s.options.arm.startswith("generation")]
    assert {s.network for s in gen} == {"gan", "vae"}
    assert {s.options.measure for s in gen} == {"mmd2"}  # one scale for both generators
    tab = [s for s in specs if s.options.arm.startswith("simple tabular")]
    assert {s.params["dataset"] for s in tab} == {"cancer"}


def test_generators_share_the_mmd2_measure_and_the_vae_generates():
    import torch

    from dlperf.backends import torch_backend as tb
    from dlperf.kinds.train.resolve import check_options

    assert check_options("vae", {"measure": "mmd2"})["target"] == 0.1
    with pytest.raises(UsageError, match="does not apply"):
        check_options("ffn", {"measure": "mmd2"})
    _, _, cfg = workloads.resolve("vae", "tiny")
    tr = tb.build_trainer(cfg, 4, "eager", torch.device("cpu"))
    x = tr.generate(5)
    assert x.shape == (5, 1, 8, 8) and 0.0 <= x.min() and x.max() <= 1.0
    np.testing.assert_array_equal(x, tr.generate(5))  # fixed noise: a deterministic measure


def test_tabular_data_is_scaled_into_the_unit_interval():
    from dlperf.workloads import real_data as data

    ds = data.load("cancer")
    assert ds.input_shape == (30,) and ds.classes == 2
    assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
    assert 0.0 <= ds.x_test.min() and ds.x_test.max() <= 1.0
    assert len(ds.x_train) + len(ds.x_test) == 569


def test_input_size_runs_are_steps_on_synthetic_inputs():
    specs = ex.specs("input-size", ex.Settings())
    assert {s.params["side"] for s in specs} == set(ex.INPUT_SIDES)
    assert min(ex.INPUT_SIDES) == 8 and max(ex.INPUT_SIDES) == 512
    assert {s.kind for s in specs} == {"step"} and {s.network for s in specs} == {"ffn", "cnn"}


@pytest.mark.slow
def test_an_input_over_the_memory_limit_is_a_stored_oom():
    from dlperf.engine.launch import run_isolated

    spec = RunSpec(network="cnn", size="small", batch_size=32, params={"side": 512},
                   measurement=FAST)
    r = run_isolated(spec, timeout_s=300, memory_limit_bytes=700 * 2**20)
    assert not r.ok and r.failure.reason == "oom", r.failure


# ----------------------------------------------------------------------------- report
def test_sections_state_what_the_store_shows(db, tmp_path):
    size_specs = ex.specs("input-size", ex.Settings(quick=True))
    layout = {s.options.arm.split(" ")[0]: s for s in ex.specs("layout", ex.Settings())}
    task = {s.options.arm: s for s in ex.specs("task", ex.Settings(quick=True))}
    with Store(db) as st:
        for s in size_specs:
            side = s.params["side"]
            if s.network == "cnn" and side == 512:
                from dlperf.core.spec import RunResult

                st.add(RunResult.failed(s, "oom", "exceeded --memory-limit"))
            else:
                st.add(_step_result(s, 1e-4 * side))
        st.add(_train_result(layout["shrinking"], [[0, 0.0, 0.1], [100, 2.0, 0.96]], True))
        st.add(_train_result(layout["growing"], [[0, 0.0, 0.1], [100, 3.0, 0.96]], True))
        st.add(_train_result(task["image classification: cnn"], [[0, 0, 0.1], [9, 4.0, 0.96]],
                             True))
        st.add(_train_result(task["image classification: ffn"], [[0, 0, 0.1], [9, 2.0, 0.96]],
                             True))
        sec = fx.input_section(st, tmp_path, fx.Filters())
        lay = report_ex.section("layout", st, tmp_path)
        tsk = report_ex.section("task", st, tmp_path)
    assert "ffn: from 8x8 to 512x512 (4096x the inputs) the time per mini-batch grew 64x" \
        in sec.text
    assert "512x512 did not run (oom)" in sec.text
    assert sec.images and len(sec.tables[0].rows) == 8
    # 100 steps each: 20 ms against 30 ms a mini-batch, 2 s against 3 s to target
    assert "growing layout's mini-batch took 1.50x the shrinking one's" in lay.text
    assert "reached the target in 1.50x the time" in lay.text
    assert "image classification: ffn reached the target first (2 s), not among the " \
        "guide's candidates" in tsk.text
    rows = {r[1]: r for r in tsk.tables[0].rows}
    assert rows["cnn"][5] == "yes" and rows["ffn"][5] == ""
