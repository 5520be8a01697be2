"""The worker round trip and the failures the parent must record while a sweep goes on."""

from __future__ import annotations

import pytest

from dlperf import api
from dlperf.core.spec import Measurement, RunSpec
from dlperf.core.store import Store
from dlperf.engine import config, plan
from dlperf.engine.launch import run_isolated
from dlperf.engine.runner import Runner
from dlperf.engine.worker import execute
from tests.conftest import FAST

pytestmark = pytest.mark.slow


def test_execute_in_process_measures_a_tiny_network():
    r = execute(RunSpec(network="fcn5", size="tiny", batch_size=8, measurement=FAST))
    assert r.ok, r.failure
    m = r.metrics
    assert m.steps == len(r.step_times_s) >= FAST.min_steps
    assert m.min_s <= m.median_s <= m.max_s
    assert m.flops_per_step == 262144  # torch's counter, == closed form (test_workloads)
    assert m.samples_per_s == pytest.approx(8 / m.median_s)
    assert r.threads_in_force == 1 and r.param_count == 6304
    assert m.peak_rss_bytes > 0 and r.software["framework"] == "torch"
    assert 0 < m.file_rss_bytes < m.peak_rss_bytes  # the libraries' pages, part of the peak
    assert m.minor_faults_per_step is not None and m.minor_faults_per_step >= 0
    assert r.software["allocator"]  # this process's, whatever the machine's environment
    assert m.system_s_per_step is not None and 0 <= m.system_s_per_step <= m.max_s


def test_worker_round_trip_in_a_fresh_process():
    r = run_isolated(RunSpec(network="lstm32", size="tiny", batch_size=4, threads=2,
                             measurement=FAST), timeout_s=120)
    assert r.ok, r.failure
    assert r.threads_in_force == 2
    assert len(r.cpus) == min(2, len(__import__("os").sched_getaffinity(0)))
    assert r.metrics.flops_per_step > 0 and r.step_times_s


def test_hard_crash_is_recorded_as_crash(monkeypatch):
    monkeypatch.setenv("DLPERF_WORKER_FAULT", "segfault")
    r = run_isolated(RunSpec(network="fcn5", size="tiny", batch_size=4, measurement=FAST),
                     timeout_s=120)
    assert not r.ok
    assert r.failure.reason == "crash"
    assert "SIGSEGV" in r.failure.message


def test_timeout_keeps_the_steps_already_measured():
    # a 600 s minimum measuring time cannot finish within a 20 s timeout (four times what a
    # worker takes to start here, long enough on a busy machine)
    spec = RunSpec(network="fcn5", size="tiny", batch_size=4,
                   measurement=Measurement(min_time_s=600, max_steps=10**9, warmup_max_steps=2))
    r = run_isolated(spec, timeout_s=20)
    assert not r.ok and r.failure.reason == "timeout"
    assert "20 s" in r.failure.message
    # what was measured before the kill is kept
    assert len(r.warmup_times_s) == 2 and len(r.step_times_s) > 10


def test_memory_limit_is_enforced():
    # full-size fcn5 holds 472 MB of weights plus as much again of gradients
    spec = RunSpec(network="fcn5", batch_size=64, measurement=FAST)
    r = run_isolated(spec, timeout_s=120, memory_limit_bytes=700 * 2**20)
    assert not r.ok and r.failure.reason == "oom"
    assert "memory-limit" in r.failure.message


def test_a_peak_between_the_watchs_reads_counts_against_the_limit():
    """The watch reads each process's high-water mark, not only its memory now; and a run
    that ended over the limit before the watch read it is out of memory, its steps kept."""
    import os

    import psutil

    from dlperf.engine.launch.isolated import over_limit
    from dlperf.engine.launch.watch import tree_resident

    before = psutil.Process().memory_info().rss
    big = bytearray(256 * 2**20)  # touched: resident, then freed (the process's peak stays)
    del big
    assert psutil.Process().memory_info().rss < before + 128 * 2**20  # given back...
    assert tree_resident({os.getpid()}) >= before + 240 * 2**20  # ...yet it counts
    r = execute(RunSpec(network="fcn5", size="tiny", batch_size=8, measurement=FAST))
    peak = r.metrics.peak_rss_bytes
    assert over_limit(r, peak) is r and over_limit(r, None) is r
    over = over_limit(r, peak - 1)
    assert not over.ok and over.failure.reason == "oom" and "memory-limit" in over.failure.message
    assert over.step_times_s == r.step_times_s and over.spec == r.spec


def test_a_gpu_runs_limit_is_its_devices_not_the_hosts():
    """On a GPU, --memory-limit caps the device memory: the worker is handed the limit
    (its allocator takes it), and the finished run is judged by its device peak, never by
    its host memory."""
    from dlperf.backends import device_memory
    from dlperf.engine.launch.isolated import over_limit, worker_env

    cpu = RunSpec(network="fcn5", size="tiny", batch_size=8, measurement=FAST)
    gpu = cpu.model_copy(update={"device": "gpu"})
    assert worker_env(gpu, 2**30)[device_memory.ENV] == str(2**30)
    assert device_memory.ENV not in worker_env(cpu, 2**30)
    assert device_memory.ENV not in worker_env(gpu)
    r = execute(cpu)
    m = r.metrics.model_copy(update={"device_peak_bytes": 3 * 2**20})
    on_gpu = r.model_copy(update={"spec": gpu, "metrics": m})
    host = m.peak_rss_bytes
    assert host > 3 * 2**20
    assert over_limit(on_gpu, 3 * 2**20) is on_gpu  # the host's memory is over; not counted
    over = over_limit(on_gpu, 3 * 2**20 - 1)
    assert not over.ok and over.failure.reason == "oom" and "device peak" in over.failure.message


def test_unsupported_device_is_recorded(db):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    r = run_isolated(RunSpec(network="fcn5", size="tiny", device="gpu", batch_size=4,
                             measurement=FAST), timeout_s=120)
    assert not r.ok and r.failure.reason == "unsupported"


def test_sweep_records_failures_and_goes_on(db):
    cfg = config.build(networks=["fcn5", "lstm32"], size="tiny", threads=[1],
                       batch_sizes=[4], measurement=FAST)
    specs = plan.expand(cfg)
    # make the first configuration fail for real: a batch that cannot be allocated
    huge = specs[0].model_copy(update={"size": "full", "batch_size": 64})
    with Store(db) as st:
        runner = Runner(st, timeout_s=120, memory_limit=700 * 2**20, peak_size=256)
        results = runner.run_all([huge, *specs[1:]])
        assert [r.status for r in results] == ["failed", "ok"]
        assert results[0].failure.reason == "oom"
        stored = st.results(kind="step")
        assert {r.spec.run_id: r.status for r in stored} == {
            huge.run_id: "failed", specs[1].run_id: "ok"}
        # the peak at 1 thread was measured once (each kernel's processes) and used for
        # the share of peak
        assert len(st.results(kind="peak")) == len(runner.peak_specs(1, "cpu"))
        ok = results[1]
        assert ok.metrics.peak_flops > 0
        assert ok.metrics.peak_share == pytest.approx(ok.metrics.achieved_flops / ok.metrics.peak_flops)


def test_resume_runs_only_what_is_missing(db):
    cfg = config.build(networks=["fcn5"], size="tiny", threads=[1], batch_sizes=[2, 3, 4],
                       measurement=FAST, peak_size=256)
    specs = plan.expand(cfg)
    with Store(db) as st:
        runner = Runner(st, timeout_s=120, peak_size=256)
        calls = iter(range(100))
        # stop after one configuration, as a kill between runs would
        runner.run_all(specs, stop=lambda: next(calls) >= 1)
        assert len(st.results(kind="step")) == 1
    new = api.sweep(cfg, db=db)
    assert {r.spec.run_id for r in new} == {s.run_id for s in specs[1:]}  # only the missing
    assert api.sweep(cfg, db=db) == []  # nothing left
    with Store(db) as st:
        assert len(plan.pending(specs, st, force=True)) == 3
        assert len(st.results(kind="step", latest=False)) == 3


def test_a_run_under_a_memory_limit_is_a_configuration_of_its_own(db):
    """'Does it fit in 10 MiB?' is another question than the step's time: its out-of-memory
    row never hides the measurement without a limit, and that measurement never answers
    for the limited run (RunSpec.memory_limit is part of the identity)."""
    kw = dict(size="tiny", batch_size=4, measurement=FAST, db=db)
    free = api.run("fcn5", **kw)
    limited = api.run("fcn5", memory_limit=10 * 2**20, **kw)
    assert free.measured and not limited.measured and limited.failure_reason == "oom"
    assert "(limit 10 MiB)" in limited.spec.label()
    for limit, reason in ((None, None), ("10MiB", "oom")):
        cfg = config.build(networks=["fcn5"], size="tiny", batch_sizes=[4], memory_limit=limit,
                           measurement=FAST)
        specs = plan.expand(cfg)
        with Store(db) as store:
            assert plan.pending(specs, store) == []  # each found its own
        [row] = api.stored_results(specs, db=db)
        assert (row.failure.reason if row.failure else None) == reason and row.ok == (not reason)
    # an unlimited spec keeps the id it had before the field existed
    assert "memory_limit" not in RunSpec(network="fcn5").identity()


def test_skipped_extras_look_absent_while_a_framework_imports_and_return_after():
    """Within: an import of a skipped package fails as a missing one does, and
    find_spec says None (PyTorch's dynamo asks it); after: both as before."""
    import subprocess
    import sys

    code = ("import importlib.util, sys\n"
            "from dlperf.backends.lean_import import skipping_extras\n"
            "with skipping_extras():\n"
            "    spec = importlib.util.find_spec('sklearn')\n"
            "    try:\n"
            "        import matplotlib.pyplot\n"
            "        halted = False\n"
            "    except ModuleNotFoundError:\n"
            "        halted = True\n"
            "import sklearn, matplotlib.pyplot\n"
            "print(spec is None, halted, importlib.util.find_spec('sklearn') is not None)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split() == ["True", "True", "True"]
