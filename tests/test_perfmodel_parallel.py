"""The parallel model's overlap and placement: DDP's buckets and how much of their
all-reduce the backward pass hides, and free-running workers sharing cores with the
parameter server in rank 0's process (closed forms by hand; a made-up machine)."""

from __future__ import annotations

import pytest

from dlperf.core.store import Store
from dlperf.kinds.calibrate import plan as calibration
from dlperf.kinds.calibrate.prediction import predict_for_spec
from dlperf.kinds.parallel.make import make_spec
from dlperf.perfmodel import formulas as f
from dlperf.perfmodel.machine_fits import MachineFits
from dlperf.perfmodel.sharing import Unit, blocks_of, polling_unit_rates, unit_rates
from tests import calibration_fixtures as made_up

MIB = 2**20


# ----------------------------------------------------------------------------- buckets
def test_ddp_buckets_close_at_one_mib_first_then_at_25():
    # a small last layer fills the first bucket past 1 MiB; a 64 MiB weight is a bucket
    # of its own; the rest closes at 25 MiB and what is left is a last, smaller bucket
    sizes = [0.5 * MIB, 0.75 * MIB, 64 * MIB, 10 * MIB, 10 * MIB, 10 * MIB, 3 * MIB]
    assert f.ddp_buckets(sizes) == [(1.25 * MIB, 1), (64 * MIB, 2), (30 * MIB, 5),
                                    (3 * MIB, 6)]
    assert f.ddp_buckets([]) == [(0.0, -1)]
    assert sum(b for b, _ in f.ddp_buckets([3.0] * 100)) == 300.0


def test_one_bucket_is_wholly_exposed():
    # its last gradient is ready only when the backward pass ends
    assert f.overlapped_comm_time([5.0], [2.0], 5.0) == 2.0


def test_many_buckets_expose_only_the_last_one():
    # ten buckets ready every second, each all-reduced in half a second: all but the
    # last finish under the backward pass
    ready = [float(i + 1) for i in range(10)]
    assert f.overlapped_comm_time(ready, [0.5] * 10, 10.0) == 0.5


def test_communication_longer_than_the_gaps_queues_behind_itself():
    # buckets ready at 1, 2, 3 taking 2 s each run 1-3, 3-5, 5-7: 4 s past the end at 3
    assert f.overlapped_comm_time([1.0, 2.0, 3.0], [2.0] * 3, 3.0) == 4.0


def test_zero_compute_means_no_overlap():
    assert f.overlapped_comm_time([0.0] * 4, [1.0, 2.0, 3.0, 4.0], 0.0) == 10.0


# ----------------------------------------------------------------------------- sharing
def test_a_unit_alone_cycles_through_its_work_and_its_waits():
    assert unit_rates([Unit((0,), (2.0,), wait=1.0), Unit((1,), (1.0,))]) == \
        pytest.approx([1 / 3, 1.0])


def test_two_busy_processes_on_one_block_each_run_at_half_speed():
    assert unit_rates([Unit((0,), (1.0,)), Unit((0,), (1.0,))]) == pytest.approx([0.5, 0.5])


def test_two_busy_processes_on_one_block_also_pay_the_cost_of_sharing_it():
    # each at 1 / (2 x cost) of its speed alone; alone on a block, no cost
    assert unit_rates([Unit((0,), (1.0,)), Unit((0,), (1.0,))], cost=1.25) == \
        pytest.approx([0.4, 0.4])
    assert unit_rates([Unit((0,), (1.0,)), Unit((1,), (1.0,))], cost=1.25) == \
        pytest.approx([1.0, 1.0])


def test_pipeline_stages_computing_together_on_one_block_pay_the_cost_of_sharing_it():
    from dlperf.perfmodel.schedule import gpipe_step_time

    # two stages whose only work is their update, run at once on one block: 2 x cost;
    # on blocks of their own, 1
    args = ([0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 1.0], 1)
    assert gpipe_step_time(*args, placement=[0, 0], cost=1.25) == pytest.approx(2.5)
    assert gpipe_step_time(*args, placement=[0, 1], cost=1.25) == pytest.approx(1.0)


def test_the_server_never_competes_with_the_unit_it_serves():
    # one group on blocks 0 and 1, the server on block 0: work, then the server's apply
    (rate,) = unit_rates([Unit((0, 1), (1.0, 1.0), wait=0.1, serve=0.3)], server_block=0)
    assert rate == pytest.approx(1 / 1.4)


def test_a_transfer_to_the_server_busies_both_ends_cores():
    # alone, a push over loopback takes its time once; where the worker shares the
    # server's block, both ends' copies run on that one block: twice
    (apart,) = unit_rates([Unit((1,), (1.0,), transfer=0.5)], server_block=0)
    (together,) = unit_rates([Unit((0,), (1.0,), transfer=0.5)], server_block=0)
    assert apart == pytest.approx(1 / 1.5) and together == pytest.approx(1 / 2.0)
    # and a second worker on the server's block computes beside the copies
    rates = unit_rates([Unit((1,), (1.0,), transfer=0.5), Unit((0,), (1.0,))],
                       server_block=0)
    assert rates[1] < 1.0


def test_the_servers_work_is_charged_to_the_block_it_runs_on():
    """Four workers on two blocks (rank r on block r mod 2), the server beside rank 0:
    the ranks on block 0 share it with the server's work for every push and run slower
    than those on block 1, which run slower than without a server's work at all."""
    place = blocks_of(4, 2)
    assert place == [0, 1, 0, 1]
    units = [Unit((b,), (1.0,), wait=0.0 if r == 0 else 0.1, serve=0.2)
             for r, b in enumerate(place)]
    rates = unit_rates(units, server_block=0)
    assert rates[0] < rates[1] and rates[2] < rates[3]
    free = unit_rates([Unit((b,), (1.0,), wait=0.1) for b in place])
    assert sum(rates) < sum(free)


def test_a_server_that_cannot_keep_up_sets_the_pace():
    # each push costs the server 1 s of its own: together the units push at most once a
    # second, whatever their own cycles
    rates = unit_rates([Unit((1,), (0.01,), serve=1.0), Unit((2,), (0.01,), serve=1.0)],
                       server_block=0)
    assert sum(rates) == pytest.approx(1.0, rel=1e-6)


def test_processes_that_poll_keep_their_share_of_a_core_while_they_wait():
    """Four ranks on two blocks, the server in rank 0's process with no compute of its
    own, each push costing it 1 s: where every process stays runnable, the server's
    process gets half of block 0 all the time, so a round of four pushes takes 8 s; where
    a waiting process leaves its core, rank 2's short compute hardly slows the server."""
    units = [Unit((b,), (0.0 if r == 0 else 0.01,), serve=1.0)
             for r, b in enumerate(blocks_of(4, 2))]
    assert 4 / sum(polling_unit_rates(units, 0)) == pytest.approx(8.0, rel=1e-6)
    assert 4 / sum(unit_rates(units, server_block=0)) < 4.5


def test_a_polled_message_is_copied_once_by_its_receiver():
    # the push copied by the server's process, the pull by the worker's: on a block of
    # its own the worker's cycle is its work and the two halves; on the server's block,
    # where two processes split it, all of it at half speed
    idle_rank_0 = Unit((0,), (0.0,))
    (_, apart) = polling_unit_rates([idle_rank_0, Unit((1,), (1.0,), transfer=0.5)], 0)
    (_, beside) = polling_unit_rates([idle_rank_0, Unit((0,), (1.0,), transfer=0.5)], 0)
    assert apart == pytest.approx(1 / 1.5) and beside == pytest.approx(1 / 3.0)
    with pytest.raises(ValueError, match="runs the server"):
        polling_unit_rates([Unit((1,), (1.0,))], 0)


def test_rank_0s_compute_and_the_servers_work_split_its_process_share():
    # rank 0 busy computing slows the server's work for the others, and the others'
    # pushes slow rank 0, inside the one share of block 0 its process gets
    others = [Unit((1,), (1.0,), serve=0.5)]
    (_, lone) = polling_unit_rates([Unit((0,), (0.0,)), *others], 0)
    (busy0, crowded) = polling_unit_rates([Unit((0,), (1.0,)), *others], 0)
    assert crowded < lone and busy0 < 1.0


# ----------------------------------------------------------------------------- predict
def _calibration(db) -> MachineFits:
    with Store(db) as store:
        made_up.calibrated(store)
        return calibration.local_calibration(store)


def test_sync_overlaps_the_all_reduce_only_where_a_core_is_spare(db):
    """Two one-thread workers on two cores: gloo's thread has no core of its own, so the
    step pays every bucket; on four cores it overlaps the backward pass."""
    cal = _calibration(db)
    spec = make_spec("fcn5", strategy="sync", workers=2, batch_size=64)
    two = predict_for_spec(spec, MachineFits(cal.fits, cal.memory_gb, 2))
    four = predict_for_spec(spec, MachineFits(cal.fits, cal.memory_gb, 4))
    assert two is not None and four is not None
    # gloo's thread beside a backward pass far longer than the calibration's long step:
    # nothing lost beyond processor sharing; beside a tiny network's short one, its cost
    assert any("none of the" in n and "cost of sharing" not in n for n in two.notes)
    # four workers on two cores in lockstep: a tiny network's short step pays the cost of
    # sharing a core, the full network's long one does not
    def lockstep(size: str) -> list[str]:
        spec = make_spec("fcn5", size=size, strategy="sync", workers=4, batch_size=64)
        return predict_for_spec(spec, MachineFits(cal.fits, cal.memory_gb, 2)).notes

    assert any("the cost of sharing a core" in n for n in lockstep("tiny"))
    assert not any("the cost of sharing a core" in n for n in lockstep("full"))
    assert any("run after the backward pass" in n for n in four.notes)
    assert four.breakdown.communication_s < two.breakdown.communication_s
    assert not any("upper bound" in n for n in two.notes + four.notes)


@pytest.mark.parametrize("strategy,groups", [("async", None), ("mixed", 2)])
def test_free_running_workers_pay_for_the_server_beside_rank_0(db, strategy, groups):
    """Four workers on two cores share them two by two, rank 0's with the server; on
    four cores each has its own and only rank 0's core has the server's work."""
    cal = _calibration(db)
    spec = make_spec("fcn5", size="tiny", strategy=strategy, workers=4, groups=groups,
                     batch_size=64)
    two = predict_for_spec(spec, MachineFits(cal.fits, cal.memory_gb, 2))
    four = predict_for_spec(spec, MachineFits(cal.fits, cal.memory_gb, 4))
    assert two is not None and four is not None
    assert four.time_s < two.time_s
    for p in (two, four):
        assert p.breakdown.total_s == pytest.approx(p.time_s)
        assert min(p.breakdown.model_dump().values()) >= 0
    assert any("share rank 0's cores with the ranks pinned beside it" in n for n in two.notes)


def test_where_sessions_share_cores_the_rpc_groups_processes_keep_their_shares(db, monkeypatch):
    """Four async workers on two cores: where the kernel shares a core among sessions
    (autogroup), every process keeps its share while it waits for the server, which
    slows the server's process on rank 0's core; the prediction says which it took."""
    from dlperf.core import environment

    cal = _calibration(db)
    spec = make_spec("fcn5", strategy="async", workers=4, batch_size=64)
    fits = MachineFits(cal.fits, cal.memory_gb, 2)
    got = {}
    for sessions in (True, False):
        monkeypatch.setattr(environment, "sessions_share_cores", lambda s=sessions: s)
        got[sessions] = predict_for_spec(spec, fits)
    assert got[True].time_s > got[False].time_s
    assert any("shares a core among sessions" in n for n in got[True].notes)
    assert any("copied once, by its receiver" in n for n in got[True].notes)
    assert not any("among sessions" in n for n in got[False].notes)
    assert any("copies by both ends' cores" in n for n in got[False].notes)


def test_the_calibrated_loopback_link_is_taken_as_measured(db):
    """The link between this machine's workers is its all-reduce as calibrated: the ring
    formula on it gives back the timed all-reduce, with no catalogue efficiency (NCCL's
    share of NVLink) on top; a catalogue link keeps that factor."""
    from dlperf.perfmodel.catalogue import link

    cal = _calibration(db)
    m = cal.model("torch", 1, "cpu", workers=2)
    ab = cal.find("torch", 1).allreduce[2]
    bw = m.link.rate(m.efficiencies.link)
    assert m.efficiencies.link < 1
    for n in (1e6, 1e8):
        assert f.ring_allreduce_time(n, 2, bw, m.link.latency_s) == pytest.approx(ab.time(n))
    line = link("eth100")
    assert line.rate(0.8) == pytest.approx(0.8 * line.bytes_per_s)


def test_a_mixed_groups_broadcast_is_gloos_as_calibrated(db):
    """A group's leader hands the pulled weights to its group by gloo's broadcast, which
    the calibration times (one transfer, no sum); a calibration from before it did prices
    it as a transfer at the all-reduce's rate, slower, and says it is an upper bound."""
    from dlperf import workloads

    cal = _calibration(db)
    fits = MachineFits(cal.fits, cal.memory_gb, 2)
    fit = cal.find("torch", 1)
    a, b = made_up.alpha_beta(2)
    assert fit.broadcast[2].time(1e8) == pytest.approx(0.4 * (a + 1e8 / b), rel=1e-3)
    spec = make_spec("fcn5", strategy="mixed", workers=2, groups=1, batch_size=64)
    timed = predict_for_spec(spec, fits)
    older = MachineFits(tuple(f.model_copy(update={"broadcast": {}}) for f in cal.fits),
                        cal.memory_gb, 2)
    before = predict_for_spec(spec, older)
    # fcn5's 472 MB of weights: the broadcast is most of what the two differ by
    grad = 4 * sum(layer.params for layer in workloads.get("fcn5").layers())
    saved = grad / b - fit.broadcast[2].time(grad)  # the transfer's latency is a's half
    assert before.time_s - timed.time_s == pytest.approx(saved, rel=0.05)
    assert any("broadcast" in n and "upper bound" in n for n in before.notes)
    assert not any("upper bound" in n for n in timed.notes)


# ----------------------------------------------------------------------------- targets
def _case(strategy: str, workers: int, error: float, size: str = "full"):
    from types import SimpleNamespace

    from dlperf.kinds.calibrate.validate import Case

    spec = make_spec("fcn5", size=size, strategy=strategy, workers=workers,
                     groups=1 if strategy == "mixed" else None, batch_size=64)
    return Case(SimpleNamespace(spec=spec), 1.0,
                SimpleNamespace(time_s=1.0 + error, strategy=strategy))


def test_parallel_targets_are_per_worker_count_and_per_strategy():
    from dlperf.kinds.calibrate.validate import parallel_target_lines, parallel_targets

    cs = [_case("sync", 2, 0.05), _case("sync", 2, -0.07), _case("pipeline", 2, -0.3),
          _case("sync", 4, 0.02), _case("async", 4, 0.12), _case("sync", 2, 0.9, "tiny")]
    got = {t.scope: (t.n, round(t.median_abs, 6), t.met) for t in parallel_targets(cs)}
    assert got == {"2 workers": (3, 0.07, True), "2 workers, pipeline": (1, 0.3, False),
                   "2 workers, sync": (2, 0.06, True), "4 workers": (2, 0.07, True),
                   "4 workers, async": (1, 0.12, True), "4 workers, sync": (1, 0.02, True),
                   "all workers": (5, 0.07, True), "all workers, async": (1, 0.12, True),
                   "all workers, pipeline": (1, 0.3, False),
                   "all workers, sync": (3, 0.05, True)}
    lines = parallel_target_lines(cs)
    assert "2 workers, pipeline: median |error| 30.0% (n=1), target <= 15%: missed" in \
        "\n".join(lines)
    assert lines[-1].strip().startswith("tiny networks, apart")
    assert parallel_target_lines([]) == []


def test_the_harness_servers_drift_is_its_own_work_only_when_asked(db):
    """dlperf parallel's server measures each push's drift (predict_for_spec asks for it);
    a plain server, predict's default, does not: the same run is slower with it."""
    from dlperf.perfmodel import predict

    cal = _calibration(db)
    m = cal.model("torch", 1, "cpu", workers=2)
    kw = dict(device=m.device, efficiencies=m.efficiencies, size="tiny", batch_size=64,
              strategy="async", devices=2, link=m.link, cores=2)
    plain, drift = predict("fcn5", **kw), predict("fcn5", **kw, server_drift=True)
    assert drift.time_s > plain.time_s
    assert any("the drift measured too" in n for n in drift.notes)
    assert not any("drift" in n for n in plain.notes)


def test_the_cost_of_sharing_a_core_falls_with_the_length_of_the_step():
    """Calibrated at a short and a long step, the cost is interpolated in log time between
    them and held beyond; the calibration's made-up machine pays x1.25 at 8 ms and
    nothing at 96 ms."""
    from dlperf.perfmodel.fit import fit_sharing, fit_sharing_by_step
    from dlperf.perfmodel.kernels import grid
    from dlperf.perfmodel.sharing import cost_at
    from tests import calibration_fixtures as made_up

    samples = [made_up.sample("share", s) for s in grid("share")]
    points = fit_sharing_by_step(samples)
    assert [p for pair in points for p in pair] == pytest.approx([8e-3, 1.25, 96e-3, 1.0])
    assert fit_sharing(samples) == pytest.approx(1.25)  # the short step's, as before
    assert cost_at(points, 1e-3) == pytest.approx(1.25)
    assert cost_at(points, 1.0) == pytest.approx(1.0)
    mid = (8e-3 * 96e-3) ** 0.5  # halfway in log time
    assert cost_at(points, mid) == pytest.approx(1.125)
    # one step length only (a calibration before the long step): no curve
    assert fit_sharing_by_step([s for s in samples if len(s.shape) == 1]) == ()


def test_dlperf_calibrate_prints_the_cost_of_sharing_a_core_by_step(db, capsys):
    from dlperf.cli.calibrate import print_fit

    fit = _calibration(db).find("torch", 1)
    print_fit(fit)
    line = [x for x in capsys.readouterr().out.splitlines() if "core share" in x]
    assert line and "x1.25 for a 8 ms step" in line[0] and "x1 for a 96 ms step" in line[0]


def test_a_pipelines_layers_are_listed_at_the_speed_its_stages_compute(db):
    """Four stages on two cores: the timings run at the workers' shared speed, the
    schedule at full speed; the per-layer listing is the schedule's, so the slowest
    stage's layers together take no more than the step."""
    cal = _calibration(db)
    spec = make_spec("alexnet", strategy="pipeline", workers=4, batch_size=16)
    p = predict_for_spec(spec, MachineFits(cal.fits, cal.memory_gb, 2))
    assert p is not None and p.stages
    by = {t.name: t.time_s for t in p.layers}
    listed = max(sum(by[n] for n in stage) for stage in p.stages)
    b = p.breakdown  # the slowest stage's own work, at full speed
    assert listed <= (b.compute_s + b.memory_s + b.overhead_s) * 1.05


def test_a_stages_later_micro_batches_make_their_gradients_in_new_pages(db, monkeypatch):
    """In a pipeline stage each micro-batch after the first makes weight gradients that
    AccumulateGrad adds and frees: where the weights below glibc's mmap threshold come to
    more than its largest trim threshold, they are new pages every micro-batch
    (``local.accumulated_pages_s``); a larger gradient's pages are its product's already,
    fewer stay in the heap, and a framework that pools its memory pays none."""
    from dlperf.perfmodel import local
    from dlperf.workloads.base import Layer

    fit = _calibration(db).find("torch", 1)
    per = local.fresh_byte_s(fit) * fit.slowdown
    assert per > 0
    small = [Layer(f"c{i}", "conv", params=2_000_000) for i in range(10)]  # 80 MB
    assert local.accumulated_pages_s(small, fit) == pytest.approx(80e6 * per)
    assert local.accumulated_pages_s(small[:6], fit) == 0.0  # 48 MB stay in the heap
    wide = Layer("fc", "dense", params=40_000_000)  # 160 MB: mapped afresh as a result
    assert local.accumulated_pages_s([wide, *small[:6]], fit) == 0.0
    assert local.accumulated_pages_s(small, fit.model_copy(update={"framework": "tensorflow"})) == 0.0

    cal = MachineFits(_calibration(db).fits, 16.0, 2)
    spec = make_spec("resnet50", strategy="pipeline", workers=2, batch_size=8)
    with_pages = predict_for_spec(spec, cal)
    monkeypatch.setattr(local, "accumulated_pages_s", lambda layers, fit: 0.0)
    without = predict_for_spec(spec, cal)
    assert with_pages is not None and without is not None
    assert with_pages.time_s > without.time_s
