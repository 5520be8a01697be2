"""The pipeline's simulated schedule (perfmodel.schedule) against closed forms."""

from __future__ import annotations

import pytest

from dlperf.perfmodel import formulas as f
from dlperf.perfmodel.schedule import gpipe_step_time


@pytest.mark.parametrize("p,m", [(1, 1), (1, 4), (2, 8), (4, 16), (3, 2)])
def test_equal_stages_on_devices_of_their_own_follow_gpipe(p, m):
    """(m + p - 1) slots of one forward and one backward, then the update."""
    t = gpipe_step_time([1.0] * p, [2.0] * p, [0.0] * p, [0.5] * p, m)
    assert t == pytest.approx(f.pipeline_time(3.0, p, m) + 0.5)


def test_one_micro_batch_runs_the_stages_one_after_another():
    """Forward through both stages, backward through both, each message once each way
    (its sender busy while it goes); each stage's update after its last send."""
    t = gpipe_step_time([1.0, 2.0], [3.0, 4.0], [0.25, 0.0], [0.5, 9.0], 1)
    last = 1.0 + 0.25 + 2.0 + 4.0 + 0.25 + 9.0
    first = 1.0 + 0.25 + 2.0 + 4.0 + 0.25 + 3.0 + 0.5
    assert t == pytest.approx(max(first, last))


def test_stages_sharing_one_core_take_the_sum_of_their_work():
    """Processor sharing wastes no core time: with every stage on one block and messages
    that take no time, some stage always computes, so the step is all the stages' work
    added up."""
    fwd, bwd, upd, m = [1.0, 3.0, 0.5], [2.0, 5.0, 1.0], [0.1, 0.2, 0.3], 6
    t = gpipe_step_time(fwd, bwd, [0.0] * 3, upd, m, placement=[0, 0, 0])
    assert t == pytest.approx(sum(m * (a + b) + u for a, b, u in zip(fwd, bwd, upd, strict=True)))


def test_unequal_stages_wait_less_than_the_slowest_slot_times_the_slots():
    """The formula prices every slot at the slowest stage; the schedule lets the fast
    stages' slots be short, and no shorter than the slow stage's own work."""
    fwd, bwd, m = [0.1, 0.1, 0.1, 1.0], [0.2, 0.2, 0.2, 2.0], 8
    t = gpipe_step_time(fwd, bwd, [0.0] * 4, [0.0] * 4, m)
    assert m * 3.0 < t < f.pipeline_time(3.0, 4, m)
    # the slow last stage waits only for the first micro-batch to reach it
    assert t == pytest.approx(3 * 0.1 + m * 3.0 + 3 * 0.2)


def test_fewer_cores_than_stages_slow_the_step_but_less_than_a_share_each():
    """Four equal stages on two blocks: slower than four devices, faster than every
    stage at half speed throughout (stages that wait give their cores away)."""
    args = ([1.0] * 4, [2.0] * 4, [0.0] * 4, [0.0] * 4, 8)
    own = gpipe_step_time(*args)
    shared = gpipe_step_time(*args, placement=[0, 1, 0, 1])
    assert own < shared < 2 * own


def test_a_busy_stage_slows_only_the_stages_on_its_block():
    """One slow stage: alone on its block it loses nothing but the fill the light
    stages' sharing delays; beside a light stage it also pays that stage's work, at
    most."""
    fwd, bwd, m = [0.1, 0.1, 0.1, 1.0], [0.2, 0.2, 0.2, 2.0], 8
    own = gpipe_step_time(fwd, bwd, [0.0] * 4, [0.0] * 4, m)
    alone = gpipe_step_time(fwd, bwd, [0.0] * 4, [0.0] * 4, m, placement=[0, 1, 0, 2])
    shared = gpipe_step_time(fwd, bwd, [0.0] * 4, [0.0] * 4, m, placement=[0, 1, 0, 1])
    assert own <= alone <= own + 0.1 + 0.2
    assert alone < shared <= own + m * (0.1 + 0.2)


@pytest.mark.parametrize("args", [
    ([1.0], [1.0, 2.0], [0.0], [0.0], 2),
    ([1.0], [1.0], [0.0], [0.0], 0),
    ([], [], [], [], 1),
    ([1.0], [1.0], [0.0], [0.0], 1, [0, 1]),
])
def test_bad_schedules_are_refused(args):
    with pytest.raises(ValueError):
        gpipe_step_time(*args)
