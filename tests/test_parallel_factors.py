"""The guide's remaining parallel factors, on CPU with gloo over loopback: asynchronous
updates with a period (the period honoured, the drift measured), dedicated sharded
parameter servers (separate processes, each shard exactly once), and hybrid parallelism
(a pipeline in each group, data parallel across groups: the result of one process on the
global batch). Tiny FCN-5, a few steps each: the cost is torchrun's start-up."""

from __future__ import annotations

import math

import pytest

from dlperf.cli import main
from dlperf.kinds.parallel.make import make_spec
from dlperf.kinds.parallel.results import (
    drift_stats,
    oversubscribed_warning,
    server_loads,
    server_series,
)
from dlperf.perfmodel.partition import shard_layout
from tests.conftest import FAST
from tests.test_parallel import as_dict, launch, load, reference


def spec_for(strategy: str, workers: int, **kw):
    kw.setdefault("batch_size", 16)
    kw.setdefault("measurement", FAST)
    return make_spec("fcn5", size="tiny", strategy=strategy, workers=workers, **kw)


def _flat(model):
    import torch

    return torch.cat([p.detach().reshape(-1) for p in model.parameters() if p.requires_grad])


# ----------------------------------------------------------------------------- period
@pytest.mark.slow
def test_async_with_a_period_exchanges_every_k_steps(tmp_path):
    import torch

    k = 4
    r = launch(spec_for("async", 2, push_every=k, steps=8, warmup_steps=4), tmp_path)
    assert r.ok, r.failure
    e = as_dict(r)
    assert e["push_every"] == k
    server = load(tmp_path, "server", 0)
    pushed = [load(tmp_path, "pushed", w) for w in (0, 1)]
    # 12 steps per worker, one push every 4: 3 pushes each, each carrying 4 local batches
    assert [p["pushes"] for p in pushed] == [3, 3]
    assert [p["updates"] for p in e["per_rank"]] == [3, 3]
    assert {row[5] for row in server["log"]} == {k * 16 // 2}
    assert sorted((row[1], row[2]) for row in server["log"]) == [
        (w, s) for w in (0, 1) for s in range(3)]
    expect = server["w0"].double() - server["lr"] * (pushed[0]["sum"] + pushed[1]["sum"])
    torch.testing.assert_close(server["w"].double(), expect, atol=1e-5, rtol=1e-5)
    # one pull and one push per period: a quarter of the steps exchange at all
    assert e["drift"]["count"] == 4 and e["drift"]["mean"] > 0  # 2 timed pushes x 2 workers
    assert e["staleness"]["count"] == 4
    # the series: one global mini-batch per 16 samples applied; the timed phase's four
    # pushes carried 4 x 32 samples
    assert len(r.step_times_s) == 8


@pytest.mark.slow
def test_async_period_on_one_worker_is_local_sgd_and_its_drift_is_its_own_steps(tmp_path):
    """One worker, k = 4: its four local SGD steps then one push of their summed gradient
    leave the server exactly where four steps of single-process SGD would; the drift at
    that exchange is the worker's own movement, lr x |sum of its gradients|."""
    import torch

    r = launch(spec_for("async", 1, push_every=4, steps=4, warmup_steps=0), tmp_path)
    assert r.ok, r.failure
    server = load(tmp_path, "server", 0)
    pushed = load(tmp_path, "pushed", 0)
    assert pushed["pushes"] == 1
    tr = reference(16)
    for _ in range(4):
        tr.step()
    torch.testing.assert_close(server["w"], _flat(tr.model), atol=1e-5, rtol=1e-5)
    drift = as_dict(r)["drift"]
    assert drift["count"] == 1
    assert drift["mean"] == pytest.approx(server["lr"] * float(pushed["sum"].norm()), rel=1e-4)


# ----------------------------------------------------------------------------- servers
@pytest.mark.slow
def test_dedicated_servers_are_separate_processes_each_with_a_shard(tmp_path):
    import torch

    r = launch(spec_for("async", 2, servers=2, steps=3, warmup_steps=1), tmp_path)
    assert r.ok, r.failure
    e = as_dict(r)
    roles = [p["role"] for p in e["per_rank"]]
    assert roles == ["worker", "worker", "server", "server"]
    assert len({p["pid"] for p in e["per_rank"]}) == 4  # four processes
    assert [p["steps"] for p in e["per_rank"]][2:] == [0, 0]  # servers train nothing
    # the shards: whole tensors, balanced by size, covering every parameter once
    tr = reference(16)
    sizes = [p.numel() for p in tr.model.parameters()]
    layout = shard_layout(sizes, 2)
    assert [s["shard_params"] for s in e["servers"]] == [n for _, n in layout]
    assert sum(n for _, n in layout) == r.param_count
    shards = [load(tmp_path, "server", rank) for rank in (2, 3)]
    pushed = [load(tmp_path, "pushed", w) for w in (0, 1)]
    total = pushed[0]["sum"] + pushed[1]["sum"]
    for srv, (off, n) in zip(shards, layout, strict=True):
        assert tuple(srv["shard"]) == (off, n)
        assert sorted((row[1], row[2]) for row in srv["log"]) == [
            (w, s) for w in (0, 1) for s in range(pushed[w]["pushes"])]
        assert srv["duplicates"] == 0
        expect = srv["w0"].double() - srv["lr"] * total[off:off + n]
        torch.testing.assert_close(srv["w"].double(), expect, atol=1e-5, rtol=1e-5)
    assert all(s["busy_share"] > 0 and s["bytes_per_s"] > 0 for s in e["servers"])


# ----------------------------------------------------------------------------- hybrid
@pytest.mark.slow
@pytest.mark.parametrize("within", ["model", "data"])
def test_hybrid_equals_one_process_on_the_global_batch(within, tmp_path):
    """Four workers: two groups, each a two-stage pipeline on half the batch; the stage
    replicas average their gradients. Gradients and weights are those of the unsplit
    network trained on the whole batch in one process."""
    import torch

    r = launch(spec_for("hybrid", 4, groups=2, micro_batches=2, steps=3, warmup_steps=1,
                        hybrid_within=within), tmp_path)
    assert r.ok, r.failure
    o = r.spec.options
    places = {rank: o.hybrid_place(rank) for rank in range(4)}
    assert sorted(places.values()) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    tr = reference(16)
    tr.opt.zero_grad()
    tr._loss(tr.model).backward()
    want = {n: p.grad.clone() for n, p in tr.model.named_parameters()}
    for group in (0, 1):
        got = {}
        for rank, (g, _) in places.items():
            if g == group:
                got.update(load(tmp_path, "grads", rank)["grads"])
        assert set(got) == set(want)
        for n, g in want.items():
            torch.testing.assert_close(got[n], g, atol=1e-6, rtol=1e-5)
    tr.opt.step()
    for _ in range(3):
        tr.step()
    ref = dict(tr.model.named_parameters())
    for rank in range(4):
        w = load(tmp_path, "weights", rank)
        assert w["updates"] == 4
        for n, p in w["weights"].items():
            torch.testing.assert_close(p, ref[n].detach(), atol=1e-6, rtol=1e-5)
    e = as_dict(r)
    assert e["groups"] == 2 and {"send", "recv", "allreduce"} <= set(
        e["breakdown"]["comm_by_kind_s"])
    assert e["pipeline"]["ideal_bubble_share"] == pytest.approx(1 / 3)  # 2 stages, 2 micro


# ----------------------------------------------------------------------------- pieces
def test_server_series_splits_a_push_that_carries_several_batches():
    # pushes of 32 samples (k = 4 local batches of 8) against global batches of 16
    log = [[t, 0, t, 0, "timed", 32] for t in (2.0, 4.0)]
    assert server_series({"log": log}, "timed", 16, 0.0) == [1.0, 1.0, 1.0, 1.0]
    # pushes of 8 against 16: every second push ends a mini-batch
    log = [[t, 0, t, 0, "timed", 8] for t in (1.0, 2.0, 3.0, 4.0)]
    assert server_series({"log": log}, "timed", 16, 0.0) == [2.0, 2.0]


def test_shard_layout_balances_whole_tensors():
    assert shard_layout([10, 10, 10, 10], 2) == [(0, 20), (20, 20)]
    assert shard_layout([100, 1, 1, 1], 2) == [(0, 100), (100, 3)]
    assert shard_layout([5, 6], 0) == [(0, 11)] == shard_layout([5, 6], 1)
    with pytest.raises(ValueError):
        shard_layout([5], 2)


def test_drift_and_server_load_from_the_records():
    steps = [{"phase": "timed", "drift": 3.0, "weights_norm": 30.0},
             {"phase": "timed", "drift": None}, {"phase": "timed", "drift": 1.0,
                                                 "weights_norm": 10.0},
             {"phase": "warmup", "drift": 100.0, "weights_norm": 1.0}]
    d = drift_stats([{"steps": steps}], "timed")
    assert d["count"] == 2 and d["mean"] == 2.0 and d["max"] == 3.0
    assert d["mean_relative"] == pytest.approx(0.1)
    srv = {"busy": [[1.0, 1.5, "push", 400], [2.0, 2.5, "pull", 400], [9.0, 9.5, "push", 4]],
           "shard": [0, 100]}
    [load_] = server_loads([(2, srv)], 0.0, 5.0)
    assert load_["busy_share"] == pytest.approx(0.2) and load_["requests"] == 2
    assert load_["bytes_per_s"] == pytest.approx(160.0) and load_["shard_params"] == 100
    assert math.isclose(load_["window_s"], 5.0)


@pytest.mark.parametrize("args, message", [
    (["-s", "sync", "--push-every", "4"], "async strategy only"),
    (["-s", "async", "--push-every", "0"], "at least 1"),
    (["-s", "mixed", "-w", "4", "--servers", "2"], "async strategy only"),
    (["-s", "async", "--servers", "-1"], "0 (beside rank 0) or more"),
    (["-s", "async", "-w", "2", "--servers", "1", "--nnodes", "2"], "one machine only"),
    (["-s", "hybrid", "-w", "4", "--groups", "3"], "does not divide --workers 4"),
    (["-s", "hybrid", "-w", "4", "--groups", "2", "-b", "7"], "over 2 groups"),
    (["-s", "hybrid", "-w", "4", "--groups", "2", "-b", "16", "--micro-batches", "3"],
     "batch size 8 of a group"),
    (["-s", "sync", "--hybrid-within", "data"], "hybrid strategy only"),
])
def test_bad_input_is_one_line_and_status_2(args, message, capsys):
    assert main(["parallel", "-n", "fcn5", "--size", "tiny", "--dry-run", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dlperf: error:") and message in err[0], err


def test_an_oversubscribed_rpc_run_says_its_waits_keep_their_cores():
    """More threads than cores: every strategy's warning says the workers compete; async
    and mixed, whose processes poll while they wait for the server, say that too."""
    for strategy in ("sync", "pipeline", "async", "mixed"):
        text = oversubscribed_warning(strategy, 4, 2)
        assert text.startswith("4 threads on 2 physical cores: the workers compete")
        assert ("TensorPipe polls" in text) == (strategy in ("async", "mixed"))
