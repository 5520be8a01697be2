"""Direct tests of pieces that other tests reached only through whole runs, each against
figures worked out by hand: the parallel section's factor tables, findings and plots
from stored rows (``kinds.parallel.factors``), the CPU time of the timed steps
(``Timing.cpu_s``), the per-framework factors fitted on whole networks
(``perfmodel.correct.fit_factors``), and the order in which CPUs are handed out for
pinning (``core.environment``: one CPU per physical core first, from a made-up /sys)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dlperf.core import environment, timing
from dlperf.core.spec import Measurement, Metrics, RunResult
from dlperf.kinds.parallel import factors
from dlperf.kinds.parallel.analysis import rows_from
from dlperf.kinds.parallel.make import make_spec
from dlperf.kinds.parallel.options import (
    Drift,
    EvalPoint,
    ParallelOutcome,
    ServerLoad,
    Staleness,
    Training,
)
from dlperf.perfmodel.correct import PRIOR, Factors, choose_factors, fit_factors
from dlperf.perfmodel.result import Breakdown


# ----------------------------------------------------------------------------- parallel factors
def _row(strategy: str, workers: int, median: float, *, comm: float = 0.3, wait: float = 0.1,
         push_every: int = 1, servers: int = 0, drift: float | None = None,
         busy: tuple[float, ...] = (), rate: tuple[float, ...] = (),
         staleness: float | None = None, network: str = "fcn5", size: str = "tiny",
         delay: float = 0.0, training: Training | None = None, **kw) -> RunResult:
    """A stored parallel run of batch 16 (``kw``: make_spec's other settings)."""
    spec = make_spec(network, size=size, strategy=strategy, workers=workers, batch_size=16,
                     push_every=push_every, servers=servers, straggler_delay_s=delay, **kw)
    m = Metrics(steps=3, median_s=median, mean_s=median, std_s=0.0, min_s=median,
                max_s=median, mad_s=0.0, iqr_s=0.0, cv=0.0,
                samples_per_s=spec.batch_size / median)
    loads = [ServerLoad(rank=i, shard_params=10, busy_share=b, bytes_per_s=r)
             for i, (b, r) in enumerate(zip(busy, rate, strict=True))]
    out = ParallelOutcome(
        strategy=strategy, workers=workers, push_every=push_every, servers=loads,
        breakdown={"shares": {"compute": 1 - comm - wait, "comm": comm, "wait": wait,
                              "server": 0.0}},
        drift=Drift(count=4, mean=drift, median=drift, p90=drift, max=drift,
                    mean_relative=drift / 2) if drift is not None else None,
        staleness=Staleness(count=4, mean=staleness, median=staleness, p90=staleness,
                            max=math.ceil(staleness)) if staleness is not None else None,
        training=training)
    return RunResult(spec=spec, status="ok", metrics=m, outcome=out, step_times_s=[median] * 3)


def _period_results() -> list[RunResult]:
    """Async fcn5 on 2 workers at k = 1, 2, 8 (4 workers at k = 1 and 8), a real-data run
    at k = 4 and a straggler run (neither in the findings)."""
    trained = Training(data="digits", reached=True, time_to_target_s=12.5,
                       final=EvalPoint(train_s=12.5, steps=40, loss=0.3, accuracy=0.875))
    return [
        _row("async", 2, 0.10, comm=0.5, wait=0.1, drift=0.01, staleness=1.0),
        _row("async", 2, 0.06, comm=0.3, wait=0.05, push_every=2, drift=0.02, staleness=0.5),
        _row("async", 2, 0.04, comm=0.15, wait=0.05, push_every=8, drift=0.03,
             staleness=0.25),
        _row("async", 4, 0.20, comm=0.6, wait=0.2, drift=0.04, staleness=3.0),
        _row("async", 4, 0.05, comm=0.2, wait=0.0, push_every=8, drift=0.10, staleness=0.5),
        _row("async", 2, 0.5, push_every=4, network="ffn", size="small", data="digits",
             target_accuracy=0.8, training=trained),
        _row("async", 2, 0.9, push_every=8, delay=0.5),
        _row("sync", 2, 0.07),
    ]


def test_period_table_has_a_row_per_async_run_without_a_straggler():
    rows = rows_from(_period_results())
    t = factors.period_table(rows)
    assert t is not None and t.title == "Asynchronous updates with a period"
    col = {h: i for i, h in enumerate(t.headers)}
    # ordered by network, workers within a period: fcn5's five, then ffn's; no straggler
    # run, no sync run
    assert [(r[0], r[col["workers"]], r[col["push every"]]) for r in t.rows] == [
        ("fcn5 [tiny]", "2", "1"), ("fcn5 [tiny]", "4", "1"), ("fcn5 [tiny]", "2", "2"),
        ("fcn5 [tiny]", "2", "8"), ("fcn5 [tiny]", "4", "8"), ("ffn [small]", "2", "4")]
    k1 = t.values[0]
    assert k1[col["comm + wait"]] == pytest.approx(0.5 + 0.1)
    assert t.rows[0][col["comm + wait"]] == "60.0%"
    assert t.rows[0][col["time/mini-batch"]] == "100 ms"
    assert t.rows[0][col["staleness mean"]] == "1.00"
    assert k1[col["drift mean"]] == 0.01 and k1[col["drift / norm of w"]] == 0.005
    assert t.rows[0][col["drift / norm of w"]] == "0.5%"
    assert t.rows[0][col["data"]] == "synthetic" and t.rows[0][col["time to target"]] == "-"
    real = t.rows[-1]
    assert real[col["data"]] == "digits" and real[col["time to target"]] == "12.5 s"
    assert real[col["final accuracy"]] == "0.875" and real[col["drift mean"]] == "-"
    # without a period above 1 there is nothing to show
    assert factors.period_table(rows_from([_row("async", 2, 0.1), _row("sync", 2, 0.1)])) is None


def test_period_finding_compares_every_step_with_the_longest_period_of_the_most_workers():
    """4 workers (the most with k = 1 and another k): k = 8 against k = 1: 0.20 / 0.05 =
    4x shorter, comm + wait 80% to 20%, drift 0.10 / 0.04 = 2.5x."""
    rows = rows_from(_period_results())
    assert factors.period_finding(rows) == (
        "Period (fcn5, 4 workers): exchanging every 8 steps instead of every step made the "
        "time per mini-batch 4x shorter and moved the communication and waiting share from "
        "80.0% to 20.0%, with a drift 2.5x as large.")
    # only two workers measured: k = 8 against k = 1 there, 0.10 / 0.04 = 2.5x
    two = rows_from([r for r in _period_results() if r.spec.options.workers == 2])
    assert factors.period_finding(two).startswith(
        "Period (fcn5, 2 workers): exchanging every 8 steps instead of every step made the "
        "time per mini-batch 2.5x shorter and moved the communication and waiting share "
        "from 60.0% to 20.0%, with a drift 3.0x as large.")
    # no k = 1 run: no finding
    assert factors.period_finding(rows_from([_row("async", 2, 0.1, push_every=2),
                                             _row("async", 2, 0.1, push_every=4)])) == ""
    assert factors.times(1.0, 1.3) == "1.3x longer" and factors.times(2.4, 1.0) == "2.4x shorter"


def _server_results() -> list[RunResult]:
    """Async fcn5, k = 1: beside rank 0 on 2 and 4 workers, 2 dedicated servers on 2
    and 4 workers (the busiest server: 10% then 40%)."""
    return [
        _row("async", 2, 0.08, comm=0.2, wait=0.1, busy=(0.3,), rate=(2e6,)),
        _row("async", 4, 0.16, comm=0.4, wait=0.2, busy=(0.6,), rate=(5e6,)),
        _row("async", 2, 0.05, comm=0.1, wait=0.0, servers=2, busy=(0.1, 0.05),
             rate=(1e6, 3 * 2**20)),
        _row("async", 4, 0.025, comm=0.2, wait=0.1, servers=2, busy=(0.4, 0.2),
             rate=(2 * 2**20, 2e6)),
        _row("async", 2, 0.03, push_every=4, servers=2, busy=(0.9,), rate=(1e6,)),
    ]


def test_server_table_and_finding():
    rows = rows_from(_server_results())
    t = factors.server_table(rows)
    assert t is not None
    col = {h: i for i, h in enumerate(t.headers)}
    # k = 4 has no place here; beside rank 0 first
    assert [(r[col["workers"]], r[col["servers"]]) for r in t.rows] == [
        ("2", "0 (beside rank 0)"), ("4", "0 (beside rank 0)"), ("2", "2"), ("4", "2")]
    two_servers = t.rows[2]
    assert two_servers[col["samples/s"]] == "320"  # 16 / 0.05
    assert t.values[2][col["samples/s"]] == pytest.approx(320.0)
    assert two_servers[col["busiest server busy"]] == "10.0%"  # the larger of 10% and 5%
    assert two_servers[col["server traffic (max)"]] == "3 MiB/s"
    assert two_servers[col["workers comm + wait"]] == "10.0%"
    assert t.rows[3][col["server traffic (max)"]] == "2 MiB/s"
    assert factors.server_finding(rows) == (
        "Servers (fcn5): no dedicated servers: 2 to 4 workers made the time per mini-batch "
        "2x longer, the busiest server 30.0% to 60.0% busy; 2 servers: 2 to 4 workers made "
        "the time per mini-batch 2x shorter, the busiest server 10.0% to 40.0% busy.")
    # no dedicated servers stored: neither table nor plot
    plain = rows_from(_server_results()[:2])
    assert factors.server_table(plain) is None and factors.servers_plot(plain, Path("x")) is None


def test_hybrid_finding_against_sync_and_pipeline_at_the_same_workers():
    results = [
        _row("hybrid", 4, 0.06, groups=2, micro_batches=2),
        _row("hybrid", 4, 0.08, groups=2, micro_batches=2, hybrid_within="data"),
        _row("sync", 4, 0.09),
        _row("sync", 4, 0.03, delay=0.5),  # a straggler run is no peer
        _row("pipeline", 4, 0.03, micro_batches=2),
        _row("sync", 2, 0.01),  # other worker count: no peer
    ]
    assert factors.hybrid_finding(rows_from(results)) == (
        "Hybrid (fcn5 [tiny], 4 workers, 2 groups x 2 stages, model within, 2 "
        "micro-batches): 60 ms per mini-batch, 1.5x shorter than sync, 2x longer than "
        "pipeline.")
    assert factors.hybrid_finding(rows_from(results[2:])) == ""
    text = factors.factor_text(rows_from(results + _period_results()))
    assert text.startswith("Period (fcn5, 4 workers)") and "Hybrid (fcn5 [tiny]" in text


def _plotted(monkeypatch, make) -> tuple[list[list[dict]], Path | None]:
    """Each axis's lines (label, x, y) of the figure ``make`` saves (saved for real)."""
    from dlperf.report import plots

    seen: list = []
    real = plots.save

    def save(fig, path):
        seen.append([{ln.get_label(): ln.get_xydata().tolist() for ln in ax.lines}
                     for ax in fig.axes])
        return real(fig, path)

    monkeypatch.setattr(plots, "save", save)
    return seen, make()


def test_servers_plot_draws_samples_per_second_and_the_busiest_servers_load(
        monkeypatch, tmp_path):
    rows = rows_from(_server_results())
    seen, path = _plotted(monkeypatch,
                          lambda: factors.servers_plot(rows, tmp_path / "servers.png"))
    assert path == tmp_path / "servers.png" and path.stat().st_size > 0
    [(rate, busy)] = seen
    assert rate == {"fcn5 [tiny], 2 server(s)": [[2, 320.0], [4, 640.0]],
                    "fcn5 [tiny], no dedicated server(s)": [[2, 200.0], [4, 100.0]]}
    assert busy == {"fcn5 [tiny], 2 server(s)": [[2, 0.1], [4, 0.4]],
                    "fcn5 [tiny], no dedicated server(s)": [[2, 0.3], [4, 0.6]]}


def test_period_plot_draws_the_communication_share_and_the_drift_against_k(
        monkeypatch, tmp_path):
    rows = rows_from(_period_results())
    seen, path = _plotted(monkeypatch,
                          lambda: factors.period_plot(rows, tmp_path / "period.png"))
    assert path is not None and path.stat().st_size > 0
    [(share, drift)] = seen
    assert share.keys() == drift.keys() == {"fcn5 [tiny] x2", "fcn5 [tiny] x4"}
    np.testing.assert_allclose(share["fcn5 [tiny] x2"], [[1, 0.6], [2, 0.35], [8, 0.2]])
    np.testing.assert_allclose(share["fcn5 [tiny] x4"], [[1, 0.8], [8, 0.2]])
    np.testing.assert_allclose(drift["fcn5 [tiny] x2"], [[1, 0.01], [2, 0.02], [8, 0.03]])
    np.testing.assert_allclose(drift["fcn5 [tiny] x4"], [[1, 0.04], [8, 0.10]])
    # one period per workload: no line to draw
    assert factors.period_plot(rows_from(_period_results()[:1]), tmp_path / "p.png") is None


# ----------------------------------------------------------------------------- Timing.cpu_s
class _FakeClocks:
    """A wall clock and a process CPU clock that only the steps move: call i (from 1)
    takes WALL seconds of wall time and i milliseconds of CPU time."""

    def __init__(self, wall_s: float):
        self.wall_ns, self.cpu_s, self.calls, self.step_ns = 0, 0.0, 0, round(wall_s * 1e9)

    def step(self) -> None:
        self.calls += 1
        self.wall_ns += self.step_ns
        self.cpu_s += self.calls * 1e-3

    def cpu_of(self, calls: range) -> float:
        return sum(i * 1e-3 for i in calls)


@pytest.mark.parametrize("wall_s, runner", [(0.01, "measure"), (0.03, "measure_window")])
def test_cpu_s_is_the_cpu_time_of_the_timed_steps_alone(monkeypatch, wall_s, runner):
    """Warm-up steps cost CPU too but are not the sample: cpu_s is the CPU time of the
    timed steps only (the last len(steps_s) calls), wall_s their wall time, cpu_util the
    ratio. Steps of 30 ms fill a window of 3 (measure_window's sample is its last 3)."""
    clocks = _FakeClocks(wall_s)
    monkeypatch.setattr(timing.time, "perf_counter_ns", lambda: clocks.wall_ns)
    monkeypatch.setattr(timing.time, "process_time", lambda: clocks.cpu_s)
    m = Measurement(min_time_s=0.05, min_steps=3, warmup_min_steps=2, warmup_max_steps=10,
                    warmup_max_time_s=60.0, settle_tolerance=0.05)
    t = getattr(timing, runner)(clocks.step, lambda: None, m)
    warm, timed = len(t.warmup_s), len(t.steps_s)
    assert t.settled and warm >= m.warmup_min_steps and timed >= m.min_steps
    assert warm + timed == clocks.calls
    assert t.cpu_s == pytest.approx(clocks.cpu_of(range(warm + 1, clocks.calls + 1)), rel=1e-9)
    assert t.wall_s == pytest.approx(timed * wall_s, rel=1e-9)
    assert t.cpu_util == pytest.approx(t.cpu_s / (timed * wall_s), rel=1e-9)
    assert t.cpu_s < clocks.cpu_s  # the warm-up's CPU time is left out


# ----------------------------------------------------------------------------- fit_factors
def _breakdown(c: float, m: float, o: float, comm: float = 0.0) -> Breakdown:
    return Breakdown(compute_s=c, memory_s=m, overhead_s=o, communication_s=comm,
                     bubble_s=0.0, straggler_s=0.0)


def _synthetic(true: tuple[float, float, float], n: int, seed: int = 0):
    """n configurations whose measured time is exactly the closed form
    a C + b M + c O + communication."""
    rng = np.random.default_rng(seed)
    a, b, c = true
    out = []
    for _ in range(n):
        bd = _breakdown(*rng.uniform(0.01, 1.0, 3), comm=rng.uniform(0.0, 0.3))
        out.append((bd, a * bd.compute_s + b * bd.memory_s + c * bd.overhead_s
                    + bd.communication_s))
    return out


def _ridge(points, terms=("compute_s", "memory_s", "overhead_s")) -> np.ndarray:
    """The same fit in closed form: minimise the relative residuals plus PRIOR^2 times
    the squared distance of each factor from 1, by the normal equations."""
    x = np.array([[getattr(b, t) / y for t in terms] for b, y in points])
    r = np.array([1 - b.communication_s / y for b, y in points])
    lam = PRIOR**2 * np.eye(len(terms))
    return np.linalg.solve(x.T @ x + lam, x.T @ r + lam @ np.ones(len(terms)))


def test_fit_factors_recovers_the_factors_that_made_the_measurements():
    true = (1.4, 0.6, 2.5)
    pts = _synthetic(true, 400)
    f = fit_factors(pts, ["resnet50", "fcn5", "fcn5"])
    got = (f.compute, f.memory, f.overhead)
    assert got == pytest.approx(tuple(_ridge(pts)), rel=1e-6)  # no factor at its bound
    assert got == pytest.approx(true, rel=0.02)  # the prior's pull, small at 400 points
    assert f.fitted_on == ("fcn5", "resnet50") and f.points == 400
    # four configurations: the same closed form, the prior pulling the factors towards 1
    # (never further from 1 than the truth, as a whole), further from the truth than 400
    few = fit_factors(pts[:4])
    few_got = np.array([few.compute, few.memory, few.overhead])
    np.testing.assert_allclose(few_got, _ridge(pts[:4]), rtol=1e-6)
    assert np.linalg.norm(few_got - 1) <= np.linalg.norm(np.array(true) - 1)
    assert np.linalg.norm(few_got - true) > np.linalg.norm(np.array(got) - true)
    # the corrected time: a C + b M + c O + the rest, as it stands
    bd = _breakdown(0.2, 0.1, 0.05, comm=0.07)
    assert f.apply(bd) == pytest.approx(got[0] * 0.2 + got[1] * 0.1 + got[2] * 0.05 + 0.07)


def test_fit_factors_keeps_1_where_no_point_has_the_term_and_never_goes_negative():
    rng = np.random.default_rng(1)
    # no memory term anywhere, and an overhead the measurements do not contain
    pts = []
    for _ in range(50):
        bd = _breakdown(rng.uniform(0.1, 1.0), 0.0, rng.uniform(0.1, 1.0))
        pts.append((bd, 2.0 * bd.compute_s))
    f = fit_factors(pts)
    assert f.memory == 1.0
    assert f.compute == pytest.approx(2.0, rel=0.05)
    assert 0.0 <= f.overhead < 0.05
    # fewer than two points: no correction at all
    assert fit_factors(pts[:1], ["fcn5"]) == Factors(fitted_on=("fcn5",), points=1)
    assert fit_factors([]).apply(_breakdown(0.2, 0.1, 0.05, 0.3)) == pytest.approx(0.65)


def _networks(ratios: dict[str, float]):
    """Two configurations of each of three networks, one compute-bound, one memory-bound,
    one half and half, each measured at ``ratios[network]`` times its prediction."""
    shapes = {"a": (1.0, 0.0, 0.0), "b": (0.0, 1.0, 0.0), "c": (0.5, 0.5, 0.0)}
    points, names = [], []
    for net, (c, m, o) in shapes.items():
        for scale in (1.0, 2.0):
            bd = _breakdown(c * scale, m * scale, o * scale, comm=0.01)
            points.append((bd, ratios[net] * (bd.total_s - 0.01) + 0.01))
            names.append(net)
    return points, names


def test_a_correction_that_does_not_carry_over_between_networks_is_not_applied():
    # measured 25% slower, 20% faster, 25% slower: per-term factors fitted on any two
    # predict the third worse than no correction (36%, 56%, 18% against 20%, 25%, 20%)
    points, names = _networks({"a": 1.25, "b": 0.8, "c": 1.25})
    f = choose_factors(points, names)
    assert f.form == "none" and (f.compute, f.memory, f.overhead) == (1.0, 1.0, 1.0)
    assert f.fitted_on == ("a", "b", "c") and f.points == 6
    assert fit_factors(points, names).compute > 1.3  # what the per-term fit alone applies


def test_a_correction_that_carries_over_is_fitted_on_every_training_network():
    points, names = _networks({"a": 1.3, "b": 1.3, "c": 1.3})
    f = choose_factors(points, names)
    assert f.form in ("scale", "terms")
    # a network of another make-up, measured 30% slower as well: corrected within 2%
    bd = _breakdown(0.3, 0.7, 0.0, comm=0.05)
    assert f.apply(bd) == pytest.approx(1.3 * 1.0 + 0.05, rel=0.02)  # uncorrected: -22%
    # one network alone cannot say whether anything carries over: per-term factors
    one = choose_factors(points[:2], names[:2])
    assert one == fit_factors(points[:2], names[:2]) and one.form == "terms"


# ----------------------------------------------------------------------------- CPU order
def _topology(monkeypatch, tmp_path: Path, cpus: dict[int, tuple[int, int] | None],
              allowed: set[int]) -> None:
    """A made-up /sys: CPU -> (package, core), None for a CPU without topology files; the
    process may run on ``allowed``."""
    for c, where in cpus.items():
        topo = tmp_path / f"sys/devices/system/cpu/cpu{c}/topology"
        topo.mkdir(parents=True)
        if where is not None:
            (topo / "physical_package_id").write_text(f"{where[0]}\n")
            (topo / "core_id").write_text(f"{where[1]}\n")
    monkeypatch.setattr(environment.os, "sched_getaffinity", lambda pid: set(allowed))
    monkeypatch.setattr(environment, "Path", lambda p: tmp_path / str(p).lstrip("/"))


def test_cpus_for_pinning_take_one_cpu_per_physical_core_first(monkeypatch, tmp_path):
    """Two packages of two cores, two hardware threads each, the siblings numbered next to
    each other (cpu0 and cpu1 share a core); core ids repeat across packages."""
    cpus = {0: (0, 0), 1: (0, 0), 2: (0, 1), 3: (0, 1),
            4: (1, 0), 5: (1, 0), 6: (1, 1), 7: (1, 1)}
    _topology(monkeypatch, tmp_path, cpus, set(cpus))
    assert environment.usable_cpus() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert environment.cpus_for(1) == [0]
    assert environment.cpus_for(3) == [0, 2, 4]
    assert environment.cpus_for(6) == [0, 2, 4, 6, 1, 3]
    assert environment.cpus_for(20) == [0, 2, 4, 6, 1, 3, 5, 7]  # oversubscribed: all
    assert [environment.cores_for(n) for n in (1, 2, 4, 5, 8, 20)] == [1, 2, 4, 4, 4, 4]


def test_cpus_for_pinning_follow_the_affinity_and_missing_topology(monkeypatch, tmp_path):
    """Only the CPUs the process may use: cpu3 shares cpu2's core, so it comes last; a CPU
    without topology files counts as a core of its own."""
    cpus = {0: (0, 0), 1: (0, 0), 2: (0, 1), 3: (0, 1), 5: (0, 2), 9: None}
    _topology(monkeypatch, tmp_path, cpus, {1, 2, 3, 5, 9})
    assert environment.usable_cpus() == [1, 2, 5, 9, 3]
    assert environment.cpus_for(4) == [1, 2, 5, 9]
    assert environment.cores_for(4) == 4 and environment.cores_for(5) == 4
