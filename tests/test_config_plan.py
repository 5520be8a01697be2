"""Sweep files, flags and the plan."""

from __future__ import annotations

import pytest

from dlperf.core.errors import UsageError
from dlperf.core.spec import RunResult
from dlperf.core.store import Store
from dlperf.engine import config, plan


def test_sweep_file_expands_to_the_product(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text(
        '[sweep]\nnetworks = ["fcn5", "alexnet"]\nthreads = [1, 2]\nbatch_sizes = "default"\n'
        'repeat = 2\nmemory_limit = "2GiB"\n[measurement]\nmin_time_s = 0.5\n'
    )
    cfg = config.load_sweep_file(f)
    assert cfg.memory_limit == 2 * 2**30
    specs = plan.expand(cfg)
    assert len(specs) == 2 * 2 * 2
    assert {(s.network, s.batch_size) for s in specs} == {("fcn5", 64), ("alexnet", 16)}
    assert all(s.variant == "eager" and s.measurement.min_time_s == 0.5 for s in specs)
    # every configuration's first repetition comes before any second one
    assert [s.repeat for s in specs] == [0] * 4 + [1] * 4


def test_batch_sweep_and_flag_override(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[sweep]\nnetworks = ["resnet50"]\nbatch_sizes = "sweep"\n')
    assert [s.batch_size for s in plan.expand(config.load_sweep_file(f))] == [8, 16, 32, 64]
    cfg = config.load_sweep_file(f, batch_sizes=[4])
    assert [s.batch_size for s in plan.expand(cfg)] == [4]


@pytest.mark.parametrize(
    "text, message",
    [
        ("[sweep\nnetworks=1", "malformed TOML"),
        ('[sweep]\nnetworks = ["fcn6"]\n', "unknown network 'fcn6'"),
        ('[sweep]\nnetworks = ["fcn5"]\nthreads = [0]\n', "thread counts must be at least 1"),
        ('[sweep]\nnetworks = ["fcn5"]\nbatch_sizes = [0]\n', "batch sizes must be at least 1"),
        ('[sweep]\nnetworks = ["fcn5"]\nspeed = "fast"\n', "speed"),
        ('[sweep]\nnetworks = ["fcn5"]\nframeworks = ["caffe"]\n', "unknown framework 'caffe'"),
        ('[sweep]\nnetworks = ["fcn5"]\nmemory_limit = "lots"\n', "bad memory size"),
        ('[sweeps]\nnetworks = ["fcn5"]\n', "unknown table [sweeps]"),
        # TOML has nan and inf literals: no number of dlperf's takes them
        ('[sweep]\nnetworks = ["fcn5"]\ntimeout = nan\n', "timeout"),
        ('[sweep]\nnetworks = ["fcn5"]\ntimeout = inf\n', "timeout"),
        ('[sweep]\nnetworks = ["fcn5"]\ntimeout = 0\n', "timeout"),
        ('[sweep]\nnetworks = ["fcn5"]\nmemory_limit = inf\n', "bad memory size"),
        ('[sweep]\nnetworks = ["fcn5"]\nseed = -1\n', "seed"),
        ('[sweep]\nnetworks = ["ffn"]\nparams = {init_scale = nan}\n', "init_scale"),
        ('[sweep]\nnetworks = ["fcn5"]\nprecisions = ["fp8"]\n', "precisions"),
        ('[sweep]\nnetworks = ["fcn5"]\n[measurement]\nmin_time_s = nan\n', "min_time_s"),
        ('[sweep]\nnetworks = ["fcn5"]\n[measurement]\nwarmup_max_time_s = inf\n',
         "warmup_max_time_s"),
        ('[sweep]\nnetworks = ["fcn5"]\n[measurement]\nmin_steps = 0\n', "min_steps"),
        ('[sweep]\nnetworks = ["fcn5"]\n[measurement]\nmin_steps = 20\nmax_steps = 10\n',
         "min_steps (20) is above max_steps (10)"),
    ],
)
def test_bad_sweep_files_give_one_line_errors(tmp_path, text, message):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(UsageError) as e:
        config.load_sweep_file(f)
    assert message in str(e.value)
    assert "\n" not in str(e.value)
    assert str(f) in str(e.value)


def test_missing_sweep_file():
    with pytest.raises(UsageError, match="not found"):
        config.load_sweep_file("/nonexistent/sweep.toml")


def test_parse_bytes():
    assert config.parse_bytes("512MiB") == 512 * 2**20
    assert config.parse_bytes("1.5GB") == 1_500_000_000
    with pytest.raises(UsageError):
        config.parse_bytes("-3GB")


def test_pending_skips_what_the_store_has(db):
    cfg = config.build(networks=["fcn5"], threads=[1, 2, 4])
    specs = plan.expand(cfg)
    with Store(db) as st:
        st.add(RunResult.failed(specs[1], "timeout", "slow"))
        assert [s.threads for s in plan.pending(specs, st)] == [1, 4]
        assert [s.threads for s in plan.pending(specs, st, retry_failed=True)] == [1, 2, 4]
        assert len(plan.pending(specs, st, force=True)) == 3


def test_variants_all_and_unknown():
    cfg = config.build(networks=["fcn5"], variants=["all"])
    assert [s.variant for s in plan.expand(cfg)] == ["eager", "compile"]
    with pytest.raises(UsageError, match="no variant"):
        plan.expand(config.build(networks=["fcn5"], variants=["xla"]))


def test_precisions_are_an_axis_of_the_sweep(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[sweep]\nnetworks = ["fcn5"]\ndevices = ["gpu"]\nprecisions = ["fp32", "bf16"]\n')
    specs = plan.expand(config.load_sweep_file(f))
    assert [s.precision for s in specs] == ["fp32", "bf16"]
    assert specs[0].config_id != specs[1].config_id
    assert [s.precision for s in plan.expand(config.build(networks=["fcn5"]))] == ["fp32"]
