"""The five experiments: their runs, resumability, and report sections built from the
store alone (results made up here, no training)."""

from __future__ import annotations

import pytest

from dlperf.api import render_report as render
from dlperf.api import report_sections as sections
from dlperf.cli import main
from dlperf.core.spec import Metrics, RunResult, RunSpec
from dlperf.core.store import Store
from dlperf.engine import plan
from dlperf.kinds import TrainOutcome
from dlperf.kinds.train import experiments as ex
from dlperf.kinds.train import experiments_section as report_ex
from dlperf.workloads.families import FAMILIES


def test_every_experiment_has_distinct_tagged_runs():
    assert ex.NAMES == (
        "shallow-vs-deep",
        "hidden-nodes",
        "init-scale",
        "dbn-pretraining",
        "layout",
        "task",
        "families",
        "input-size",
    )
    for name in ex.NAMES:
        for quick in (True, False):
            specs = ex.specs(name, ex.Settings(quick=quick))
            assert len({s.run_id for s in specs}) == len(specs) > 1
            if name not in ("families", "input-size"):
                assert {s.kind for s in specs} == {"train"}
                assert all(s.options.experiment == name for s in specs)
                assert len({s.options.arm for s in specs}) == len(specs)
    fam = ex.specs("families", ex.Settings(quick=True))
    assert {(s.network, s.size, s.threads) for s in fam} == {
        (n, z, t) for n in FAMILIES for z in ("small", "large") for t in (1, 2)
    }


def test_experiment_arms_vary_what_the_guide_names():
    arms = {s.options.arm: s for s in ex.specs("dbn-pretraining", ex.Settings())}
    pre, rnd = arms["pre-trained, gentle lr 0.02"], arms["random init, lr 0.1"]
    assert pre.params == rnd.params == {"depth": 3}  # the same deep network
    assert pre.options.pretrain_epochs > 0 and rnd.options.pretrain_epochs == 0
    hidden = [
        s.params["hidden"]
        for s in ex.specs("hidden-nodes", ex.Settings())
        if s.network == "autoencoder"
    ]
    assert min(hidden) < 64 <= max(hidden)  # fewer and more hidden nodes than the 64 inputs
    scales = {s.params["init_scale"] for s in ex.specs("init-scale", ex.Settings())}
    assert {0.1, "default"} <= scales and max(x for x in scales if x != "default") > 0.1
    s = ex.specs("init-scale", ex.Settings(threads=2, max_time_s=7))[0]
    assert s.threads == 2 and s.options.max_time_s == 7


def _train_result(spec: RunSpec, curve, reached: bool, **extra) -> RunResult:
    q = {
        "name": "accuracy",
        "higher_is_better": True,
        "unit": "",
        "target": 0.9,
        "reference": None,
        "description": "",
    }
    e = {
        "quality": q,
        "curve": curve,
        "target_reached": reached,
        "time_to_target_s": curve[-1][1] if reached else None,
        "steps_to_target": curve[-1][0] if reached else None,
        "final_quality": curve[-1][2],
        "best_quality": max(c[2] for c in curve),
        "time_per_epoch_s": 0.25,
        "epochs": 4.0,
        "train_s": curve[-1][1],
        "steps": int(curve[-1][0]),
        "dataset": "digits",
        "n_train": 1437,
        "n_test": 360,
        **extra,
    }
    if reached:
        return RunResult(spec=spec, status="ok", outcome=TrainOutcome(**e))
    return RunResult.failed(spec, "budget", "target not reached", outcome=TrainOutcome(**e))


def _step_result(spec: RunSpec, median: float) -> RunResult:
    m = Metrics(
        steps=3,
        median_s=median,
        mean_s=median,
        std_s=0,
        min_s=median,
        max_s=median,
        mad_s=0,
        iqr_s=0,
        cv=0,
        samples_per_s=spec.batch_size / median,
    )
    return RunResult(spec=spec, status="ok", metrics=m, step_times_s=[median] * 3)


def test_sections_are_rendered_from_the_store(db, tmp_path, capsys):
    specs = ex.specs("dbn-pretraining", ex.Settings(quick=True))
    fam = ex.specs("families", ex.Settings(quick=True))
    with Store(db) as st:
        st.add(
            _train_result(
                specs[0], [[0, 1.5, 0.1], [10, 2.0, 0.95]], True, pretrain_s=1.5, finetune_s=0.5
            )
        )
        st.add(
            _train_result(
                specs[2], [[0, 0.0, 0.1], [10, 0.6, 0.3]], False, pretrain_s=0.0, finetune_s=0.6
            )
        )
        gan = [s for s in fam if s.network == "gan" and s.size == "small"]
        for s, t in zip(gan, (0.004, 0.0025), strict=True):
            st.add(_step_result(s, t))
        assert len(plan.pending(specs, st)) == len(specs) - 2  # resumable
    out = tmp_path / "rep"
    with Store(db) as st:
        rep = render(st, out)
    names = [s.name for s in rep.sections]
    assert {"dbn_pretraining", "families"} <= set(names) and "shallow_vs_deep" not in names
    md = (out / "dbn_pretraining.md").read_text()
    assert "| pre-trained, gentle lr 0.02 | dbn | accuracy | 0.900 |" in md
    assert "1.5 s" in md and "target not reached" in md
    fam_md = (out / "families.md").read_text()
    assert "| gan* | small |" in fam_md and "4 ms | 2.5 ms | 1.60x |" in fam_md
    assert "one discriminator update" in fam_md
    assert (out / "dbn_pretraining.png").stat().st_size > 1000
    assert (out / "families.png").stat().st_size > 1000
    html = (out / "report.html").read_text()
    assert "one generator update" in html and html.count("data:image/png") >= 2
    # one section builder per experiment, listed once
    assert sum(getattr(b, "__name__", "").startswith("experiment_") for b in sections()) == 8


def test_experiment_dry_run_lists_and_runs_nothing(db, capsys):
    assert main(["experiment", "init-scale", "--quick", "--dry-run", "--db", str(db)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # however the console wrapped it
    assert "4 to run" in out and "ffn[small]" in out and "ffn init 0.1" in out
    with Store(db) as st:
        assert st.count() == 0


@pytest.mark.parametrize("name", ["shallow-vs-deep", "hidden-nodes", "init-scale"])
def test_train_sections_plot_their_curves(name, db, tmp_path):
    specs = ex.specs(name, ex.Settings(quick=True))
    with Store(db) as st:
        for i, s in enumerate(specs):
            st.add(_train_result(s, [[0, 0.0, 0.1], [5, 0.5 + i, 0.5 + i / 20]], i % 2 == 0))
        sec = report_ex.section(name, st, tmp_path)
    assert sec.images and sec.images[0].stat().st_size > 1000
    assert [r[0] for r in sec.tables[0].rows] == [s.options.arm for s in specs]
