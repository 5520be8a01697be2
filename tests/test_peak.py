"""The peak: fresh or stale stored kernel rates, raising it past a faster run, shares never
above 100%, the theoretical peak from /proc/cpuinfo fields, and the limit message."""

from __future__ import annotations

import json
import re

import pytest

from dlperf.core import cpu_peak
from dlperf.core.aggregate import aggregate, other_framework_rates
from dlperf.core.spec import Failure, Metrics, RunResult, RunSpec
from dlperf.core.store import Store
from dlperf.engine.runner import Runner
from dlperf.kinds.peak import rates as peak
from dlperf.kinds.step.tables import detail_table

from .conftest import FAST

PACKAGES = {"torch": "2.13.0+cpu", "tensorflow-cpu": "2.21.0", "jax": "0.10.2", "jaxlib": "0.10.2"}
TORCH = (("torch", "matmul"), ("torch", "conv"))


def _metrics(flops_per_s: float, flops: float = 1e9) -> Metrics:
    t = flops / flops_per_s
    return Metrics(steps=5, median_s=t, mean_s=t, std_s=0.0, min_s=t, max_s=t, mad_s=0.0,
                   iqr_s=0.0, cv=0.0, samples_per_s=0.0, flops_per_step=flops,
                   achieved_flops=flops_per_s)


def _ok(spec: RunSpec, flops_per_s: float) -> RunResult:
    return RunResult(spec=spec, status="ok", metrics=_metrics(flops_per_s), finished_at=1.0)


@pytest.fixture(autouse=True)
def _own_machine_peaks(tmp_path, monkeypatch):
    # these tests count what is measured: no rate from the session's other tests
    monkeypatch.setenv("DLPERF_PEAKS", str(tmp_path / "machine-peaks.db"))


def _specs(size=256, packages=PACKAGES, threads=1, kernels=TORCH):
    return peak.kernel_specs(threads, "cpu", size, packages, FAST, kernels)


# ----------------------------------------------------------------------------- staleness
def test_fresh_kernel_rates_are_reused():
    wanted = _specs()
    assert [(s.framework, s.network) for s in wanted] == list(TORCH)
    found, missing = peak.lookup([_ok(s, 50e9) for s in wanted], wanted, PACKAGES)
    assert missing == [] and len(found) == len(wanted)


@pytest.mark.parametrize("change", ["torch version", "size", "kernel shape", "threads"])
def test_stale_kernel_rates_are_measured_again(change):
    stored_specs = _specs()
    if change == "kernel shape":  # a rate stored when dlperf defined the kernel differently
        stored_specs = [s.model_copy(update={"options": s.options.model_copy(update={"shape": "other"})})
                        for s in stored_specs]
    wanted = {
        "torch version": lambda: _specs(packages={**PACKAGES, "torch": "2.14.0+cpu"}),
        "size": lambda: _specs(size=512),
        "kernel shape": _specs,
        "threads": lambda: _specs(threads=2),
    }[change]()
    found, missing = peak.lookup([_ok(s, 50e9) for s in stored_specs], wanted, PACKAGES)
    assert found == [] and missing == wanted


def test_failures_that_recur_count_as_measured_and_failures_of_the_moment_do_not():
    wanted = _specs(kernels=(*TORCH, ("jax", "matmul"), ("tensorflow", "matmul")))
    unsupported = RunResult.failed(wanted[1], "unsupported", "no conv here")
    interrupted = RunResult.failed(wanted[2], "interrupted", "Ctrl-C")
    timeout = RunResult.failed(wanted[3], "timeout", "exceeded --timeout")
    stored = [_ok(wanted[0], 50e9), unsupported, _ok(wanted[2], 50e9), interrupted, timeout]
    found, missing = peak.lookup(stored, wanted, PACKAGES)
    # an interrupted re-measure leaves the older rate; a timed-out kernel is tried again
    assert found == [stored[0], unsupported, stored[2]]
    assert missing == [wanted[3]]


def test_a_peak_row_of_the_previous_dlperf_is_not_reused():
    # one 4096 torch matmul, no shape or versions recorded: which library measured it?
    old = _ok(RunSpec(kind="peak", network="matmul", batch_size=4096, measurement=FAST), 95e9)
    found, missing = peak.lookup([old], _specs(size=4096), PACKAGES)
    assert found == [] and len(missing) == len(TORCH)


def test_store_peak_rows_are_per_machine_and_thread_count(db, monkeypatch):
    from dlperf.core import environment

    with Store(db) as st:
        for t in (1, 2):
            st.add(_ok(_specs(threads=t)[0], 50e9))
        monkeypatch.setattr(environment, "machine_id", lambda: "another-machine")
        st.add(_ok(_specs(threads=1)[1], 60e9))
        monkeypatch.undo()
        rows = st.peak_results(1, "cpu")
    assert [r.spec.run_id for r in rows] == [_specs(threads=1)[0].run_id]


def test_kernel_rate_is_its_best_rounds_median():
    [spec] = _specs(kernels=(("torch", "matmul"),))
    # nine steps of 1 GFLOP: a disturbed first round, then two quiet ones
    steps = [0.05, 0.04, 0.05, 0.02, 0.021, 0.02, 0.025, 0.024, 0.026]
    r = _ok(spec, 1e9 / 0.024).model_copy(update={"step_times_s": steps})
    [rate] = peak.peak_of([r], 1, "cpu").rates
    assert rate.round_flops == pytest.approx((1e9 / 0.05, 1e9 / 0.02, 1e9 / 0.025))
    assert rate.flops == pytest.approx(1e9 / 0.02)
    # fewer steps than rounds: one round per step
    assert peak.round_rates(1e9, [0.5, 0.25]) == [2e9, 4e9]


# ----------------------------------------------------------------------------- raising
def _run_result(achieved: float, framework="tensorflow") -> RunResult:
    spec = RunSpec(network="fcn5", size="tiny", framework=framework, batch_size=64,
                   measurement=FAST)
    return RunResult(spec=spec, status="ok", metrics=_metrics(achieved), finished_at=2.0)


def test_a_run_above_the_peak_raises_it_and_says_so(db):
    low = peak.peak_of([_ok(s, 50e9) for s in _specs()], 1, "cpu")
    with Store(db) as st:
        runner = Runner(st)
        result, raised = runner.with_share(_run_result(120e9), low)
        assert raised.flops == 120e9  # the peak the runs after it compare with
        assert result.metrics.peak_share == 1.0
        assert result.metrics.peak_flops == result.metrics.achieved_flops
        [warning] = result.warnings
        assert "raised" in warning and "torch matmul" in warning
        # stored: the next run at this thread count compares with the raised peak
        found, _ = peak.lookup(st.peak_results(1, "cpu"), [], peak_packages())
        later = peak.peak_of(found, 1, "cpu")
        assert later.flops == 120e9 and later.best.raised_by == result.spec.label()
        # and a slower run is measured against it, below 100%
        slower, kept = runner.with_share(_run_result(60e9, framework="torch"),
                                         low.raised(later.best))
        assert kept.flops == 120e9
        assert slower.metrics.peak_share == pytest.approx(0.5)
        assert not slower.warnings


def test_a_run_above_the_theoretical_peak_does_not_raise_it(db):
    low = peak.peak_of([_ok(s, 50e9) for s in _specs()], 1, "cpu", theoretical_flops=100e9)
    with Store(db) as st:
        result, kept = Runner(st).with_share(_run_result(120e9), low)
        assert st.peak_results(1, "cpu") == []  # nothing stored: later runs keep 50 GFLOP/s
        assert kept is low
    assert result.metrics.peak_flops == 50e9 and result.metrics.peak_share == 1.0
    [warning] = result.warnings
    assert "theoretical peak" in warning and "not raised" in warning
    [row] = aggregate([result])
    assert row.peak_share == 1.0 and row.over_peak


def peak_packages() -> dict[str, str]:
    from dlperf.core import environment

    return environment.packages()


def test_a_raised_peak_goes_stale_with_its_framework_version():
    low = peak.peak_of([], 1, "cpu")
    raised = peak.raised_result(_run_result(120e9), low, PACKAGES)
    assert peak.lookup([raised], [], PACKAGES)[0] == [raised]
    newer = {**PACKAGES, "tensorflow-cpu": "2.22.0"}
    assert peak.lookup([raised], [], newer)[0] == []


def test_no_table_or_export_shows_a_share_above_100_percent(db, tmp_path):
    import json

    from dlperf.report import write_raw_json

    # a result stored by an older dlperf, with a peak below its own rate
    r = _run_result(120e9, framework="torch")
    r = r.model_copy(update={"metrics": r.metrics.model_copy(update={"peak_flops": 95e9,
                                                                     "peak_share": 120 / 95})})
    with Store(db) as st:
        st.add(r)
        [exported] = json.loads(write_raw_json(st, tmp_path / "r.json").read_text())["results"]
    assert exported["metrics"]["peak_share"] == 1.0
    assert exported["metrics"]["achieved_flops"] == 120e9
    assert any("above the peak" in w for w in exported["warnings"])
    [row] = aggregate([r])
    assert row.peak_share == 1.0 and row.over_peak
    assert any("above the peak" in w for w in row.warnings)
    table = detail_table([row])
    col = table.headers.index("%peak")
    assert table.rows[0][col].startswith("100.0%[")
    assert table.values[0][col] == 1.0
    assert any("above the peak" in f for f in table.footnotes)


# ----------------------------------------------------------------------------- theoretical
ICELAKE = {"vendor_id": "GenuineIntel", "cpu family": "6", "model": "106",
           "model name": "Intel(R) Xeon(R) Processor @ 2.80GHz", "flags": "fma avx2 avx512f",
           "cpu MHz": "2793.438"}
GENOA = {"vendor_id": "AuthenticAMD", "cpu family": "25", "model": "17",
         "model name": "AMD EPYC 9454P 48-Core Processor", "flags": "fma avx2 avx512f",
         "cpu MHz": "2750.000"}


def test_theoretical_peak_is_cores_units_lanes_two_and_clock():
    t = cpu_peak.theoretical_peak(ICELAKE, cores=2)
    # Ice Lake-SP: 2 AVX-512 FMA units, 16 fp32 lanes each, clock from the model name
    assert t.flops == pytest.approx(2 * 2 * 16 * 2 * 2.80e9)
    assert t.clock_source == "model name" and "Ice Lake-SP" in t.describe()
    # Zen 4 runs AVX-512 on two 256-bit FMA pipes: 8 lanes each; cpufreq's maximum wins
    z = cpu_peak.theoretical_peak(GENOA, cores=1, max_khz=3_810_000)
    assert z.flops == pytest.approx(1 * 2 * 8 * 2 * 3.81e9) and z.units.microarch == "Zen 4"
    # without cpufreq or '@ GHz' in the name: the current clock
    assert cpu_peak.theoretical_peak(GENOA, cores=1).ghz == pytest.approx(2.75)


@pytest.mark.parametrize("name, units", [
    ("Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", 2),
    ("Intel(R) Xeon(R) Platinum 8280 CPU @ 2.70GHz", 2),
    ("Intel(R) Xeon(R) Gold 5122 CPU @ 3.60GHz", 2),
    ("Intel(R) Xeon(R) Gold 5118 CPU @ 2.30GHz", 1),
    ("Intel(R) Xeon(R) Silver 4114 CPU @ 2.20GHz", 1),
    ("Intel(R) Xeon(R) CPU @ 2.00GHz", None),  # a cloud VM's name: the tier is unknown
])
def test_skylake_sp_fma_units_follow_the_product_tier(name, units):
    info = {**ICELAKE, "model": "85", "model name": name}
    t = cpu_peak.theoretical_peak(info, cores=1)
    if units is None:  # said so, not "unknown CPU"
        assert t.flops is None and "depend on the product tier" in t.describe()
        assert "Skylake-SP" in t.describe() and "not in dlperf's table" not in t.describe()
    else:
        assert t.units.units == units and t.flops == pytest.approx(units * 16 * 2 * t.ghz * 1e9)


def test_a_measured_busy_clock_wins_over_nominal_figures_but_not_cpufreq():
    # a VM: no cpufreq, a nominal 'cpu MHz' below the boost its cores run at
    turin = {**GENOA, "cpu family": "26", "model": "2", "model name": "AMD EPYC",
             "cpu MHz": "2596.122"}
    t = cpu_peak.theoretical_peak(turin, cores=2, busy_ghz=lambda: 4.3)
    # Zen 5 on a server: two 512-bit FMA pipes, 16 fp32 lanes each
    assert t.units.microarch == "Zen 5" and t.units.flops_per_cycle == 64
    assert t.flops == pytest.approx(2 * 64 * 4.3e9) and t.clock_source.startswith("measurement")
    assert cpu_peak.theoretical_peak(turin, cores=2).ghz == pytest.approx(2.596122)
    # the measured clock beats the nominal one in the model name; cpufreq's maximum beats it
    assert cpu_peak.theoretical_peak(ICELAKE, 1, busy_ghz=lambda: 3.5).ghz == 3.5
    assert cpu_peak.theoretical_peak(ICELAKE, 1, max_khz=3_100_000, busy_ghz=lambda: 3.5).ghz == 3.1
    # measured only where the peak needs it: not with cpufreq's maximum, nor for a CPU
    # whose FMA units are unknown

    def refuse():
        raise AssertionError("measured for nothing")

    assert cpu_peak.theoretical_peak(ICELAKE, 1, max_khz=3_100_000, busy_ghz=refuse).ghz == 3.1
    assert cpu_peak.theoretical_peak({**turin, "model": "36"}, 1, busy_ghz=refuse).flops is None


def test_the_busy_clock_is_measured_where_the_code_can_run(monkeypatch):
    import mmap
    import platform
    import sys

    from dlperf.core import cpu_clock

    ghz = cpu_clock.busy_clock_ghz.__wrapped__(trials=2, iterations=200_000)
    if sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64"):
        lo, hi = cpu_clock.PLAUSIBLE_GHZ
        assert ghz is not None and lo <= ghz <= hi
    else:
        assert ghz is None
    # a platform that refuses an executable page: unknown, not an error

    def refuse(*_a, **_k):
        raise PermissionError("W^X")

    monkeypatch.setattr(mmap, "mmap", refuse)
    assert cpu_clock.busy_clock_ghz.__wrapped__(trials=1, iterations=1000) is None


def test_the_fastest_busy_clock_seen_on_the_machine_is_kept(monkeypatch, tmp_path):
    """The boost a core reaches moves from process to process: the theoretical peak takes
    the fastest one measured on this machine, kept between processes, so that every run
    there is set against one figure; an unreadable cache is measured afresh."""
    from dlperf.core import cpu_clock, environment

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for ghz, kept in ((4.1, 4.1), (3.9, 4.1), (4.3, 4.3), (None, 4.3)):
        monkeypatch.setattr(cpu_clock, "busy_clock_ghz", lambda g=ghz: g)
        assert environment.busy_clock_ghz() == kept
    (tmp_path / "dlperf" / "busy_clock.json").write_text("{not json")
    monkeypatch.setattr(cpu_clock, "busy_clock_ghz", lambda: 3.9)
    assert environment.busy_clock_ghz() == 3.9
    # another machine's figure is not this one's
    other = {"0123456789abcdef": 5.0}
    (tmp_path / "dlperf" / "busy_clock.json").write_text(json.dumps(other))
    assert environment.busy_clock_ghz() == 3.9


def test_peaks_that_differ_only_in_their_measured_clock_are_said_once_with_ranges():
    """A table of runs at one and two cores prints one MFU line per core count: the clock
    measured at each run moves by a few MHz, and the peak with it."""
    def at(cores: int, ghz: float) -> str:
        return cpu_peak.Theoretical(flops=cores * 64 * ghz * 1e9, cores=cores,
                                    units=cpu_peak.FmaUnits("Zen 5", 2, 512, "avx512f", "AMD"), ghz=ghz,
                                    clock_source="measurement on a busy core").describe()

    lines = cpu_peak.merged([at(1, 4.07), at(1, 4.11), at(1, 4.08), at(2, 4.14)])
    assert lines == [at(1, 4.07).replace("260 GFLOP/s", "260-263 GFLOP/s").replace(
        "4.07 GHz", "4.07-4.11 GHz"), at(2, 4.14)]
    assert cpu_peak.merged([at(1, 4.07)] * 2) == [at(1, 4.07)]
    assert cpu_peak.merged(["unknown (no FMA units known)"]) == ["unknown (no FMA units known)"]


def test_theoretical_peak_is_unknown_rather_than_guessed():
    # a mobile Zen 5 (Strix Point): 256- or 512-bit pipes by product, not by model number
    zen5 = cpu_peak.theoretical_peak({**GENOA, "cpu family": "26", "model": "36"}, 1)
    assert zen5.flops is None and "not in dlperf's table" in zen5.describe()
    # Emerald Rapids under a cloud VM's generic name: its tier, hence its units, unknown
    emerald = cpu_peak.theoretical_peak({**ICELAKE, "model": "207",
                                         "model name": "Intel(R) Xeon(R) Processor"}, 1)
    assert emerald.flops is None and "Emerald Rapids" in emerald.describe()
    assert "depend on the product tier" in emerald.describe()
    assert cpu_peak.theoretical_peak({"model name": "ARM Neoverse"}, 1).flops is None
    hidden = cpu_peak.theoretical_peak({**ICELAKE, "flags": "fma avx2"}, 1)
    assert hidden.flops is None and "avx512f" in hidden.describe()


# ----------------------------------------------------------------------------- the limit
def _peak(**rates: float) -> peak.Peak:
    ks = []
    for key, f in rates.items():
        fw, kernel = key.split("_")
        ks.append(peak.KernelRate(framework=fw, kernel=kernel, flops=f, size=2048))
    return peak.Peak(threads=1, device="cpu", rates=tuple(ks))


def _percents(text: str) -> list[float]:
    return [float(p) for p in re.findall(r"([\d.]+)%", text)]


def test_limit_message_names_the_library_when_it_is_the_limit():
    pk = _peak(torch_matmul=95e9, torch_conv=60e9, tensorflow_matmul=138e9)
    msg = peak.limit_message("fcn5 torch/eager cpu x1 b64", "fcn5", "torch", 56.6e9, pk,
                             {"tensorflow/graph": 135e9})
    assert f"reaches {56.6 / 138:.1%} of this machine's best measured rate at 1 thread" in msg
    assert "(tensorflow matmul, 138 GFLOP/s)" in msg
    assert "torch's own best kernel (matmul) reaches 95 GFLOP/s" in msg
    assert "the library, not the machine" in msg
    assert msg.endswith(f". The same configuration on tensorflow/graph reaches {135 / 138:.1%}.")


def test_limit_message_blames_no_library_that_reaches_the_best_rate():
    pk = _peak(torch_matmul=135e9, tensorflow_matmul=138e9)
    msg = peak.limit_message("x", "fcn5", "torch", 100e9, pk, {})
    assert "torch's own best kernel (matmul) reaches 135 GFLOP/s" in msg
    assert "library, not the machine" not in msg and "same configuration" not in msg
    assert msg.endswith("here.")
    # the library whose kernel is the best is not compared with itself
    own = peak.limit_message("x", "fcn5", "tensorflow", 100e9, pk, {})
    assert "own best kernel" not in own


def test_limit_message_never_shows_a_share_above_100_percent():
    pk = _peak(torch_matmul=95e9)
    raised = pk.raised(peak.KernelRate(framework="tensorflow", kernel=peak.RAISED, flops=140e9,
                                       size=64, raised_by="fcn5 tensorflow/graph cpu x1 b64"))
    msg = peak.limit_message("fcn5 tensorflow/graph cpu x1 b64", "fcn5", "tensorflow", 140e9,
                             raised, {"jax/jit": 150e9})
    assert "ran faster than every kernel" in msg
    assert "dlperf measured no tensorflow kernel here" in msg
    assert "faster than the peak used here" in msg
    assert _percents(msg) and max(_percents(msg)) <= 100.0


def test_the_same_configuration_on_other_frameworks_comes_from_the_store(db):
    torch_run = _run_result(50e9, framework="torch")
    with Store(db) as st:
        st.add(torch_run)
        st.add(_run_result(130e9, framework="tensorflow"))
        st.add(_run_result(90e9, framework="jax"))
        other_batch = _run_result(200e9, framework="jax")
        st.add(other_batch.model_copy(update={"spec": other_batch.spec.model_copy(
            update={"batch_size": 128})}))
        others = other_framework_rates(st, torch_run.spec)
    assert others == {"tensorflow/graph": pytest.approx(130e9), "jax/jit": pytest.approx(90e9)}


# ----------------------------------------------------------------------------- probes
def test_torch_conv_probe_counts_the_flops_torch_counts():
    from torch.utils.flop_counter import FlopCounterMode

    from dlperf.backends import load
    from dlperf.backends.base import UnsupportedError, conv_probe_flops
    from dlperf.backends.base import probe as probe_of

    backend = load("torch")
    probe = probe_of(backend, "conv", 128, "cpu")
    with FlopCounterMode(display=False) as counter:
        probe.step()
    assert counter.get_total_flops() == conv_probe_flops(128) == probe.flops_per_step()
    with pytest.raises(UnsupportedError, match="no peak kernel 'fft'"):
        probe_of(backend, "fft", 128, "cpu")


@pytest.mark.slow
def test_ensure_peak_measures_each_kernel_once_then_reuses_it(db):
    # one kernel (the conv, through the worker) keeps it to two torch processes
    with Store(db) as st:
        runner = Runner(st, timeout_s=120, peak_size=64, peak_measurement=FAST,
                        peak_kernels=(("torch", "conv"),))
        first = runner.ensure_peak(1)
        n = len(st.results(kind="peak"))
        assert n == 1
        [rate] = first.rates
        assert rate.source == "torch conv" and len(rate.round_flops) == peak.ROUNDS
        assert first.flops == rate.flops == max(rate.round_flops) > 0
        assert first.theoretical  # a number or the reason it is unknown
        again = runner.ensure_peak(1)
        assert len(st.results(kind="peak")) == n and again.flops == first.flops
        runner.ensure_peak(1, remeasure=True)
        assert len(st.results(kind="peak", latest=False)) == 2 * n


@pytest.mark.slow
def test_a_new_store_takes_the_rates_another_store_measured_and_measures_nothing(tmp_path):
    # the machine's peak store (engine.machine_peaks): measured once, copied into the next
    # store as measured; a remeasure there is kept for the stores after it
    kernels = dict(timeout_s=120, peak_size=64, peak_measurement=FAST,
                   peak_kernels=(("torch", "conv"),))
    with Store(tmp_path / "a.db") as a:
        [measured] = Runner(a, **kernels).ensure_peak(1).rates
    with Store(tmp_path / "b.db") as b:
        runner = Runner(b, **kernels)
        runner._run_and_store = None  # nothing may be measured: a call would fail
        [taken] = runner.ensure_peak(1).rates
        [row] = b.results(kind="peak")
    assert taken == measured and row.machine_id and row.finished_at == measured.measured_at
    with Store(tmp_path / "c.db") as c:
        [again] = Runner(c, **kernels).ensure_peak(1, remeasure=True).rates
    assert again.measured_at > measured.measured_at
    with Store(tmp_path / "d.db") as d:
        runner = Runner(d, **kernels)
        runner._run_and_store = None
        assert runner.ensure_peak(1).rates == (again,)


def test_a_raised_peak_and_a_failed_kernel_stay_with_their_own_store(tmp_path):
    from dlperf.engine import machine_peaks

    matmul, conv = _specs()
    raised = peak.raised_result(_ok(RunSpec(network="fcn5", threads=1), 9e9),
                                peak.peak_of([_ok(matmul, 1e9)], 1, "cpu"), PACKAGES)
    crashed = RunResult(spec=conv, status="failed", failure=Failure(reason="crash", message="x"))
    with Store(tmp_path / "a.db") as a:
        machine_peaks.keep(a, [a.add(_ok(matmul, 1e9)), a.add(raised), a.add(crashed)])
    with Store(machine_peaks.path()) as shared:
        assert [r.spec.network for r in shared.results(kind="peak")] == ["matmul"]


def test_runs_go_on_where_the_machines_peak_store_cannot_be_opened(tmp_path, monkeypatch):
    from dlperf.engine import machine_peaks

    (tmp_path / "file").write_text("")
    monkeypatch.setenv("DLPERF_PEAKS", str(tmp_path / "file" / "peaks.db"))  # under a file
    spec = _specs(kernels=(("torch", "matmul"),))[0]
    with Store(tmp_path / "a.db") as a:
        machine_peaks.keep(a, [a.add(_ok(spec, 1e9))])
        assert machine_peaks.borrow(a, [spec], 1, "cpu", PACKAGES) == []
