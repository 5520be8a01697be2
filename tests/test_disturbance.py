"""A measurement notices other processes on its CPUs (``core.disturbance``): the arithmetic
on /proc/stat's counters, and a real busy loop pinned beside a timed loop."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from dlperf.core import disturbance, timing
from dlperf.core.disturbance import Reading
from dlperf.core.spec import Measurement

linux = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="no /proc/stat")


def test_other_share_is_the_cpus_busy_time_beyond_the_process_own():
    a = Reading(busy_s=10.0, steal_s=1.0, own_s=5.0, at=100.0, cpus=(0, 1))
    b = Reading(busy_s=13.0, steal_s=1.2, own_s=6.0, at=102.0, cpus=(0, 1))
    d = disturbance.between(a, b)
    # 3 s busy on 2 CPUs over 2 s, 1 s of it this process's: 2 s of 4 to others
    assert d.other_share == pytest.approx(0.5) and d.steal_share == pytest.approx(0.05)
    assert d.disturbed and "50% of the 2 CPUs" in d.describe() and "steal 5%" in d.describe()
    quiet = Reading(busy_s=11.0, steal_s=1.0, own_s=6.0, at=102.0, cpus=(0, 1))
    assert not disturbance.between(a, quiet).disturbed
    too_short = Reading(busy_s=10.0, steal_s=1.0, own_s=5.0, at=100.1, cpus=(0, 1))
    assert disturbance.between(a, too_short) is None
    assert disturbance.between(None, b) is None


@linux
def test_a_busy_loop_on_the_same_cpu_is_noticed():
    cpu = min(os.sched_getaffinity(0))
    old = os.sched_getaffinity(0)
    # at least 2000 steps of about 0.3 ms: a window long enough for the CPU counters (0.2 s)
    # even when a slow warm-up step (a busy machine) sets the estimate, and so the count,
    # too high for min_time_s alone
    m = Measurement(min_time_s=0.6, min_steps=2000, max_steps=10**6)

    def step():
        sum(range(20000))

    os.sched_setaffinity(0, {cpu})
    try:
        quiet = timing.measure(step, lambda: None, m)
        hog = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, "
                                f"{{{cpu}}})\nwhile True: pass"])
        try:
            time.sleep(0.3)
            busy = timing.measure(step, lambda: None, m)
        finally:
            hog.kill()
            hog.wait()
    finally:
        os.sched_setaffinity(0, old)
    assert busy.disturbance is not None and busy.disturbance.disturbed
    # a busy loop on its one CPU takes about half of it, whatever else the machine does
    assert busy.disturbance.other_share > quiet.disturbance.other_share + 0.1
