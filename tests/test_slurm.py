"""The Slurm executor end to end, on the two-node cluster that tests/slurm_cluster.py
starts on this machine (skipped, saying why, where it cannot): a sweep whose results land
in the store with their job ids, a job cancelled with scancel, a driver killed and started
again, a job over its time limit; and the one-line refusals.

A job that must wait is made to wait on dlperf's own machine lock: the test holds the lock
file the jobs are pointed at ($DLPERF_CPU_LOCK), so a job is started and measuring nothing
until the test lets it go, with no timing to guess.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlperf.cli import main
from dlperf.core import environment
from dlperf.core.spec import Measurement, RunResult
from dlperf.core.store import Store
from dlperf.engine import config, plan
from dlperf.kinds.peak import rates as peak

# one Slurm cluster and one timed-out job for the file, under `pytest -n` too: its tests
# go to one worker
pytestmark = pytest.mark.xdist_group("slurm")

FAST = ["--min-time", "0.05", "--min-steps", "3", "--warmup-time", "2"]
#: the driver looks at the jobs every half second, not every 5: a job here ends in seconds
SWEEP = ["sweep", "--networks", "fcn5", "--size", "tiny", "--executor", "slurm",
         "--slurm-poll", "0.5", *FAST]


def _seed_peaks(db: Path, threads=(1, 2)) -> None:
    """The peak kernels recorded as not runnable here, so that jobs reuse that (as they
    reuse any stored rate) rather than time four kernels per task: the tests are about
    the executor, not the peak."""
    with Store(db) as st:
        for t in threads:
            for spec in peak.kernel_specs(t, "cpu", peak.DEFAULT_SIZE, environment.packages()):
                st.add(RunResult.failed(spec, "unsupported", "not timed in the Slurm tests"))


def _env(cluster, lock: Path, **extra: str) -> dict[str, str]:
    return {**cluster.env, "DLPERF_CPU_LOCK": str(lock), "PYTHONPATH": os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[1] / "src"),
                    os.environ.get("PYTHONPATH", "")) if p), **extra}


def _dlperf(env, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlperf.cli", *argv], env=env, text=True,
                          capture_output=True, timeout=timeout)


def _start(env, *argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dlperf.cli", *argv], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@contextlib.contextmanager
def _held(lock: Path):
    """dlperf's machine lock, held by the test: every job pointed at it waits."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        os.close(fd)


def _jobs(db: Path) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(db)) as c:
        return c.execute("SELECT job_id, state, reason, node, settled_at, folder, label "
                         "FROM slurm_jobs ORDER BY label").fetchall()


def _wait(what, timeout_s: float = 60.0, proc: subprocess.Popen | None = None):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if (got := what()):
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the driver ended first: {proc.stderr.read()[-2000:]}")
        time.sleep(0.3)
    raise AssertionError("timed out")


def _stored(db: Path) -> dict[str, RunResult]:
    with Store(db) as st:
        return {r.spec.label(): r for r in st.results(kind="step")}


def _specs(threads=(1, 2)):
    cfg = config.build(networks=["fcn5"], size="tiny", threads=list(threads),
                       measurement=Measurement(min_time_s=0.05, min_steps=3,
                                               warmup_max_time_s=2))
    return plan.expand(cfg)


# ------------------------------------------------------------------ a job over its time limit
# Slurm's time limits are whole minutes, so this job takes one or more: it starts with the
# file's first test and waits on a lock of its own while the rest of the suite runs; the
# test that collects it is marked to run last (tests/conftest.py), so that its minute
# overlaps the other files' tests instead of being waited out at the end of this one.
@pytest.fixture(scope="session")
def timed_out(slurm_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("timeout")
    db, lock = tmp / "results.db", tmp / "cpus.lock"
    _seed_peaks(db, threads=(1,))
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    proc = _start(_env(slurm_cluster, lock), *SWEEP, "--threads", "1", "--slurm-time", "1",
                  "--partitions", "big", "--db", str(db))
    yield proc, db
    os.close(fd)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------ tests
def test_a_sweep_through_slurm_stores_the_rows_a_local_sweep_would(slurm_cluster, timed_out,
                                                                   tmp_path):
    db = tmp_path / "results.db"
    _seed_peaks(db)
    env = _env(slurm_cluster, tmp_path / "cpus.lock")
    r = _dlperf(env, *SWEEP, "--threads", "1,2", "--db", str(db))
    assert r.returncode == 0, r.stderr
    stored = _stored(db)
    # the same runs, by id and settings, as the local sweep of these flags plans
    wanted = {s.run_id for s in _specs()}
    assert {x.spec.run_id for x in stored.values()} == wanted
    assert all(x.ok and x.machine_id and x.env_id for x in stored.values())
    jobs = _jobs(db)
    assert len(jobs) == 2 and all(j[1] == "COMPLETED" and j[4] for j in jobs)
    assert all(j[0].split("_")[0].isdigit() and j[3] in ("n1", "n2") for j in jobs)
    status = _dlperf(env, "status", "--all", "--db", str(db))
    assert "0 queued, 0 running, 2 done, 0 failed" in status.stdout
    assert jobs[0][0] in status.stdout
    # started again: nothing to submit
    again = _dlperf(env, *SWEEP, "--threads", "1,2", "--db", str(db))
    assert "0 to submit" in again.stdout and len(_jobs(db)) == 2


def test_a_cancelled_job_is_a_stored_failure_and_nothing_else_is_lost(slurm_cluster, tmp_path):
    db, lock = tmp_path / "results.db", tmp_path / "cpus.lock"
    _seed_peaks(db)
    env = _env(slurm_cluster, lock)
    with _held(lock):
        proc = _start(env, *SWEEP, "--threads", "1,2", "--db", str(db))
        # both jobs started on their nodes, each waiting for the lock
        jobs = _wait(lambda: (j := _jobs(db)) and len(j) == 2 and all(
            (Path(x[5]) / "task-0.node.json").exists() for x in j) and j, proc=proc)
        x2 = next(j for j in jobs if "cpu x2" in j[6])
        slurm_cluster.run("scancel", x2[0])
        _wait(lambda: any(j[4] for j in _jobs(db)), proc=proc)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    stored = _stored(db)
    assert stored["fcn5[tiny] torch/eager cpu x1 b64"].ok
    failed = stored["fcn5[tiny] torch/eager cpu x2 b64"]
    assert failed.failure.reason == "interrupted"
    assert f"Slurm job {x2[0]} CANCELLED" in failed.failure.message
    status = _dlperf(env, "status", "--db", str(db))
    assert "1 done, 1 failed" in status.stdout and "CANCELLED" in status.stdout
    # --retry-failed submits it again, and only it
    dry = _dlperf(env, *SWEEP, "--threads", "1,2", "--db", str(db), "--retry-failed",
                  "--dry-run")
    assert "1 to submit" in dry.stdout


def test_a_driver_killed_and_started_again_submits_nothing_twice(slurm_cluster, tmp_path):
    db, lock = tmp_path / "results.db", tmp_path / "cpus.lock"
    _seed_peaks(db)
    env = _env(slurm_cluster, lock)
    argv = [*SWEEP, "--threads", "1,2", "--db", str(db), "--partitions", "cpu,big"]
    with _held(lock):
        proc = _start(env, *argv)
        first = _wait(lambda: (j := _jobs(db)) and len(j) == 4 and all(x[0] for x in j) and j,
                      proc=proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    r = _dlperf(env, *argv)
    assert r.returncode == 0, r.stderr
    assert "0 to submit" in r.stdout
    after = _jobs(db)
    assert [j[0] for j in after] == [j[0] for j in first]  # the same jobs, none added
    assert all(j[1] == "COMPLETED" for j in after)
    folders = {Path(j[5]) for j in after}
    assert len(list(folders.pop().parent.iterdir())) == 4  # four arrays, ever
    # one row per run and partition: the sweep side by side on two node types
    with Store(db) as st:
        assert len(st.results(kind="step")) == 2  # one machine here: two nodes, same hardware
        assert len(st.results(kind="step", latest=False)) == 4


def test_a_submission_left_half_done_is_found_by_its_name(slurm_cluster, tmp_path):
    """A driver killed between writing its rows and storing sbatch's answer: the next one
    finds the array job by its name and adopts it, or submits anew when there is none."""
    from dataclasses import replace

    from dlperf.core.store_jobs import SUBMITTING
    from dlperf.engine.slurm.driver import SlurmDriver
    from dlperf.engine.slurm.settings import SlurmSettings

    db = tmp_path / "results.db"
    _seed_peaks(db, threads=(1,))
    os.environ.update({"SLURM_CONF": slurm_cluster.env["SLURM_CONF"],
                       "DLPERF_CPU_LOCK": str(tmp_path / "cpus.lock")})
    try:
        [spec] = _specs(threads=(1,))
        with Store(db) as st:
            driver = SlurmDriver(st, SlurmSettings(poll_s=0.5), timeout_s=120)
            driver._submit("", [spec])
            [row] = st.jobs()
            st.put_jobs([replace(row, job_id="", state=SUBMITTING)])  # sbatch's answer lost
            [result] = driver.run([spec])
            assert result.ok and st.jobs()[0].job_id == row.job_id
    finally:
        for k in ("SLURM_CONF", "DLPERF_CPU_LOCK"):
            os.environ.pop(k, None)


def test_bad_slurm_settings_are_one_line_and_status_2(slurm_cluster, tmp_path, monkeypatch,
                                                      capsys):
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    monkeypatch.setenv("PATH", slurm_cluster.env["PATH"])
    db = str(tmp_path / "r.db")
    cases = [
        ([*SWEEP, "--partitions", "nope", "--db", db], "unknown Slurm partition 'nope'"),
        ([*SWEEP, "--constraint", "nosuchfeature", "--db", db], "sbatch refused the job"),
        ([*SWEEP, "--slurm-time", "5x", "--db", db], "is not a Slurm time"),
        (["sweep", "--networks", "fcn5", "--partitions", "cpu", "--db", db],
         "--partitions needs --executor slurm"),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    # a controller that does not answer: a configuration naming a port nobody listens on
    conf = Path(slurm_cluster.env["SLURM_CONF"]).read_text()
    dead = tmp_path / "dead.conf"
    dead.write_text("\n".join("SlurmctldPort=1" if ln.startswith("SlurmctldPort=") else ln
                              for ln in conf.splitlines()))
    monkeypatch.setenv("SLURM_CONF", str(dead))
    started = time.monotonic()
    assert main([*SWEEP, "--db", db]) == 2
    err = capsys.readouterr().err.strip()
    assert "the Slurm controller does not answer" in err and len(err.splitlines()) == 1
    assert time.monotonic() - started < 30
    with Store(db) as st:
        assert st.jobs() == []  # nothing recorded by any of them


def test_no_slurm_on_the_path_is_one_line_and_status_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch in it
    assert main([*SWEEP, "--db", str(tmp_path / "r.db")]) == 2
    err = capsys.readouterr().err.strip()
    assert "sbatch is not on the PATH" in err and len(err.splitlines()) == 1


def test_the_poll_interval_is_a_flag_and_a_bad_one_is_one_line(tmp_path, capsys):
    from argparse import Namespace

    from dlperf.cli import args

    given = Namespace(executor="slurm", **{dest: None for dest in args.SLURM_FLAGS.values()})
    assert args.slurm_from(given).poll_s == 5.0  # the default
    given.slurm_poll = 0.5
    assert args.slurm_from(given).poll_s == 0.5
    db = str(tmp_path / "r.db")
    for argv, message in (
            (["sweep", "--networks", "fcn5", "--executor", "slurm", "--slurm-poll", "0",
              "--db", db], "--slurm-poll: must be above 0"),
            (["sweep", "--networks", "fcn5", "--slurm-poll", "2", "--db", db],
             "--slurm-poll needs --executor slurm")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err


def test_an_old_store_gains_the_jobs_table_and_keeps_its_version(tmp_path):
    db = tmp_path / "old.db"
    Store(db).close()
    with contextlib.closing(sqlite3.connect(db)) as c:
        c.execute("DROP TABLE slurm_jobs")  # as a store of the version before it
        c.commit()
    with Store(db) as st:
        assert st.jobs() == []
    with contextlib.closing(sqlite3.connect(db)) as c:
        assert c.execute("SELECT value FROM meta").fetchone()[0] == "3"


@pytest.mark.last
def test_a_job_over_its_time_limit_is_a_stored_timeout(timed_out):
    proc, db = timed_out
    out, err = proc.communicate(timeout=150)
    assert proc.returncode == 0, err
    [r] = _stored(db).values()
    assert r.failure.reason == "timeout" and "TIMEOUT (TimeLimit)" in r.failure.message
    [job] = _jobs(db)
    assert job[1] == "TIMEOUT" and job[4]


def test_a_parallel_run_spans_two_nodes_through_srun(slurm_cluster, tmp_path):
    """``dlperf parallel --executor slurm --nodes 2``: one job over both nodes, srun starts
    each node's part and every part joins one torchrun rendezvous on the first node; the
    result is stored once, with its job, whichever node held rank 0, and the job's record
    names both nodes."""
    from dlperf.engine.slurm import batch

    db = tmp_path / "results.db"
    _seed_peaks(db, threads=(1, 2))
    env = _env(slurm_cluster, tmp_path / "cpus-%n.lock")  # two nodes, one machine: a lock each
    r = _dlperf(env, "parallel", "-n", "fcn5", "--size", "tiny", "-s", "sync", "-w", "2",
                "--threads", "1", "--steps", "3", "--warmup-steps", "1", "--executor",
                "slurm", "--nodes", "2", "--partitions", "debug", "--db", str(db),
                timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    with Store(db) as st:
        [res] = st.results(kind="parallel")
    assert res.ok and res.spec.options.nodes == 2 and res.spec.options.workers == 2
    assert '"nnodes":2' in res.model_dump_json().replace(" ", "")
    [job] = _jobs(db)
    assert job[1] == "COMPLETED" and job[4]
    assert batch.read_node(Path(job[5]), 0)["nodes"] == ["n1", "n2"]
    bad = _dlperf(env, "parallel", "-n", "fcn5", "--size", "tiny", "-s", "sync", "-w", "2",
                  "--nodes", "2", "--db", str(db))
    assert bad.returncode == 2 and "--nodes needs --executor slurm" in bad.stderr
