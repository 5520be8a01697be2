"""The warm-up and timing policy, on scripted step times (no clock involved)."""

from __future__ import annotations

import pytest

from dlperf.core import stats, timing
from dlperf.core.settings import QUICK_MEASUREMENT
from dlperf.core.spec import Measurement


def scripted(monkeypatch, times):
    it = iter(times)
    monkeypatch.setattr(timing, "_timed", lambda step, sync: next(it))


def test_cold_steps_are_discarded_and_the_sample_starts_after_the_steady_pair(monkeypatch):
    scripted(monkeypatch, [3.0, 1.5, 1.02, 1.0, 1.01, 0.99, 1.0, 1.03])
    t = timing.measure(lambda: None, lambda: None,
                       Measurement(min_steps=4, min_time_s=0.1, settle_tolerance=0.05))
    # the cold step, a step that disagreed with the next, and the pair that agreed
    assert t.warmup_s == [3.0, 1.5, 1.02, 1.0]
    assert t.steps_s == [1.01, 0.99, 1.0, 1.03]
    assert t.settled


def test_the_first_steps_are_always_discarded(monkeypatch):
    # the first two agree, but warmup_min_steps=2 discards both anyway; the next two
    # settle, and the sample follows them
    scripted(monkeypatch, [1.0] * 7)
    t = timing.measure(lambda: None, lambda: None,
                       Measurement(warmup_min_steps=2, min_steps=3, min_time_s=0.1))
    assert len(t.warmup_s) == 4 and len(t.steps_s) == 3 and t.settled


def test_unsettled_warmup_is_flagged_and_timing_starts_after_the_budget(monkeypatch):
    scripted(monkeypatch, [1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0])
    t = timing.measure(lambda: None, lambda: None,
                       Measurement(warmup_max_steps=4, min_steps=3, min_time_s=0.1))
    assert not t.settled
    assert t.warmup_s == [1.0, 2.0, 1.0, 2.0]
    assert t.steps_s == [1.0, 2.0, 1.0]


def test_min_time_calibrates_the_number_of_steps(monkeypatch):
    scripted(monkeypatch, [0.5] + [0.1] * 100)
    t = timing.measure(lambda: None, lambda: None, Measurement(min_steps=3, min_time_s=2.0))
    assert len(t.warmup_s) == 3  # the cold step and the settling pair
    assert len(t.steps_s) == 20  # 2 s / 0.1 s
    assert t.wall_s == pytest.approx(2.0)


def test_progress_callback_sees_every_step(monkeypatch):
    scripted(monkeypatch, [2.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    seen = []
    timing.measure(lambda: None, lambda: None, Measurement(min_steps=3, min_time_s=0.1),
                   on_step=lambda phase, s: seen.append(phase))
    assert seen == ["warmup"] * 3 + ["step"] * 3


def test_a_quick_sample_never_contains_the_settling_pair(monkeypatch):
    # the pair after the cold step agrees exactly; the steps after it do not
    scripted(monkeypatch, [5.0, 1.0, 1.0, 1.0, 1.5])
    t = timing.measure(lambda: None, lambda: None, QUICK_MEASUREMENT)
    assert t.warmup_s == [5.0, 1.0, 1.0]
    assert t.steps_s == [1.0, 1.5]


def test_quick_mode_can_warn_of_an_unstable_measurement(monkeypatch):
    # with the settling pair as the sample, the spread was 0 by construction and the
    # warning could never fire, however much the steps after it varied
    scripted(monkeypatch, [5.0, 1.0, 1.0, 1.0, 1.5])
    t = timing.measure(lambda: None, lambda: None, QUICK_MEASUREMENT)
    assert stats.instability_warning(stats.summarize(t.steps_s).robust_cv) is not None


def test_a_given_clock_times_each_step_instead_of_the_wall_clock():
    """The device's own clock (a GPU's events) replaces the wall time, step by step,
    in the warm-up rule and in the sample."""
    device = iter([0.5, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2])
    m = Measurement(min_time_s=1e-9, min_steps=3, warmup_min_steps=1, warmup_max_steps=5)
    t = timing.measure(lambda: None, lambda: None, m, clock=lambda: next(device))
    assert t.warmup_s == [0.5, 0.2, 0.2]
    assert t.steps_s == [0.2, 0.2, 0.2]


def test_with_a_clock_the_sample_is_as_long_as_min_time_in_wall_time(monkeypatch):
    """A device clock of a few microseconds per step must not stretch a sample meant
    to last ``min_time_s`` of wall time into thousands of steps."""
    monkeypatch.setattr(timing, "_timed", lambda step, sync: 0.01)  # wall: 10 ms a step
    m = Measurement(min_time_s=0.05, min_steps=2, warmup_min_steps=1, warmup_max_steps=4)
    t = timing.measure(lambda: None, lambda: None, m, clock=lambda: 1e-5)
    assert len(t.steps_s) == 5
    assert t.wall_s == pytest.approx(0.05)


# ------------------------------------------------------- the window rule (calibration)
WINDOW = Measurement(min_steps=3, min_time_s=0.1, settle_tolerance=0.1, warmup_max_steps=4)


def test_a_window_of_agreeing_steps_is_the_sample_itself(monkeypatch):
    """Long steps: the first three after the cold one that agree are the sample, two
    steps fewer than measure's settling pair and sample after it."""
    scripted(monkeypatch, [3.0, 1.0, 1.05, 0.98, 7.0])
    t = timing.measure_window(lambda: None, lambda: None, WINDOW)
    assert t.warmup_s == [3.0] and t.steps_s == [1.0, 1.05, 0.98] and t.settled
    assert t.wall_s == pytest.approx(3.03)


def test_a_window_waits_out_a_slow_step(monkeypatch):
    # a pair of 1.0 and 1.0 would have settled before the slow 1.5; a window holding it
    # does not agree, and the sample is the first window after it
    scripted(monkeypatch, [3.0, 1.0, 1.0, 1.5, 1.0, 1.0, 1.02, 9.0])
    t = timing.measure_window(lambda: None, lambda: None, WINDOW)
    assert t.steps_s == [1.0, 1.0, 1.02] and t.warmup_s == [3.0, 1.0, 1.0, 1.5]
    assert t.settled


def test_a_window_that_never_agrees_takes_the_last_steps_unsettled(monkeypatch):
    scripted(monkeypatch, [3.0] + [1.0, 2.0] * 10)
    t = timing.measure_window(lambda: None, lambda: None, WINDOW)
    assert not t.settled
    assert len(t.warmup_s) + len(t.steps_s) == WINDOW.warmup_max_steps + WINDOW.min_steps
    assert t.steps_s == [2.0, 1.0, 2.0]


def test_a_warm_step_discards_nothing(monkeypatch):
    scripted(monkeypatch, [1.0, 1.0, 1.0, 9.0])
    t = timing.measure_window(lambda: None, lambda: None, WINDOW, discard=0)
    assert t.warmup_s == [] and t.steps_s == [1.0, 1.0, 1.0]


def test_short_steps_are_timed_by_measures_rule(monkeypatch):
    """Three 10 ms steps do not fill min_time_s: the window gives way to measure's
    settling pair and a sample of 10 steps, the steps already run counted as warm-up."""
    script = [0.5, 0.012, 0.01] + [0.01] * 20
    scripted(monkeypatch, script)
    window = timing.measure_window(lambda: None, lambda: None, WINDOW)
    scripted(monkeypatch, script)
    plain = timing.measure(lambda: None, lambda: None, WINDOW)
    assert window.warmup_s == plain.warmup_s == [0.5, 0.012, 0.01, 0.01]
    assert window.steps_s == plain.steps_s and len(window.steps_s) == 10
    assert window.settled and window.wall_s == pytest.approx(plain.wall_s)


def test_summary_statistics():
    s = stats.summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.median == 3.0 and s.min == 1.0 and s.max == 100.0
    assert s.mad == 1.0  # |x - 3| = 2, 1, 0, 1, 97 -> median 1
    assert s.iqr == pytest.approx(2.0)  # 4 - 2
    assert s.robust_cv == pytest.approx(1.4826 / 3)
    assert stats.instability_warning(0.01) is None
    assert "--min-time" in stats.instability_warning(0.2)


def _fresh_pages_step(pages: int):
    """A step that maps ``pages`` new pages, touches each and unmaps them (no huge pages,
    whatever the machine's setting), as a step whose results are made afresh does."""
    import mmap

    size = pages * mmap.PAGESIZE

    def step() -> None:
        m = mmap.mmap(-1, size)
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            m.madvise(mmap.MADV_NOHUGEPAGE)
        for off in range(0, size, mmap.PAGESIZE):
            m[off] = 1
        m.close()

    return step


@pytest.mark.parametrize("measure", [timing.measure, timing.measure_window])
def test_the_timed_steps_count_the_new_pages_they_touch(measure):
    """Minor faults and kernel time are the timed steps' own: a step that touches 2048
    new pages faults at least that often per step, one that touches none far less."""
    m = Measurement(min_steps=3, min_time_s=0.01, warmup_max_steps=4)
    t = measure(_fresh_pages_step(2048), lambda: None, m)
    n = len(t.steps_s)
    assert t.minor_faults >= 2048 * n and t.system_s >= 0.0
    quiet = measure(lambda: None, lambda: None, m)
    assert quiet.minor_faults < 200 * len(quiet.steps_s)


def test_the_faults_line_shows_the_new_pages_and_the_kernels_share(monkeypatch):
    from dlperf.cli.run import faults_line
    from dlperf.core.aggregate import aggregate
    from tests.report_fixtures import result

    def row(faults: float | None, system: float | None):
        r = result("fcn5", 1, 2.0)
        got = {"minor_faults_per_step": faults, "system_s_per_step": system}
        (out,) = aggregate([r.model_copy(update={"metrics": r.metrics.model_copy(update=got)})])
        return out

    monkeypatch.setattr("resource.getpagesize", lambda: 4096)
    line = faults_line(row(262144.0, 0.5))
    assert "262,144 minor faults (1 GiB)" in line and "500 ms, 25.0% of the step" in line
    assert faults_line(row(None, None)) is None  # a run an older dlperf stored
