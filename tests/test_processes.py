"""Nothing escapes, nothing is lost: orphans, interrupts, kill reasons, claims, the CPU
lock and the recovery file."""

from __future__ import annotations

import os
import platform
import signal
import sqlite3
import subprocess
import sys
import time

import psutil
import pytest

from dlperf.cli import main
from dlperf.core.errors import StoreWriteError
from dlperf.core.spec import Measurement, RunResult, RunSpec
from dlperf.core.store import Store
from dlperf.engine import cpulock
from dlperf.engine.launch.isolated import LaunchInterrupted, run_isolated
from dlperf.engine.runner import Interrupted, Listener, Runner
from tests.conftest import FAST

LONG = Measurement(min_time_s=600, max_steps=10**9, warmup_max_steps=2)


def _spec(**kw) -> RunSpec:
    return RunSpec(network="fcn5", size="tiny", batch_size=4, **{"measurement": FAST, **kw})


@pytest.fixture(autouse=True)
def _own_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_CPU_LOCK", str(tmp_path / "cpus.lock"))


def _procs(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in p.info["cmdline"] or ()):
                found.append(p)
        except psutil.Error:
            continue
    return found


def _children_running(driver: subprocess.Popen, marker: str, wait_s: float = 120,
                      count: int = 1) -> list[int]:
    """Pids of the driver's descendants whose command line holds ``marker``, once there."""
    deadline = time.time() + wait_s
    while time.time() < deadline:
        try:
            kids = psutil.Process(driver.pid).children(recursive=True)
        except psutil.Error:
            kids = []
        # (torchrun's own command line names the workers' module too)
        pids = [k.pid for k in kids if any(marker in c for c in _cmdline(k))
                and not any("torchrun" in c for c in _cmdline(k))]
        if len(pids) >= count:
            return pids
        assert driver.poll() is None, driver.communicate()
        time.sleep(0.2)
    raise AssertionError(f"no '{marker}' process started")


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    deadline = time.time() + seconds
    alive = pids
    while time.time() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and
                 psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def _driver(*args: str, db) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dlperf.cli", *args, "--db", str(db)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


# ----------------------------------------------------------------------------- orphans
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_worker_dies_with_its_sweep(db, sig):
    driver = _driver("sweep", "--networks", "fcn5", "--size", "tiny", "--min-time", "600",
                     db=db)
    workers = _children_running(driver, "dlperf.engine.worker")
    driver.send_signal(sig)
    assert _gone_within(workers, 3.0) == [], "the worker outlived its sweep"
    driver.communicate(timeout=30)
    if sig == signal.SIGTERM:  # SIGTERM takes the Ctrl-C path: the run is kept
        with Store(db) as st:  # (the peak's run or the step's, whichever was running)
            rows = st.results(kind=None)
        # beside the peak rates taken from the machine's peak store (engine.machine_peaks)
        [r] = [r for r in rows if not r.ok]
        assert r.failure.reason == "interrupted"
        assert all(r.spec.kind == "peak" for r in rows if r.ok)


@pytest.mark.slow
def test_runs_leave_nothing_in_the_temporary_folder(tmp_path, monkeypatch):
    """TensorFlow's AutoGraph modules (removed at an exit a worker skips) and torchrun's
    torchelastic folders go into the run's scratch folder and are removed with it;
    torch.compile's cache alone stays where PyTorch keeps it."""
    import getpass
    import tempfile

    from dlperf.engine.launch.torchrun import run_parallel
    from dlperf.kinds.parallel.make import make_spec

    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    r = run_isolated(RunSpec(network="fcn5", framework="tensorflow", size="tiny",
                             batch_size=4, measurement=FAST), timeout_s=180)
    assert r.ok, r.failure
    p = run_parallel(make_spec("fcn5", size="tiny", strategy="sync", workers=2, batch_size=8,
                               steps=2, warmup_steps=1, measurement=FAST),
                     timeout_s=240, stall_timeout_s=90)
    assert p.ok, p.failure
    assert set(os.listdir(temp)) <= {f"torchinductor_{getpass.getuser()}"}


@pytest.mark.slow
def test_a_sweep_killed_outright_leaves_its_workers_folder_for_the_next_launch_to_remove(
        db, tmp_path, monkeypatch):
    """SIGKILL gives the driver no chance to remove its worker's scratch folder; the next
    launch removes it (its launcher is gone), and leaves a live launcher's alone."""
    import tempfile
    from pathlib import Path

    from dlperf.engine.launch.scratch import OWNER, remove_orphans

    # a temporary folder of its own: any other launch on the machine (another pytest
    # worker's) would remove the orphan before this test looks for it
    (tmp_path / "temp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "temp"))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    driver = _driver("sweep", "--networks", "fcn5", "--size", "tiny", "--min-time", "600",
                     db=db)
    workers = _children_running(driver, "dlperf.engine.worker")
    driver.send_signal(signal.SIGKILL)
    driver.communicate(timeout=30)
    assert _gone_within(workers, 3.0) == []
    left = [d for d in Path(tempfile.gettempdir()).glob("dlperf-*")
            if (d / OWNER).is_file() and (d / OWNER).read_text() == str(driver.pid)]
    assert len(left) == 1 and (left[0] / "spec.json").exists()
    with tempfile.TemporaryDirectory(prefix="dlperf-") as live:
        (Path(live) / OWNER).write_text(str(os.getpid()))
        r = run_isolated(RunSpec(network="fcn5", size="tiny", batch_size=4, measurement=FAST),
                         timeout_s=120)
        assert r.ok, r.failure
        assert not left[0].exists() and Path(live).exists()
        assert remove_orphans("dlperf-") == []


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_torchrun_and_its_workers_die_with_the_driver(db, sig):
    driver = _driver("parallel", "--network", "fcn5", "--size", "tiny", "--strategy", "sync",
                     "--workers", "2", "--threads", "1", "--steps", "10000000",
                     "--warmup-steps", "1", db=db)
    ranks = _children_running(driver, "dlperf.kinds.parallel.run", wait_s=180, count=2)
    tree = [p.pid for p in psutil.Process(driver.pid).children(recursive=True)]
    driver.send_signal(sig)
    assert _gone_within(tree, 3.0) == [], (
        "processes outlived the parallel run", ranks,
        [_cmdline(psutil.Process(p)) for p in tree if psutil.pid_exists(p)])
    driver.communicate(timeout=30)


# ----------------------------------------------------------------------------- what is kept
def test_interrupt_keeps_the_steps_streamed_so_far():
    seen = []

    def on_event(ev):
        if ev.get("phase") == "step":
            seen.append(ev["s"])
            if len(seen) == 3:
                raise KeyboardInterrupt

    with pytest.raises(LaunchInterrupted) as e:
        run_isolated(_spec(measurement=LONG), timeout_s=120, on_event=on_event)
    r = e.value.result
    assert r.failure.reason == "interrupted"
    assert len(seen) == 3 and r.step_times_s[:3] == seen and len(r.warmup_times_s) == 2


def test_runner_stores_the_run_in_flight_as_interrupted(db):
    class Stop(Listener):
        def event(self, spec, ev):
            if spec.kind == "step" and ev.get("phase") == "step":  # (not the peak's run)
                raise KeyboardInterrupt

    with Store(db) as st:
        with pytest.raises(Interrupted) as e:
            Runner(st, timeout_s=120, peak_size=256, listener=Stop()).run_all([_spec(measurement=LONG)])
        assert e.value.in_flight is not None
        [r] = st.results(kind="step")
        assert r.failure.reason == "interrupted" and r.step_times_s
        # an interrupted run is not done: the next sweep measures it again
        assert st.done([r.spec.run_id]) == set()


def test_sigkill_without_memory_pressure_is_a_crash_not_oom(monkeypatch):
    monkeypatch.setenv("DLPERF_WORKER_FAULT", "kill")
    r = run_isolated(_spec(), timeout_s=120)
    assert r.failure.reason == "crash", r.failure
    assert "SIGKILL" in r.failure.message


# ----------------------------------------------------------------------------- two sweeps
def test_a_run_claimed_by_a_live_process_is_skipped(db):
    spec = _spec()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    skipped = []

    class Seen(Listener):
        def skipped(self, s, why):
            skipped.append(why)

    try:
        with Store(db) as st:
            st._db.execute("INSERT INTO claims VALUES (?,?,?,?,?)",
                           (spec.run_id, platform.node(), holder.pid, "other", time.time()))
            assert Runner(st, peak_size=256, listener=Seen()).run_all([spec]) == []
            assert skipped and f"pid {holder.pid}" in skipped[0]
            assert st.results(kind="step") == []
    finally:
        holder.kill()
        holder.wait()
    # its holder gone, the claim is taken over
    with Store(db) as st:
        [r] = Runner(st, timeout_s=120, peak_size=256).run_all([spec])
        assert r.ok
        assert st._db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0


def test_a_run_stored_meanwhile_by_another_sweep_is_not_measured_again(db):
    spec = _spec()
    with Store(db) as st:
        st.add(RunResult(spec=spec, status="ok"))
        runs = Runner(st).run_all([spec], still_pending=lambda s: not st.done([s.run_id]))
        assert runs == [] and len(st.results(kind="step", latest=False)) == 1


def test_the_cpus_are_held_by_one_measurement_at_a_time(tmp_path):
    other = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from dlperf.engine.cpulock import cpus_held\n"
         "with cpus_held('other sweep'):\n print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ})
    try:
        assert other.stdout.readline().strip() == "held"
        waited = []
        with pytest.raises(TimeoutError), cpulock.cpus_held("me", on_wait=waited.append,
                                                            wait_s=0.5):
            pass
        assert waited and "other sweep" in waited[0] and str(other.pid) in waited[0]
    finally:
        other.kill()
        other.wait()
    with cpulock.cpus_held("me", wait_s=5):  # the kernel dropped the dead holder's lock
        assert "me" in cpulock.holder()


# ----------------------------------------------------------------------------- recovery
def test_a_failed_store_write_keeps_the_result_for_the_next_command(db, monkeypatch):
    result = RunResult(spec=_spec(), status="ok", started_at=123.0)
    with Store(db) as st:
        def full(r):
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(st, "_insert", full)
        with pytest.raises(StoreWriteError, match="disk is full"):
            st.add(result)
        assert st.recovery_path.exists()
    monkeypatch.undo()
    with Store(db) as st:
        assert st.recovered == 1 and not st.recovery_path.exists()
        [r] = st.results(kind="step")
        assert r.started_at == 123.0
    # importing twice (a recovery file left by a crash mid-import) adds nothing
    (db.parent / (db.name + ".recovery.jsonl")).write_text(result.model_dump_json() + "\n")
    with Store(db) as st:
        assert len(st.results(kind="step", latest=False)) == 1


def test_an_internal_error_is_one_line(monkeypatch, capsys):
    from dlperf.cli import networks

    def broken(a):
        raise RuntimeError("a defect")

    monkeypatch.setattr(networks, "cmd_networks", broken)
    monkeypatch.delenv("DLPERF_DEBUG", raising=False)
    assert main(["networks"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error" in err[0] and "a defect" in err[0]


def test_an_interrupted_calibration_keeps_the_shapes_it_timed():
    from dlperf.kinds.calibrate.options import KernelOptions, KernelOutcome, KernelPart

    # shapes of a millisecond or more per call, so each lasts its min_time and the run
    # outlives the watch's polls after the interrupting event (tiny ones all finish in a
    # fraction of a second, before any poll announces their events)
    shapes = tuple((2**e,) for e in range(20, 26))  # seconds in all: killed well before
    o = KernelOptions(parts=(KernelPart(op="memory", shapes=shapes),), min_time_s=0.3,
                      versions={}, revision=1)
    spec = RunSpec(kind="kernel", network="kernels", framework="torch", batch_size=1, options=o)
    seen = []

    def on_event(ev):
        if ev.get("phase") == "kernel":
            seen.append(tuple(ev["shape"]))
            if len(seen) == 2:
                raise KeyboardInterrupt

    with pytest.raises(LaunchInterrupted) as e:
        run_isolated(spec, timeout_s=120, on_event=on_event)
    r = e.value.result
    assert r.failure.reason == "interrupted" and isinstance(r.outcome, KernelOutcome)
    kept = [s.shape for s in r.outcome.samples]
    assert kept[:2] == seen and all(s.times_s and s.median_s > 0 for s in r.outcome.samples)


def test_a_calibration_run_again_after_an_interrupt_keeps_what_it_had_timed(db):
    """The runner hands the run the interrupted one's shapes; the worker times only the
    rest, and the finished record holds both."""
    from dlperf.kinds.calibrate.options import KernelOptions, KernelPart

    # shapes of a millisecond or more per call, so each lasts its min_time and the run
    # outlives the watch's polls after the interrupting event (tiny ones all finish in a
    # fraction of a second, before any poll announces their events)
    shapes = tuple((2**e,) for e in range(20, 26))
    o = KernelOptions(parts=(KernelPart(op="memory", shapes=shapes),), min_time_s=0.3,
                      versions={}, revision=1)
    spec = RunSpec(kind="kernel", network="kernels", framework="torch", batch_size=1, options=o)

    class Stop(Listener):
        def event(self, s, ev):
            if ev.get("phase") == "kernel" and ev["shape"] == [2**21]:
                raise KeyboardInterrupt

    with Store(db) as st:
        with pytest.raises(Interrupted):
            Runner(st, timeout_s=120, peak_size=256, listener=Stop()).run_all([spec])
        [cut] = st.results(kind="kernel")
        kept = {s.shape: s for s in cut.outcome.samples}
        assert cut.failure.reason == "interrupted" and (2**20,) in kept and (2**21,) in kept
        [done] = Runner(st, timeout_s=120, peak_size=256).run_all([spec])
        assert done.ok and [s.shape for s in done.outcome.samples] == list(shapes)
        assert done.outcome.resumed == len(kept)
        assert all(s == kept[s.shape] for s in done.outcome.samples if s.shape in kept)
        # a finished run is not resumed: run again (--force), it times every shape anew
        assert Runner(st, peak_size=256)._resume(spec) is None

