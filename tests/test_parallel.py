"""Parallel strategies on torch.distributed, on CPU with gloo over loopback.

Correctness against the single-process network, exactly-once updates of the parameter
server, a straggler under sync and async, training to a target with every strategy (all
ranks stopping together), a two-"node" rendezvous on one machine, failures that end as
records (never a hang), the command, the report; and the framework-free pieces (cost
split, breakdown, culprits). Every launched run uses the tiny FCN-5 and a few steps, or a
small shallow network that reaches its target in a few dozen: the cost is torchrun's
start-up.
"""

from __future__ import annotations

import json
import os
import threading
import uuid

import pytest

from dlperf.cli import main
from dlperf.core import speed_probe
from dlperf.core.spec import Metrics, RunResult
from dlperf.core.store import Store
from dlperf.kinds import ParallelOutcome
from dlperf.kinds.parallel.make import make_spec
from dlperf.kinds.parallel.results import breakdown, server_series, union_length
from dlperf.kinds.parallel.status import Status, culprits
from dlperf.perfmodel.partition import child_costs, layer_cost, owner, split_by_cost
from tests.conftest import FAST

TIMEOUTS = dict(timeout_s=240, stall_timeout_s=90)



def as_dict(r: RunResult) -> dict:
    """The run's typed outcome as plain data (fields that are None left out)."""
    return r.outcome.model_dump(exclude_none=True)

def spec_for(strategy: str, workers: int, **kw):
    kw.setdefault("batch_size", 16)
    kw.setdefault("steps", 3)
    kw.setdefault("warmup_steps", 1)
    kw.setdefault("measurement", FAST)
    return make_spec("fcn5", size="tiny", strategy=strategy, workers=workers, **kw)


def train_spec(strategy: str, workers: int, **kw):
    """Training to a target on real data, sized to take seconds: a shallow ReLU network
    reaches 80% held-out accuracy on digits in a few dozen mini-batches at this lr (the
    budget is a bound, so that a run that stops learning fails rather than runs on)."""
    return make_spec("ffn", size="small", strategy=strategy, workers=workers, batch_size=32,
                     data="digits", target_accuracy=0.8, lr=0.5, max_steps=400,
                     measurement=FAST, **kw)


def launch(spec, tmp_path, env=None, **kw) -> RunResult:
    from dlperf.engine.launch.torchrun import run_parallel

    dump = tmp_path / "dump"
    dump.mkdir(exist_ok=True)
    return run_parallel(spec, env={"DLPERF_PARALLEL_DUMP": str(dump), **(env or {})},
                        **{**TIMEOUTS, **kw})


def load(tmp_path, name: str, rank: int):
    import torch

    return torch.load(tmp_path / "dump" / f"{name}_rank{rank}.pt")


def reference(batch: int):
    """The unsplit network on one process: the same builder, seed and synthetic batch."""
    import torch

    from dlperf import workloads
    from dlperf.backends import torch_backend as tb

    _, _, cfg = workloads.resolve("fcn5", "tiny")
    return tb.build_trainer(cfg, batch, "eager", torch.device("cpu"), seed=0)


def assert_trains_as_one_worker(tmp_path, batch: int = 16) -> None:
    """The dumps of a two-worker run of ``spec_for``: its first step's gradient is the
    global batch's on one process, and after every update both workers hold the weights
    one process training on the global batch holds."""
    import torch

    tr = reference(batch)
    first = load(tmp_path, "grads", 0)
    tr.opt.zero_grad()
    tr._loss(tr.model).backward()
    grads = {n: p.grad.clone() for n, p in tr.model.named_parameters()}
    assert set(first["grads"]) == set(grads)
    for n, g in grads.items():
        torch.testing.assert_close(first["grads"][n], g, atol=1e-6, rtol=1e-5)
    w0, w1 = load(tmp_path, "weights", 0), load(tmp_path, "weights", 1)
    assert w0["updates"] == w1["updates"] == 4  # 1 warm-up + 3 timed
    tr.opt.step()
    for _ in range(w0["updates"] - 1):
        tr.step()
    for n, p in tr.model.named_parameters():
        torch.testing.assert_close(w0["weights"][n], p.detach(), atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(w1["weights"][n], p.detach(), atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------- strategies
@pytest.mark.slow
def test_sync_two_workers_equal_one_worker_on_the_global_batch(tmp_path, db):
    r = launch(spec_for("sync", 2), tmp_path)
    assert r.ok, r.failure
    assert_trains_as_one_worker(tmp_path)
    # what is measured and recorded
    e = as_dict(r)
    assert r.metrics.steps == len(r.step_times_s) == 3
    assert len(e["per_rank"]) == 2 and e["threads_per_worker"] == r.spec.threads
    assert e["total_threads"] == sum(p["threads_in_force"] for p in e["per_rank"])
    assert sum(e["breakdown"]["shares"].values()) == pytest.approx(1.0, abs=1e-6)
    assert e["breakdown"]["allreduce_bytes"] == 4 * r.param_count  # every fp32 gradient
    assert e["breakdown"]["allreduce_inflight_s"] > 0
    # the machine's speed as the steps ran, set against the calibration's by validate
    assert set(r.metrics.speed_probe) == set(speed_probe.PARTS)
    with Store(db) as st:
        st.add(r)
        [stored] = st.results(kind="parallel")
        assert stored.ok and stored.spec.config_id == r.spec.config_id


#: the straggler's delay per step: large against the tiny network's step (a few ms), so that
#: the relations below hold with wide margins on a busy machine
DELAY = 0.05


@pytest.mark.slow
def test_a_straggler_holds_up_every_synchronous_worker(tmp_path):
    r = launch(spec_for("sync", 2, steps=5, straggler_delay_s=DELAY), tmp_path)
    assert r.ok, r.failure
    fast, slow = as_dict(r)["per_rank"]  # rank 1 is the straggler
    assert fast["steps"] == slow["steps"] == 5  # lockstep: the same steps, whatever the pace
    # the straggler's own step less its delay is a step without a straggler, measured in
    # this run (a loaded machine makes it longer: every margin below is a multiple of it,
    # none a fixed number of milliseconds). The fast worker's step exceeds it by the delay
    # (in lockstep the two steps are as long, to within a straggler-free step), most of
    # that spent waiting in the all-reduce for the straggler's gradients; the straggler
    # itself waits less than one straggler-free step
    free = slow["median_step_s"] - DELAY
    assert free > 0, slow
    added = fast["median_step_s"] - free
    assert abs(added - DELAY) < free, (fast, slow)
    assert 0.5 * added < fast["per_step_s"]["wait"] < added + free, (fast, slow)
    assert slow["per_step_s"]["wait"] < free, (fast, slow)
    assert r.metrics.median_s > DELAY  # the time per mini-batch carries the delay


@pytest.mark.slow
def test_async_workers_do_not_wait_for_a_straggler_and_every_push_is_applied_once(tmp_path):
    """Two asynchronous workers, the second slowed by DELAY a step, both running freely in
    a common window of about half a second (the free-running timing, no fixed step count)."""
    import torch

    slow_window = FAST.model_copy(update={"min_time_s": 0.5})
    r = launch(spec_for("async", 2, steps=None, warmup_steps=2, straggler_delay_s=DELAY,
                        measurement=slow_window), tmp_path)
    assert r.ok, r.failure
    fast, slow = as_dict(r)["per_rank"]
    # nobody waits: in the same window the fast worker pushes several times as often; its
    # step is shorter than a straggler-free step measured in this run, the straggler's own
    # step less its delay (a worker waiting for the straggler would carry the delay on
    # top of that; the straggler reaches the server by RPC, rank 0 calls it in-process,
    # so its steps are shorter still), and its waits for the server's lock are a small
    # share of its own time. Ratios of times measured side by side, which a loaded
    # machine lengthens together, never a fixed number of milliseconds
    assert slow["steps"] >= 1 and fast["steps"] >= 2 * slow["steps"], (fast, slow)
    assert slow["median_step_s"] > DELAY
    free = slow["median_step_s"] - DELAY
    assert fast["median_step_s"] < free, (fast, slow)
    assert fast["wait_share"] < 0.1, fast
    # the straggler's gradients were computed while the fast worker kept pushing: they
    # missed updates (its pull happened at least DELAY before its push)
    server = load(tmp_path, "server", 0)
    late = [row[3] for row in server["log"] if row[1] == 1 and row[4] == "timed"]
    assert late and max(late) >= 1, late
    assert as_dict(r)["staleness"]["max"] >= 1
    assert sum(as_dict(r)["staleness"]["histogram"].values()) == as_dict(r)["staleness"]["count"]
    # exactly once, with the two workers' pushes interleaved and of different counts
    pushed = [load(tmp_path, "pushed", k) for k in (0, 1)]
    applied = sorted((row[1], row[2]) for row in server["log"])
    assert applied == [(w, s) for w in (0, 1) for s in range(pushed[w]["pushes"])]
    assert server["duplicates"] == 0
    assert sum(p["pushes"] for p in pushed) == len(applied) == as_dict(r)["ps"]["applied"]
    # plain SGD: whatever the order, the weights end at w0 - lr * (sum of all pushes)
    expect = server["w0"].double() - server["lr"] * (pushed[0]["sum"] + pushed[1]["sum"])
    torch.testing.assert_close(server["w"].double(), expect, atol=1e-5, rtol=1e-5)
    # the remote worker's time went to pulls and pushes over RPC
    assert {"push", "pull"} <= set(slow["comm_by_kind_s"])


@pytest.mark.slow
def test_mixed_groups_all_reduce_inside_push_between_and_stop_together(tmp_path):
    """Four workers in two groups trained to a target. Rank 0 evaluates the server's weights
    while its group-mate and the other group train on; every rank of a group must leave
    after the same step (one that left early would strand its group-mates in their next
    all-reduce until the stall timeout), and the run records the target reached."""
    import torch

    r = launch(train_spec("mixed", 4, groups=2), tmp_path, stall_timeout_s=20)
    assert r.ok, r.failure
    e = as_dict(r)
    assert e["groups"] == 2
    tr = e["training"]
    assert tr["reached"] and tr["final"]["accuracy"] >= 0.8 and tr["time_to_target_s"] > 0
    steps = [p["steps"] for p in e["per_rank"]]
    assert steps[0] == steps[1] and steps[2] == steps[3], steps
    server = load(tmp_path, "server", 0)
    pushed = [load(tmp_path, "pushed", k) for k in (0, 2)]
    # one push per group step, from the leaders (ranks 0 and 2), each exactly once
    assert [p["pushes"] for p in pushed] == [steps[0], steps[2]]
    assert sorted((row[1], row[2]) for row in server["log"]) == [
        (w, s) for w, p in zip((0, 2), pushed, strict=True) for s in range(p["pushes"])]
    expect = server["w0"].double() - server["lr"] * (pushed[0]["sum"] + pushed[1]["sum"])
    torch.testing.assert_close(server["w"].double(), expect, atol=1e-5, rtol=1e-5)
    assert {"allreduce", "bcast", "push", "pull"} <= set(e["breakdown"]["comm_by_kind_s"])
    assert [p["role"] for p in e["per_rank"]] == ["server+leader", "worker", "leader", "worker"]
    assert e["staleness"]["count"] == steps[0] + steps[2]


@pytest.mark.slow
@pytest.mark.parametrize("strategy, kw", [("sync", {}), ("pipeline", {"micro_batches": 2})])
def test_trains_to_the_target_and_stops_there(strategy, kw, tmp_path):
    """(async: the command test below; mixed: the test above)"""
    r = launch(train_spec(strategy, 2, **kw), tmp_path, stall_timeout_s=20)
    assert r.ok, r.failure
    tr = as_dict(r)["training"]
    assert tr["reached"] and tr["final"]["accuracy"] >= 0.8
    # it stopped at the first evaluation that reached the target, well inside the budget
    assert 0 < tr["time_to_target_s"] == tr["curve"][-1]["train_s"]
    assert all(c["accuracy"] < 0.8 for c in tr["curve"][:-1])
    assert tr["steps_to_target"] < 400
    assert len({p["steps"] for p in as_dict(r)["per_rank"]}) == 1  # lockstep: every step


@pytest.mark.slow
def test_pipeline_over_two_nodes_gives_the_unsplit_loss_and_gradients(tmp_path):
    """Two torchrun launches on this machine share one rendezvous on 127.0.0.1, as two
    machines would; the network is split over them (one stage each)."""
    import torch

    from dlperf.engine.launch.torchrun import free_port, run_parallel

    spec = spec_for("pipeline", 2, nodes=2, micro_batches=4, steps=1, warmup_steps=0)
    endpoint, rid = f"127.0.0.1:{free_port()}", f"two-nodes-{uuid.uuid4().hex[:8]}"
    (tmp_path / "dump").mkdir()
    results: list = [None, None]

    def node(k: int) -> None:
        results[k] = run_parallel(spec, rdzv_endpoint=endpoint, rdzv_id=rid,
                                  local_addr="127.0.0.1",
                                  env={"DLPERF_PARALLEL_DUMP": str(tmp_path / "dump")},
                                  **TIMEOUTS)

    threads = [threading.Thread(target=node, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = [r for r in results if r is not None]
    assert len(got) == 1, results  # the node that held rank 0 returns the result
    r = got[0]
    assert r.ok, r.failure
    assert sorted(p["node"] for p in as_dict(r)["per_rank"]) == [0, 1]
    assert as_dict(r)["launcher"]["nnodes"] == 2 and as_dict(r)["nodes"] == 2
    # the split: every top-level module once, in order, one stage per worker
    stages = as_dict(r)["pipeline"]["stages"]
    tr = reference(16)
    names = [n for n, _ in tr.model.named_children()]
    assert [layer for s in stages for layer in s["layers"]] == names
    assert as_dict(r)["pipeline"]["ideal_bubble_share"] == pytest.approx(1 / 5)
    assert {"send", "recv"} <= set(as_dict(r)["breakdown"]["comm_by_kind_s"])
    # four micro-batches through two stages: the loss and gradients of the whole batch
    g0, g1 = load(tmp_path, "grads", 0), load(tmp_path, "grads", 1)
    assert set(g0["grads"]).isdisjoint(g1["grads"])
    tr.opt.zero_grad()
    loss = tr._loss(tr.model)
    loss.backward()
    assert g1["loss"] == pytest.approx(float(loss.detach()), rel=1e-5)
    got_grads = {**g0["grads"], **g1["grads"]}
    assert set(got_grads) == {n for n, _ in tr.model.named_parameters()}
    for n, p in tr.model.named_parameters():
        torch.testing.assert_close(got_grads[n], p.grad, atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------- failures
@pytest.mark.slow
def test_killed_worker_is_recorded_with_the_steps_before_it(tmp_path, db):
    # (the pipeline: the cheapest strategy to start, as it needs neither DDP nor RPC)
    r = launch(spec_for("pipeline", 2, steps=6), tmp_path,
               env={"DLPERF_PARALLEL_FAULT": "1:kill:3"})
    assert not r.ok and r.failure.reason == "crash", r.failure
    assert r.failure.message.startswith("rank 1: killed by signal SIGKILL")
    assert len(r.step_times_s) == 3  # the timed steps done before the kill are kept
    assert as_dict(r)["partial"]["steps_logged"]["0"] == 4  # and the warm-up step
    with Store(db) as st:
        st.add(r)
        [stored] = st.results(kind="parallel")
        assert stored.failure.reason == "crash" and len(stored.step_times_s) == 3


@pytest.mark.slow
def test_a_rank_over_the_memory_limit_between_the_watchs_reads_is_out_of_memory(
        tmp_path, monkeypatch):
    """The watch limits the workers' resident sum and may read it too late for a brief
    peak; a rank whose own peak passed the limit is stored as out of memory all the same,
    its steps kept (a watch that misses every peak stands in for one that reads late)."""
    from dlperf.engine.launch import torchrun

    seen = launch(spec_for("pipeline", 2), tmp_path)
    assert seen.ok, seen.failure
    peak = seen.metrics.peak_rss_bytes
    blind = torchrun.watch
    monkeypatch.setattr(torchrun, "watch", lambda popen, memory_limit_bytes, **kw: blind(
        popen, memory_limit_bytes=None, **kw))
    r = launch(spec_for("pipeline", 2), tmp_path, memory_limit_bytes=peak // 2)
    assert not r.ok and r.failure.reason == "oom", r.failure
    assert "memory-limit" in r.failure.message and len(r.step_times_s) == 3
    assert launch(spec_for("pipeline", 2), tmp_path, memory_limit_bytes=4 * peak).ok


@pytest.mark.slow
def test_hung_worker_is_named_and_the_run_ends(tmp_path):
    r = launch(spec_for("pipeline", 2, steps=6), tmp_path,
               env={"DLPERF_PARALLEL_FAULT": "1:hang:2"}, stall_timeout_s=5)
    assert not r.ok and r.failure.reason == "timeout", r.failure
    assert "no progress for 5 s" in r.failure.message
    assert "rank 1: stuck in compute, timed step 2" in r.failure.message
    assert "rank 0 waiting" in r.failure.message
    assert len(r.step_times_s) == 2
    # each worker's stacks at the kill: rank 1 in the injected hang, rank 0 in a transfer
    assert "_inject_fault" in r.diagnostics.stacks["1"]
    assert "pipeline.py" in r.diagnostics.stacks["0"]


@pytest.mark.slow
def test_missing_node_ends_at_the_rendezvous_timeout():
    from dlperf.engine.launch.torchrun import free_port, run_parallel

    r = run_parallel(spec_for("pipeline", 2, nodes=2), rdzv_endpoint=f"127.0.0.1:{free_port()}",
                     local_addr="127.0.0.1", rdzv_timeout_s=3, **TIMEOUTS)
    assert not r.ok and r.failure.reason == "timeout"
    assert "rendezvous" in r.failure.message


# ----------------------------------------------------------------------------- command
@pytest.mark.slow
def test_command_trains_to_a_target_resumes_and_reports(tmp_path, db, capsys):
    args = ["parallel", "-n", "fcn5", "--size", "tiny", "-s", "async", "-w", "2", "-b", "32",
            "--data", "digits", "--target-accuracy", "0.3", "--lr", "2", "--max-steps", "3000",
            "--db", str(db)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "Time to target on real data" in " ".join(out.split())  # rich wraps lines
    with Store(db) as st:
        [r] = st.results(kind="parallel")
    assert r.ok, r.failure
    tr = as_dict(r)["training"]
    assert tr["reached"] and tr["final"]["accuracy"] >= 0.3
    assert 0 < tr["time_to_target_s"] == tr["curve"][-1]["train_s"]
    assert all(c["accuracy"] < 0.3 for c in tr["curve"][:-1])  # it stopped at the target
    assert as_dict(r)["staleness"]["count"] == as_dict(r)["ps"]["applied"]
    # two workers with one thread each on this machine's cores (unless it has one core)
    assert as_dict(r)["total_threads"] == 2 * r.spec.threads
    # through the runner like any run: a share of the peak at the run's total threads
    pk = r.outcome.peak
    assert pk is not None and 0 < r.metrics.peak_share <= 1
    assert pk.threads == min(2 * r.spec.threads, len(os.sched_getaffinity(0)))
    assert main(args) == 0  # resumed: nothing left to run
    assert "0 to measure" in " ".join(capsys.readouterr().out.split())
    assert main([*args, "--json"]) == 0  # stdout is the document; the plan's line on stderr
    captured = capsys.readouterr()
    (row,) = json.loads(captured.out)
    assert RunResult.model_validate(row).spec.run_id == r.spec.run_id
    assert "0 to measure" in " ".join(captured.err.split())
    rep = tmp_path / "rep"
    assert main(["report", "--db", str(db), "--out", str(rep)]) == 0
    md = (rep / "parallel.md").read_text()
    assert "Time to target" in md and "async" in md and "yes" in md
    assert (rep / "parallel_time_to_target.png").stat().st_size > 0


@pytest.mark.parametrize("args, message", [
    (["-s", "ring"], "unknown strategy 'ring'"),
    (["-s", "mixed", "-w", "4", "--groups", "3"], "--groups 3 does not divide --workers 4"),
    (["-s", "mixed", "-w", "3"], "give --groups"),
    (["-s", "sync", "--groups", "2"], "mixed and hybrid strategies only"),
    (["-s", "pipeline", "-b", "10", "--micro-batches", "4"], "does not divide the batch"),
    (["-s", "sync", "-w", "3", "-b", "16"], "does not split evenly"),
    (["-s", "sync", "-w", "0"], "at least 1"),
    (["-s", "sync", "-w", "two"], "not a comma-separated list"),
    (["-s", "sync", "--target-accuracy", "0.9"], "needs real data"),
    (["-s", "sync", "--data", "imagenet"], "unknown data set"),
    (["-s", "sync", "--straggler-delay", "-1"], "non-negative"),
    (["-s", "sync", "--nnodes", "3", "-w", "4"], "spread evenly"),
])
def test_bad_input_is_one_line_and_status_2(args, message, capsys):
    assert main(["parallel", "-n", "fcn5", "--size", "tiny", "--dry-run", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dlperf: error:") and message in err[0], err


# ----------------------------------------------------------------------------- pieces
def test_split_by_cost_minimises_the_slowest_stage():
    assert split_by_cost([1, 1, 1, 1], 2) == [[0, 1], [2, 3]]
    assert split_by_cost([10, 1, 1, 1, 1], 2) == [[0], [1, 2, 3, 4]]
    assert split_by_cost([1, 2, 3, 4, 5, 6], 3) == [[0, 1, 2], [3, 4], [5]]
    assert split_by_cost([5], 1) == [[0]]
    with pytest.raises(ValueError):
        split_by_cost([1, 2], 3)


def test_neutral_layer_costs_map_onto_the_torch_modules():
    import torch

    from dlperf import workloads
    from dlperf.backends import torch_backend as tb

    for name in ("fcn5", "alexnet", "resnet50"):
        _, _, cfg = workloads.resolve(name, "tiny")
        with torch.device("meta"):
            model = tb.build_model(cfg)
        children = [n for n, _ in model.named_children()]
        costs = child_costs(children, cfg.layers())
        assert costs is not None, name
        total = sum(layer_cost(x) for x in cfg.layers() if x.op != "loss")
        assert sum(costs) == pytest.approx(total)
        # every module with weights carries its matrix products
        for n, c in zip(children, costs, strict=True):
            if any(True for _ in getattr(model, n).parameters()):
                assert c > 0, (name, n)


@pytest.mark.parametrize("name", ["fcn5", "alexnet", "resnet50"])
def test_the_model_cuts_the_pipeline_where_dlperf_parallel_cuts_it(name):
    # the runtime splits the torch nn.Sequential's top-level modules; the model splits the
    # neutral layers between their units (a residual block is one): the same stages
    import torch

    from dlperf import workloads
    from dlperf.backends import torch_backend as tb
    from dlperf.perfmodel.partition import split_layers

    _, _, cfg = workloads.resolve(name, "full")
    with torch.device("meta"):
        model = tb.build_model(cfg)
    children = [n for n, _ in model.named_children()]
    body = [x for x in cfg.layers() if x.op != "loss"]
    for stages in (2, 3, 4):
        runtime = split_by_cost(child_costs(children, body), stages)
        modules = [[children[j] for j in part] for part in runtime]
        model_parts = split_layers(body, stages)
        owners = [sorted({owner(body[i].name, children) for i in part}, key=children.index)
                  for part in model_parts]
        # a module without a neutral layer of its own (flatten) joins whichever stage
        assert [[m for m in part if m in sum(owners, [])] for part in modules] == owners


def test_a_residual_blocks_layers_are_one_unit_of_the_pipeline():
    from dlperf import workloads
    from dlperf.perfmodel.partition import units

    layers = workloads.get("resnet50").layers()
    groups = [[layers[i].name for i in g] for g in units(layers)]
    assert groups[:4] == [["stem"], ["stem_bn"], ["stem_relu"], ["stem_pool"]]
    assert groups[4][0] == "s1b1_c1" and groups[4][-1] == "s1b1_relu3"
    assert "s1b1_proj" in groups[4] and groups[5][0] == "s1b2_c1"
    assert len(groups) == 4 + 16 + 3  # the stem's four, 16 blocks, avgpool, fc, loss
    gpt = workloads.get("gpt2").layers("tiny")
    assert [gpt[i].name for i in units(gpt)[0]] == ["wte", "wpe", "embed_add"]


def test_breakdown_splits_blocked_time_into_waiting_and_transfer():
    def step(t0, t1, ev=(), ddp=None):
        return {"phase": "timed", "i": 0, "t0": t0, "t1": t1, "ev": list(ev), "ddp": ddp}

    reports = [
        # rank 0 reaches the message at 1.0, rank 1 only at 1.3; both finish at 1.5
        {"rank": 0, "steps": [step(0.0, 2.0, [["recv", "k", 1.0, 1.5, None, None]],
                                   {"key": "d", "bw": [0.0, 1.9], "b": [[0, 1.6, 1.9, 40]]})]},
        {"rank": 1, "steps": [step(0.0, 2.0, [["send", "k", 1.3, 1.5, None, None]],
                                   {"key": "d", "bw": [0.0, 1.9], "b": [[0, 1.8, 1.9, 40]]})]},
    ]
    bd = breakdown(reports, ("timed",))
    r0, r1 = bd[0][0], bd[1][0]
    # message: rank 0 waited 0.3, both transferred 0.2
    # all-reduce: rank 0's backward ended at 1.6, rank 1's at 1.8: rank 0 waited 0.2 of its
    # 0.3 blocked, both transferred the last 0.1
    assert r0["wait"] == pytest.approx(0.3 + 0.2)
    assert r0["comm"] == pytest.approx(0.2 + 0.1)
    assert r1["wait"] == pytest.approx(0.0)
    assert r1["comm"] == pytest.approx(0.2 + 0.1)
    assert r0["compute"] == pytest.approx(2.0 - 0.5 - 0.3)
    assert r0["inflight"] == pytest.approx(0.1)  # from the last launch to completion
    assert r0["bytes"] == 40


def test_server_series_counts_one_global_batch_per_pushes():
    log = [[t, t % 2, t, 0, "timed", 8] for t in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)]
    log.append([9.0, 0, 9, 0, "warmup", 8])
    assert server_series({"log": log}, "timed", 16, 0.0) == [2.0, 2.0, 2.0]
    assert union_length([(0, 1), (0.5, 2), (3, 4)]) == pytest.approx(3.0)


def test_culprit_is_the_rank_still_computing():
    now = 100.0
    st = {0: Status(0, "communication", 70.0, "all-reduce, timed step 4"),
          1: Status(1, "compute", 71.0, "compute, timed step 4")}
    assert culprits(st, [0, 1], now) == (
        "rank 1: stuck in compute, timed step 4 for 29 s (rank 0 waiting for it)")
    assert culprits({0: st[0]}, [0, 1], now) == "rank 1: never started"


def _result(strategy: str, workers: int, median: float, threads: int, delay: float = 0.0):
    spec = make_spec("fcn5", size="tiny", strategy=strategy, workers=workers, batch_size=16,
                     threads=threads, straggler_delay_s=delay)
    m = Metrics(steps=3, median_s=median, mean_s=median, std_s=0.0, min_s=median,
                max_s=median, mad_s=0.0, iqr_s=0.0, cv=0.0, samples_per_s=16 / median)
    shares = {"compute": 0.5, "comm": 0.3, "wait": 0.2, "server": 0.0}
    return RunResult(spec=spec, status="ok", metrics=m, outcome=ParallelOutcome(
        strategy=strategy, workers=workers, breakdown={"shares": shares},
        total_threads=workers * threads, physical_cores=2))


def test_report_tables_compare_against_one_worker_and_without_a_straggler(db, tmp_path):
    from dlperf.kinds.parallel import section as report

    results = [_result("sync", 1, 0.10, 2), _result("sync", 2, 0.08, 1),
               _result("sync", 2, 0.13, 1, delay=0.05), _result("async", 2, 0.05, 1),
               _result("pipeline", 1, 0.02, 2), _result("pipeline", 2, 0.05, 1)]
    rows = report.rows_from(results)
    t = report.comparison_table(rows)
    by = {(r[1], r[2], r[-1] != ""): r for r in t.rows}
    # no one-thread single worker stored: against one worker with both cores
    assert by[("sync", "2", False)][7] == "1.25x"  # 0.10 / 0.08
    assert by[("sync", "2", False)][8] == "62.5%"
    assert by[("sync", "2", False)][9] == "1x2"
    assert by[("pipeline", "2", False)][7] == "0.40x"  # slower: 0.02 / 0.05
    assert by[("async", "2", False)][7] == "-"  # no one-worker async run to compare with
    assert by[("sync", "2", False)][5] == "2x1 = 2 / 2 cores"
    # once a one-worker run with one thread is stored, it is the processing unit compared
    rows = report.rows_from([*results, _result("sync", 1, 0.12, 1)])
    sync2 = next(r for r in rows if report.opts(r).workers == 2 and not
                 report.opts(r).straggler_delay_s and report.opts(r).strategy == "sync")
    assert report.speedup(sync2, rows) == pytest.approx((0.12 / 0.08, 0.12 / 0.08 / 2))
    s = report.straggler_table(rows)
    [line] = s.rows
    assert line[7] == "1.62x" and line[8] == "100.0%"  # (0.13 - 0.08) / 0.05
    with Store(db) as st:
        for r in [*results, _result("sync", 1, 0.12, 1)]:
            st.add(r)
        sec = report.parallel_section(st, tmp_path, report.Filters())
    assert [x.title for x in sec.tables] == ["Parallel strategies: time per mini-batch",
                                             "Straggler: one slow worker"]
    assert {p.name for p in sec.images} == {"parallel_scaling.png", "parallel_comm_share.png",
                                            "parallel_straggler.png"}


TORCHRUN_SUMMARY = """
Failures:
[1]:
  time      : 2026-01-01_00:00:00
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 11)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-01-01_00:00:00
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 12)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 12
"""


def test_diagnosis_blames_the_killed_rank_not_its_victims(tmp_path):
    import json

    from dlperf.engine.launch.torchrun import diagnose

    (tmp_path / "error_rank0.json").write_text(json.dumps(
        {"rank": 0, "time": 1.0, "reason": "error", "message": "RuntimeError: Connection closed"}))
    partial = {0: {"steps": [{"phase": "timed", "i": 4}]}, 1: {"steps": [{"phase": "timed", "i": 3}]}}
    reason, msg = diagnose(tmp_path, TORCHRUN_SUMMARY, 1, [0, 1], partial)
    assert reason == "crash"
    assert msg == ("rank 1: killed by signal SIGKILL after timed step 3; "
                   "then rank 0: RuntimeError: Connection closed")
    # no signal: the first exception, with its reason
    (tmp_path / "error_rank1.json").write_text(json.dumps(
        {"rank": 1, "time": 0.5, "reason": "unsupported", "message": "UnsupportedError: no"}))
    reason, msg = diagnose(tmp_path, TORCHRUN_SUMMARY.replace("-9 (pid", "1 (pid"), 1, [0, 1],
                           partial)
    assert (reason, msg) == ("unsupported", "rank 1: UnsupportedError: no (after timed step 3)")
    assert diagnose(tmp_path, "...RendezvousTimeoutError...", 1, [0, 1], {})[0] == "timeout"
