"""dlperf compare: the interval methods against closed forms and simulation, matching of
two sides, verdicts, the exit status, and bad input (one line, exit 2)."""

from __future__ import annotations

import json
import math
import random
import time

import numpy as np
import pytest
from scipy import stats as sps

from dlperf.cli import main
from dlperf.compare import stats
from dlperf.core.spec import Metrics, RunResult, RunSpec
from dlperf.core.store import Store


def process(median: float, *, repeat: int, network: str = "fcn5", threads: int = 1,
            torch: str = "2.13.0+cpu", spread: float = 0.01, seed: int = 0,
            started: float | None = None, probe: dict[str, float] | None = None) -> RunResult:
    """One worker process's result: 20 step times around ``median``."""
    rng = random.Random(seed)
    steps = [median * math.exp(rng.gauss(0, spread)) for _ in range(20)]
    med = float(np.median(steps))
    mad = float(np.median(np.abs(np.asarray(steps) - med)))
    spec = RunSpec(network=network, size="tiny", threads=threads, batch_size=8, repeat=repeat)
    m = Metrics(steps=20, median_s=med, mean_s=float(np.mean(steps)), std_s=float(np.std(steps)),
                min_s=min(steps), max_s=max(steps), mad_s=mad, iqr_s=mad * 2,
                cv=float(np.std(steps) / np.mean(steps)), samples_per_s=8 / med,
                speed_probe=probe)
    t0 = started or time.time()
    return RunResult(spec=spec, status="ok", metrics=m, step_times_s=steps, started_at=t0,
                     finished_at=t0 + 1, software={"framework": "torch", "torch": torch})


def fill(path, medians_by_network: dict[str, list[float]], **kw) -> None:
    with Store(path) as s:
        for net, medians in medians_by_network.items():
            for i, med in enumerate(medians):
                s.add(process(med, repeat=i, network=net, seed=hash((net, i, med)) % 1000, **kw))


# ----------------------------------------------------------------------------- statistics
def test_welch_interval_is_welchs_test_on_the_log_medians():
    a, b = [1.00, 1.02, 0.99, 1.01], [1.05, 1.08, 1.04]
    i = stats.welch_log_ratio(a, b)
    la, lb = np.log(a), np.log(b)
    assert i.ratio == pytest.approx(math.exp(lb.mean() - la.mean()))
    p = sps.ttest_ind(lb, la, equal_var=False).pvalue
    assert (i.low > 1) == (p < 0.05)  # the interval excludes 1 exactly when the test rejects
    assert i.verdict == "slower"
    # its half-width is Welch's: t(df) x se on the log scale
    se = math.sqrt(la.var(ddof=1) / 4 + lb.var(ddof=1) / 3)
    assert math.log(i.high / i.ratio) == pytest.approx(sps.t.ppf(0.975, i.df) * se)


def test_bootstrap_separates_distinct_sides_and_not_equal_ones():
    rng = np.random.default_rng(1)
    a = [list(rng.normal(1.0, 0.01, 20) * rng.normal(1, 0.01)) for _ in range(5)]
    same = [list(rng.normal(1.0, 0.01, 20) * rng.normal(1, 0.01)) for _ in range(5)]
    slow = [list(np.asarray(p) * 1.15) for p in same]
    assert stats.hierarchical_bootstrap(a, slow).verdict == "slower"
    assert stats.hierarchical_bootstrap(slow, a).verdict == "faster"
    i = stats.hierarchical_bootstrap(a, same)
    assert i.low < 1 < i.high or abs(i.ratio - 1) < 0.01


def test_welch_false_alarms_and_power_on_simulated_processes():
    """3 processes per side whose medians vary 2% between processes: an A/A pair is called
    a change about 5% of the time, a 10% slowdown found nearly always."""
    rng = np.random.default_rng(7)
    trials = 600

    def side(scale):
        return list(scale * np.exp(rng.normal(0, 0.02, 3)))

    alarms = sum(stats.welch_log_ratio(side(1), side(1)).verdict != "no significant change"
                 for _ in range(trials)) / trials
    found = sum(stats.welch_log_ratio(side(1), side(1.1)).verdict == "slower"
                for _ in range(trials)) / trials
    assert 0.02 <= alarms <= 0.08
    assert found >= 0.9


def test_summary_is_the_geometric_mean_with_a_combined_interval():
    i1 = stats.welch_log_ratio([1, 1.01, 0.99], [1.1, 1.11, 1.09])
    i2 = stats.welch_log_ratio([2, 2.02, 1.98], [2, 2.01, 1.99])
    s = stats.geometric_summary([i1, i2])
    assert s.ratio == pytest.approx(math.sqrt(i1.ratio * i2.ratio))
    assert s.low < s.ratio < s.high
    assert (s.log_se * 2) ** 2 == pytest.approx(i1.log_se ** 2 + i2.log_se ** 2)


def test_processes_needed_grows_with_spread_and_shrinks_with_the_threshold():
    quiet, noisy = [1, 1.01, 0.99], [1, 1.1, 0.9]
    assert stats.processes_needed(quiet, quiet, 0.05) == stats.MIN_PROCESSES
    assert stats.processes_needed(noisy, noisy, 0.05) > stats.processes_needed(quiet, quiet, 0.05)
    assert stats.processes_needed(noisy, noisy, 0.02) > stats.processes_needed(noisy, noisy, 0.05)


# ----------------------------------------------------------------------------- the command
def test_two_stores_slower_side_found_and_fails_the_ci_gate(tmp_path, capsys):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    fill(a, {"fcn5": [1.0, 1.01, 0.99], "alexnet": [2.0, 2.02, 1.98]})
    fill(b, {"fcn5": [1.2, 1.21, 1.19], "alexnet": [2.0, 2.01, 1.99]})
    assert main(["compare", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert "slower" in text and "no significant change" in text and "geometric mean" in text
    assert main(["compare", str(a), str(b), "--fail-on-slowdown", "5%"]) == 1
    assert "slower by more than 5%" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--fail-on-slowdown", "30%"]) == 0
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--json", "--out", str(tmp_path / "cmp")]) == 0
    data = json.loads(capsys.readouterr().out)
    verdicts = {c["configuration"].split()[0]: c["verdict"] for c in data["comparisons"]}
    assert verdicts == {"fcn5[tiny]": "slower", "alexnet[tiny]": "no significant change"}
    assert 1.0 < data["summary"]["ratio"] < 1.2
    for suffix in ("md", "csv", "json", "png"):
        assert (tmp_path / "cmp" / f"compare.{suffix}").stat().st_size > 0


def test_two_versions_in_one_store_are_selected_by_package(tmp_path, capsys):
    db = tmp_path / "r.db"
    fill(db, {"fcn5": [1.0, 1.01, 0.99]}, torch="2.12.0+cpu", started=1.0)
    fill(db, {"fcn5": [0.8, 0.81, 0.79]}, torch="2.13.0+cpu")
    assert main(["compare", "torch=2.12", "torch=2.13", "--db", str(db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["comparisons"][0]["verdict"] == "faster"
    assert "torch 2.13.0+cpu" in data["b"]
    assert main(["compare", "torch=2.12", "torch=2.11", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "selects no measured results" in err and "2.12.0+cpu" in err


def test_a_side_of_one_process_says_how_many_it_needs(tmp_path, capsys):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    fill(a, {"fcn5": [1.0], "alexnet": [2.0, 2.02, 1.98]})
    fill(b, {"fcn5": [1.2], "alexnet": [2.0, 2.01, 1.99]})
    assert main(["compare", str(a), str(b)]) == 0
    assert "too few repetitions" in capsys.readouterr().out
    fill(a, {"lstm": [1.0]})
    a2, b2 = tmp_path / "a2.db", tmp_path / "b2.db"
    fill(a2, {"fcn5": [1.0]})
    fill(b2, {"fcn5": [1.1]})
    assert main(["compare", str(a2), str(b2)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--repeat 3" in err[0]


def test_a_disturbed_side_is_named(tmp_path, capsys):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    fill(a, {"fcn5": [1.0, 1.01, 0.99]})
    fill(b, {"fcn5": [1.0, 1.3, 0.9]}, spread=0.2)
    main(["compare", str(a), str(b), "--json"])
    c = json.loads(capsys.readouterr().out)["comparisons"][0]
    assert c["a_disturbed"] is None
    assert "unstable" in c["b_disturbed"] and "processes differ" in c["b_disturbed"]


def test_a_machine_that_changed_speed_between_the_sides_is_named(tmp_path, capsys):
    """Both sides on one machine, B's processes probed 25% slower in memory: the
    comparison says part of its difference may be the machine's."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    probe = {"compute": 5e-4, "memory": 9e-3}
    fill(a, {"fcn5": [1.0, 1.01, 0.99], "alexnet": [2.0, 2.02, 1.98]}, probe=probe)
    fill(b, {"fcn5": [1.2, 1.21, 1.19]}, probe={**probe, "memory": 9e-3 * 1.25})
    fill(b, {"alexnet": [2.0, 2.01, 1.99]}, probe={**probe, "compute": 5.2e-4})
    assert main(["compare", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert "memory copy took 25% longer than with A" in " ".join(text.split())
    assert main(["compare", str(a), str(b), "--json"]) == 0
    drift = {c["configuration"].split()[0]: c["speed_drift"]
             for c in json.loads(capsys.readouterr().out)["comparisons"]}
    assert drift["fcn5[tiny]"]["part"] == "memory"
    assert drift["fcn5[tiny]"]["change"] == pytest.approx(0.25)
    assert drift["alexnet[tiny]"]["change"] == pytest.approx(0.04)


@pytest.mark.parametrize("argv, says", [
    (["compare", "nothere.db", "b.db"], "no such file"),
    (["compare", "a.db", "a.db"], "select the same results"),
    (["compare", "a.db", "other.db"], "no configuration in common"),
    (["compare", "a.db,since=yesterday", "b.db"], "not a date"),
    (["compare", "a.db,b.db", "b.db"], "two files"),
    (["compare", "a.db", "b.db", "--fail-on-slowdown=-5%"], "must be above 0"),
])
def test_bad_input_is_one_line_and_status_2(tmp_path, monkeypatch, capsys, argv, says):
    monkeypatch.chdir(tmp_path)
    fill(tmp_path / "a.db", {"fcn5": [1.0, 1.01, 0.99]})
    fill(tmp_path / "b.db", {"fcn5": [1.0, 1.01, 0.99]})
    fill(tmp_path / "other.db", {"alexnet": [1.0, 1.01, 0.99]})
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_the_injection_hook_slows_every_step_and_says_so(monkeypatch):
    from dlperf.core import timing
    from dlperf.core.spec import Measurement

    m = Measurement(min_time_s=0.05, min_steps=5, warmup_max_steps=3)

    def step():
        time.sleep(0.004)

    plain = timing.measure(step, lambda: None, m)
    assert timing.injection_warning() is None
    monkeypatch.setenv(timing.INJECT_VAR, "0.5")
    slowed = timing.measure(step, lambda: None, m)
    ratio = np.median(slowed.steps_s) / np.median(plain.steps_s)
    assert 1.35 < ratio < 1.7
    assert "50% slower on purpose" in timing.injection_warning()


def test_a_sweep_in_another_environment_is_kept_apart_and_compared(tmp_path, monkeypatch,
                                                                    capsys):
    """--env runs the framework with another environment's interpreter (here this one,
    named as torch 2.99.0's), stores its runs apart, and compare matches them with dlperf's
    own."""
    import sys

    monkeypatch.setenv("DLPERF_TORCH_2_99_0_PYTHON", sys.executable)
    db = tmp_path / "r.db"
    sweep = ["sweep", "--networks", "fcn5", "--size", "tiny", "--threads", "1", "--repeat",
             "3", "--min-time", "0.05", "--db", str(db)]
    assert main(sweep) == 0
    assert main([*sweep, "--env", "torch==2.99.0"]) == 0
    with Store(db) as s:
        runs = [r for r in s.results(kind="step") if r.ok]
    assert sorted(r.spec.env for r in runs) == [""] * 3 + ["torch-2.99.0"] * 3
    assert len({r.spec.config_id for r in runs}) == 2  # kept apart
    assert len({r.spec.setup_free_id for r in runs}) == 1  # the same configuration
    capsys.readouterr()
    assert main(["compare", "env=default", "env=torch==2.99.0", "--db", str(db), "--json"]) == 0
    [c] = json.loads(capsys.readouterr().out)["comparisons"]
    assert (c["a_processes"], c["b_processes"]) == (3, 3) and c["verdict"] != "too few repetitions"
    # the two environments' runs of one configuration are not one side
    assert main(["compare", str(db), f"{db},since=2000-01-01,until=2000-01-02"]) == 2
    assert main(["compare", str(db), "env=default", "--db", str(db)]) == 2
    assert "select one version per side" in capsys.readouterr().err
    assert main([*sweep, "--env", "torch==2.98.0"]) == 2
    assert "dlperf setup torch==2.98.0" in capsys.readouterr().err
    assert main([*sweep, "--env", "jax==0.10.1"]) == 2
    assert "which the sweep does not run" in capsys.readouterr().err
    assert main([*sweep, "--env", "torch>=2"]) == 2
    assert "is not FRAMEWORK==VERSION" in capsys.readouterr().err
