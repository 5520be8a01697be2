"""Data flow through the worker, the runner and the store (tiny networks, tiny data sets):
the stall per step, a slow loader, the loader alone, cold reads, a crashing loader
worker, and the command line end to end."""

from __future__ import annotations

import pytest

from dlperf.cli import main
from dlperf.core.spec import RunSpec
from dlperf.core.store import Store
from dlperf.engine.runner import Runner
from dlperf.engine.worker import execute
from dlperf.kinds.dataflow import plan as dplan
from dlperf.kinds.dataflow.analysis import dataflow_of
from dlperf.kinds.dataflow.options import DataflowOutcome
from tests.conftest import FAST

pytestmark = pytest.mark.slow


def spec(network="fcn5", kind="step", batch=4, **opts) -> RunSpec:
    o, _ = dplan.resolve({"input": "disk", "samples": 32, **opts}, network, "tiny", None, batch)
    return RunSpec(kind=kind, network=network, size="tiny", batch_size=batch, measurement=FAST,
                   options=o.to_options())


def outcome(r) -> DataflowOutcome:
    assert r.ok, r.failure
    o = dataflow_of(r)
    assert o is not None
    return o


@pytest.mark.parametrize("network, fmt", [("fcn5", "raw"), ("alexnet", "jpeg"),
                                          ("resnet50", "png"), ("lstm32", "raw")])
def test_every_step_is_split_into_its_stall_and_its_compute(network, fmt):
    r = execute(spec(network, data_format=fmt))
    o = outcome(r)
    assert len(o.stall_s) == len(r.step_times_s) == r.metrics.steps
    assert all(0 <= w <= t for w, t in zip(o.stall_s, r.step_times_s, strict=True))
    assert o.stall_share == pytest.approx(sum(o.stall_s) / sum(r.step_times_s))
    assert o.prep.read_s > 0 and o.prep.collate_s > 0
    assert (o.prep.decode_s > o.prep.read_s / 100) if fmt != "raw" else True
    assert o.data_set.endswith(f"-{fmt}-v1") and o.data_set_bytes > 0
    assert r.metrics.flops_per_step > 0 and r.param_count > 0
    assert r.metrics.minor_faults_per_step >= 0 and r.metrics.system_s_per_step >= 0


def test_a_slow_loader_stalls_every_step_by_its_delay():
    # 0 workers, no prefetch: each step waits for 4 samples of 10 ms each
    o = outcome(execute(spec(sample_delay_s=0.01)))
    assert min(o.stall_s) >= 4 * 0.01
    assert o.stall_share > 0.5
    assert o.prep.augment_s >= 4 * 0.01  # the delay is counted as the loader's work


def test_memory_input_reads_nothing_from_storage():
    o = outcome(execute(spec("alexnet", input="memory")))
    assert o.data_set == "" and o.data_set_bytes == 32 * (32 * 32 * 3 + 8)
    assert o.prep.decode_s == 0


def test_prefetch_in_force_follows_the_framework():
    # PyTorch's DataLoader keeps at least one batch per worker in flight; with 0 workers
    # dlperf's prefetch thread holds the depth asked for
    assert outcome(execute(spec(loader_workers=1))).prefetch_in_force == 1
    assert outcome(execute(spec(loader_workers=1, prefetch=3))).prefetch_in_force == 3
    assert outcome(execute(spec(prefetch=2))).prefetch_in_force == 2
    assert outcome(execute(spec())).prefetch_in_force == 0


def test_the_loader_alone_trains_nothing_and_reports_its_throughput():
    r = execute(spec("alexnet", kind="loader", loader_workers=2))
    o = outcome(r)
    assert r.param_count is None and r.metrics.flops_per_step is None
    assert o.batches_per_step == 2  # a round: one batch from each worker
    rate = 4 * 2 * len(r.step_times_s) / sum(r.step_times_s)
    assert o.loader_samples_per_s == pytest.approx(rate) == r.metrics.samples_per_s
    assert o.compute_median_s is None


def test_cold_cache_evicts_the_data_sets_files_before_the_run(monkeypatch):
    from dlperf.inputs import cache

    seen = []
    real = cache.evict

    def spy(paths):
        paths = list(paths)
        seen.append(paths)
        return real(paths)

    monkeypatch.setattr(cache, "evict", spy)
    o = outcome(execute(spec("alexnet", cache="cold")))
    assert seen and len(seen[0]) == 32 and all(p.suffix == ".jpg" for p in seen[0])
    assert "posix_fadvise DONTNEED on 32 files" in o.eviction
    # warm: nothing evicted
    seen.clear()
    assert outcome(execute(spec("alexnet"))).eviction == "" and not seen


def test_a_crashing_loader_worker_is_a_stored_failure_and_the_sweep_goes_on(db, monkeypatch):
    monkeypatch.setenv("DLPERF_LOADER_FAULT", "segfault")  # only loader processes die
    specs = [spec(loader_workers=1), spec(loader_workers=0)]
    with Store(db) as store:
        results = Runner(store, timeout_s=120, peak_size=256).run_all(specs)
        stored = store.results(kind="step")
    assert [r.ok for r in results] == [False, True]
    bad = results[0]
    assert bad.failure.reason == "error" and "DataLoader worker" in bad.failure.message
    assert {r.spec.run_id for r in stored} == {s.run_id for s in specs}


def test_run_sweep_and_report_end_to_end(capsys, tmp_path):
    # one store: the machine's peak is measured once for both commands
    db = tmp_path / "r.db"
    code = main(["run", "--network", "alexnet", "--size", "tiny", "--batch-size", "4",
                 "--input", "disk", "--samples", "32", "--loader-workers", "1",
                 "--prefetch", "2", "--min-time", "0.05", "--min-steps", "3",
                 "--data-dir", str(tmp_path / "data"), "--db", str(db)])
    text = capsys.readouterr().out
    assert code == 0, text
    for line in ("disk:jpeg w1 p2", "waiting for data", "training step", "loader work",
                 "loader alone"):
        assert line in text
    assert any((tmp_path / "data").iterdir())
    with Store(db) as store:
        assert len(store.results(kind="loader")) == 1
        step = store.results(kind="step", network="alexnet")
    assert len(step) == 1 and dataflow_of(step[0]).kind == "step"

    args = ["dataflow", "sweep", "--network", "fcn5", "--size", "tiny", "--batch-size", "4",
            "--samples", "32", "--loader-workers", "0,1", "--prefetch", "0,2", "--min-time",
            "0.05", "--min-steps", "3", "--db", str(db), "--out", str(tmp_path / "out")]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "synthetic" in text and "stall share" in text and "loader worker" in text
    assert (tmp_path / "out" / "dataflow_1.png").exists()
    assert main(args) == 0  # resumed: nothing left to measure
    assert "0 to measure" in capsys.readouterr().out
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "rep")]) == 0
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "Data flow: fcn5" in html and "Data flow: alexnet" in html
    assert (tmp_path / "rep" / "dataflow.md").exists()
    # runs on an input pipeline stay out of the DLBench table (synthetic data only)
    assert "disk" not in (tmp_path / "rep" / "dlbench.md").read_text()


def test_with_loader_plans_one_loader_run_per_pipeline():
    s = spec()
    out = dplan.with_loader([s, s.model_copy(update={"repeat": 1})])
    assert [x.kind for x in out] == ["step", "step", "loader", "loader"]


@pytest.mark.parametrize("framework, module", [("tensorflow", "tensorflow"), ("jax", "grain")])
def test_tf_data_and_grain_pipelines_feed_their_frameworks(framework, module):
    # tf.data for TensorFlow, Grain for JAX: each in a worker of its own
    pytest.importorskip(module)
    from dlperf.engine.launch import run_isolated

    def on(s: RunSpec) -> RunSpec:  # the same run on this framework, its default variant
        return RunSpec.model_validate({**s.model_dump(), "framework": framework,
                                       "variant": "default"})

    step, raw = on(spec("alexnet", loader_workers=1, prefetch=1)), on(spec("fcn5", kind="loader"))
    r, ld = run_isolated(step, timeout_s=300), run_isolated(raw, timeout_s=300)
    o = outcome(r)
    assert len(o.stall_s) == len(r.step_times_s) and 0 <= o.stall_share <= 1
    assert r.metrics.flops_per_step > 0 and o.compute_median_s > 0
    assert outcome(ld).loader_samples_per_s > 0 and ld.param_count is None
    if framework == "jax":  # Grain's data source times the samples itself
        assert o.prep.decode_s > 0 and o.prefetch_in_force == 1
    else:  # inside TensorFlow's runtime: no per-stage times
        assert o.prep is None and o.prefetch_in_force == 1


def test_memory_search_records_each_out_of_memory_as_a_failure(capsys, tmp_path):
    # 64 MiB is below any framework's own footprint: batch 1 already runs out of memory
    db = tmp_path / "m.db"
    args = ["dataflow", "memory", "--network", "fcn5", "--size", "tiny", "--memory-limit",
            "64MiB", "--db", str(db)]
    assert main(args) == 1
    assert "no mini-batch fits" in capsys.readouterr().out
    with Store(db) as store:
        failed = store.results(kind="step")
    assert [(r.failure.reason, r.spec.batch_size) for r in failed] == [("oom", 1)]
    assert "limit 64 MiB" in failed[0].spec.label()  # the limit is part of the identity
    assert main(args) == 1  # the stored failure is reused, not measured again
    with Store(db) as store:
        assert len(store.results(kind="step", latest=False)) == 1
