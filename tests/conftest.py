"""Shared fixtures. Every test gets its own store and cache, never the user's."""

from __future__ import annotations

import os

import pytest

from dlperf.core.spec import Measurement

#: Timing settings for tests: tiny networks, a fraction of a second each.
FAST = Measurement(min_time_s=0.05, min_steps=3, warmup_min_steps=2, warmup_max_steps=5,
                   warmup_max_time_s=2.0)


def pytest_collection_modifyitems(items):
    """Tests marked ``last`` run after all the others, in their order: each collects what
    an earlier test started and that takes a while of its own (a Slurm job over its time
    limit of a whole minute), so the rest of the suite runs meanwhile. Under ``make
    test``'s two pytest workers, a ``last`` test runs last of its ``xdist_group`` (the
    worker that started what it collects), while the other worker goes on."""
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)


@pytest.fixture(scope="session")
def _session_peaks(tmp_path_factory):
    """The machine's peak store for the whole session, never the user's: each test's new
    store takes the peak kernel rates an earlier test measured (dlperf's rule for every
    store on a machine, ``engine.machine_peaks``) instead of measuring them again. Tests
    of that rule give themselves a store of their own."""
    return tmp_path_factory.mktemp("machine") / "peaks.db"


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path, monkeypatch, _session_peaks):
    monkeypatch.setenv("DLPERF_DB", str(tmp_path / "default.db"))
    monkeypatch.setenv("DLPERF_PEAKS", str(_session_peaks))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("DLPERF_REFERENCE_FITS", raising=False)  # the shipped GPU curves
    # never the developer's own device file ($DLPERF_DEVICES, ~/.config/dlperf/devices.toml)
    monkeypatch.delenv("DLPERF_DEVICES", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture(autouse=True)
def _restore_affinity():
    # tests that call the worker's execute() in-process pin this process; later workers
    # would inherit the pinning
    cpus = os.sched_getaffinity(0)
    yield
    os.sched_setaffinity(0, cpus)


@pytest.fixture
def db(tmp_path):
    return tmp_path / "results.db"


@pytest.fixture(scope="session")
def full_fcn5_sync():
    """Full-size FCN-5 (448 MiB of weights) trained by ``sync`` on two workers, batch 32:
    the measurement that the memory tests of ``async`` and ``fsdp`` set their own runs
    against. Measured once (about 14 s) for both."""
    from dlperf.engine.launch.torchrun import run_parallel
    from dlperf.kinds.parallel.make import make_spec
    from tests.test_parallel import TIMEOUTS

    r = run_parallel(make_spec("fcn5", strategy="sync", workers=2, batch_size=32, steps=2,
                               warmup_steps=1), **TIMEOUTS)
    assert r.ok, r.failure
    return r


@pytest.fixture(scope="session")
def slurm_cluster():
    """A two-node Slurm on this machine (tests/slurm_cluster.py) for the whole session,
    every daemon stopped at its end; skipped, saying why, where Slurm cannot start."""
    from tests.slurm_cluster import SlurmCluster

    why = SlurmCluster.unavailable()
    if why:
        pytest.skip(why)
    cluster = SlurmCluster()
    try:
        cluster.start()
    except Exception as e:  # noqa: BLE001 - any reason it cannot start is a reason to skip
        pytest.skip(f"a Slurm cluster could not start here: {e}")
    yield cluster
    cluster.stop()
