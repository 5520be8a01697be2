"""Data flow: input settings and identity, generated data sets, cold-cache eviction, the
stall measured per step through the worker, the loader alone, a crashing loader worker,
storage bandwidth, the memory search, the report's what-if lines, and bad input."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from dlperf.cli import main
from dlperf.core.errors import UsageError
from dlperf.core.spec import RunSpec
from dlperf.inputs import cache, datasets
from dlperf.inputs.options import InputOptions
from dlperf.inputs.pipeline import Source
from dlperf.kinds import LoaderOptions, StepOptions, StepOutcome
from dlperf.kinds.dataflow import plan as dplan
from dlperf.kinds.dataflow import storage
from dlperf.kinds.dataflow.analysis import dataflow_of
from dlperf.kinds.dataflow.memory import search
from dlperf.kinds.dataflow.options import DataflowOutcome
from dlperf.kinds.dataflow.plan import input_of
from dlperf.kinds.dataflow.storage_run import resolve_tool

DATA = Path(__file__).parent / "data"


def disk(**kw) -> InputOptions:
    return InputOptions(input="disk", samples=kw.pop("samples", 32), **kw)


# ----------------------------------------------------------------------------- identity
def test_synthetic_leaves_options_empty_and_keeps_every_existing_id():
    plain = RunSpec(network="alexnet", batch_size=16)
    assert InputOptions().to_options() == {}
    assert dplan.with_options([plain], InputOptions())[0].config_id == plain.config_id
    assert plain.label() == "alexnet torch/eager cpu x1 b16"


def test_input_settings_are_part_of_the_identity_and_the_label():
    base = RunSpec(network="alexnet", batch_size=16)
    specs = [dplan.with_options([base], o)[0] for o in (
        disk(), disk(loader_workers=2), disk(loader_workers=2, prefetch=2),
        disk(data_format="raw"), disk(cache="cold"), InputOptions(input="memory"))]
    assert len({s.config_id for s in specs} | {base.config_id}) == len(specs) + 1
    assert specs[2].label() == "alexnet torch/eager cpu x1 b16 disk:jpeg w2 p2 n32"
    loader = dplan.loader_spec(specs[2])
    assert loader.kind == "loader" and loader.config_id != specs[2].config_id
    assert "loader disk:jpeg w2 p2" in loader.label()


def test_the_input_settings_are_the_step_kinds_options():
    s = RunSpec(network="alexnet", batch_size=16, options={"input": "disk", "prefetch": 2})
    assert isinstance(s.options, StepOptions) and input_of(s).prefetch == 2
    assert RunSpec(network="alexnet", batch_size=16).options == StepOptions()
    ld = RunSpec(kind="loader", network="alexnet", options={"input": "memory"})
    assert isinstance(ld.options, LoaderOptions) and input_of(ld).input == "memory"
    assert input_of(RunSpec(kind="peak", network="matmul")).synthetic  # a kind without input
    with pytest.raises(ValueError, match="extra"):
        RunSpec(network="alexnet", options={"input": "disk", "arm": "a"})


@pytest.mark.parametrize("values, message", [
    ({"loader_workers": 2}, "need an input pipeline"),
    ({"input": "memory", "cache": "cold"}, "cache cold applies to input disk"),
    ({"input": "disk", "loader_workers": -1}, "greater than or equal to 0"),
])
def test_contradictory_settings_are_refused(values, message):
    with pytest.raises(ValueError, match=message):
        InputOptions.model_validate(values)


def test_a_format_that_holds_images_is_refused_for_a_network_without_images():
    with pytest.raises(UsageError, match="use --data-format raw"):
        dplan.resolve({"input": "disk", "data_format": "jpeg"}, "fcn5", "tiny", None, 8)
    opts, _ = dplan.resolve({"input": "disk"}, "fcn5", "tiny", None, 8)
    assert opts.data_format == "raw"


def test_a_data_set_larger_than_the_memory_limit_is_streamed_from_disk():
    opts, notes = dplan.resolve({"input": "memory", "samples": 64}, "alexnet", "tiny", None, 8,
                                memory_limit=64 * 32 * 32 * 3 // 2)
    assert (opts.input, opts.data_format) == ("disk", "raw")
    assert "streamed from disk" in notes[0]


def test_the_sweep_plans_the_floor_the_grid_and_the_loader_runs():
    base = RunSpec(network="alexnet", size="tiny", batch_size=8)
    specs = dplan.sweep(base, {}, [0, 1, 2], [0, 2])
    assert specs[0] == base
    steps = [s for s in specs if s.kind == "step" and dplan.has_pipeline(s)]
    loaders = [s for s in specs if s.kind == "loader"]
    assert len(steps) == len(loaders) == 6 and len({s.run_id for s in specs}) == 13
    assert {(input_of(s).loader_workers, input_of(s).prefetch)
            for s in steps} == {(w, p) for w in (0, 1, 2) for p in (0, 2)}


# ----------------------------------------------------------------------------- data sets
def _digest(d: Path) -> str:
    h = hashlib.sha1()
    for p in sorted(d.iterdir()):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("fmt", ["jpeg", "png", "raw"])
def test_data_sets_are_deterministic_made_once_and_hold_known_content(fmt, tmp_path, monkeypatch):
    spec = datasets.DataSpec("image", (16, 16, 3), 10, 32, fmt)
    monkeypatch.setenv("DLPERF_DATA_DIR", str(tmp_path / "a"))
    a = datasets.ensure(spec)
    mtime = (a / "meta.json").stat().st_mtime_ns
    assert datasets.ensure(spec) == a and (a / "meta.json").stat().st_mtime_ns == mtime
    monkeypatch.setenv("DLPERF_DATA_DIR", str(tmp_path / "b"))
    assert _digest(datasets.ensure(spec)) == _digest(a)
    r = datasets.Reader(spec, a)
    assert list(r.labels) == [i % 10 for i in range(32)]
    x = r.decode(r.read(5))
    assert x.shape == (16, 16, 3) and x.dtype == np.uint8
    if fmt == "jpeg":  # lossy on the noise; the class's stripes (row means) survive
        rows = lambda a: a.astype(float).mean(axis=(1, 2))  # noqa: E731
        assert np.corrcoef(rows(x), rows(datasets.sample(spec, 5)))[0, 1] > 0.99
    else:
        assert np.array_equal(x, datasets.sample(spec, 5))


def test_clear_removes_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_DATA_DIR", str(tmp_path / "data"))
    datasets.ensure(datasets.DataSpec("vector", (8,), 4, 16, "raw"))
    root, freed = datasets.clear()
    assert freed > 0 and not root.exists()


def test_loading_a_sample_times_reading_decoding_and_preparing(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_DATA_DIR", str(tmp_path))
    spec = datasets.DataSpec("image", (16, 16, 3), 10, 8, "jpeg")
    src = Source(spec, disk(samples=8), dir=datasets.ensure(spec))
    x, y, prep = src.load(3)
    assert x.shape == (3, 16, 16) and x.dtype == np.float32 and y == 3
    assert prep.read_s > 0 and prep.decode_s > 0 and prep.augment_s > 0


# ----------------------------------------------------------------------------- eviction
def test_cold_cache_advises_dontneed_on_every_file(tmp_path, monkeypatch):
    files = []
    for i in range(3):
        (p := tmp_path / f"{i}.bin").write_bytes(b"x" * 100)
        files.append(p)
    calls = []
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, off, n, adv: calls.append(adv))
    ev = cache.evict(files)
    assert ev.ok and ev.files == 3 and ev.nbytes == 300
    assert calls == [os.POSIX_FADV_DONTNEED] * 3


def test_a_platform_that_refuses_eviction_says_so(tmp_path, monkeypatch):
    (p := tmp_path / "f").write_bytes(b"x")

    def refuse(*a):
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(os, "posix_fadvise", refuse)
    ev = cache.evict([p])
    assert not ev.ok and "refused" in ev.describe()
    monkeypatch.delattr(os, "posix_fadvise")
    assert "no posix_fadvise" in cache.evict([p]).describe()


# ----------------------------------------------------------------------------- storage
def test_fio_json_is_parsed():
    nbytes, secs = storage.parse_fio((DATA / "fio-3.33-randread.json").read_text())
    assert nbytes == 67108864 and secs == pytest.approx(0.102)
    with pytest.raises(ValueError):
        storage.parse_fio("fio: no JSON here")


def test_the_built_in_reader_measures_a_file_and_removes_its_test_file(tmp_path, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)  # as on a machine without fio
    assert resolve_tool("auto") == "direct"
    with pytest.raises(UsageError, match="fio is not installed"):
        resolve_tool("fio")
    bw = storage.measure(tmp_path, 4 << 20, "direct")
    assert bw.sequential.nbytes == bw.random.nbytes == 4 << 20
    assert bw.sequential.bytes_per_s > 0 and bw.random.bytes_per_s > 0
    assert "O_DIRECT" in bw.method or "posix_fadvise" in bw.method
    assert not (tmp_path / storage.TEST_FILE).exists()
    need, ok = storage.feeds(100e6, 200.0, 1e5)
    assert need == 20e6 and ok


# ----------------------------------------------------------------------------- memory search
def test_memory_search_doubles_then_bisects_to_the_largest_batch_that_fits():
    s = search(lambda b: (b <= 37, None if b <= 37 else "oom"), tolerance=0.0)
    assert s.found and s.largest_ok == 37 and s.smallest_oom == 38
    assert [b for b, *_ in s.tried][:7] == [1, 2, 4, 8, 16, 32, 64]


def test_memory_search_stops_on_a_failure_that_is_not_memory():
    s = search(lambda b: (b < 8, None if b < 8 else "crash"))
    assert not s.found and s.largest_ok == 4 and "crash" in s.stopped


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("args, message", [
    (["run", "--network", "fcn5", "--input", "tape"], "invalid choice: 'tape'"),
    (["run", "--network", "fcn5", "--input", "disk", "--loader-workers", "-1"], "0 or more"),
    (["run", "--network", "fcn5", "--loader-workers", "2"], "--loader-workers need an input"),
    (["run", "--network", "fcn5", "--input", "disk", "--data-format", "jpeg"],
     "use --data-format raw"),
    (["run", "--network", "alexnet", "--input", "memory", "--cache", "cold"], "--cache cold"),
    (["run", "--network", "fcn5", "--input", "disk", "--data-dir", "/proc/x/y"], "--data-dir"),
    (["dataflow", "sweep", "--network", "alexnet", "--loader-workers", "1,-2"], "--loader-workers"),
    (["dataflow", "storage", "--path", "/nonexistent/dir"], "does not exist"),
    (["dataflow", "storage", "--path", "/etc/hostname"], "less than one"),
    (["dataflow", "memory", "--network", "fcn5"], "needs --memory-limit"),
    (["run", "--network", "rbm", "--input", "disk"], "built for the DLBench networks"),
    (["run", "--network", "alexnet", "--mode", "inference", "--input", "disk"],
     "apply to --mode train"),
])
def test_bad_dataflow_input_is_one_line_and_status_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dlperf: error:") and message in err[0], err


def test_gpu_commands_without_a_gpu_say_so_and_exit_2(capsys):
    from dlperf.core.environment import gpus

    if gpus():
        pytest.skip("this machine has a GPU")
    assert main(["dataflow", "h2d"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs a GPU" in err[0]
    assert main(["dataflow", "memory", "--network", "fcn5", "--device", "gpu",
                 "--memory-limit", "1GiB"]) == 2


# ----------------------------------------------------------------------------- plans to specs
def test_the_dataflow_outcome_round_trips():
    from dlperf.core.spec import RunResult

    o = DataflowOutcome(kind="step", stall_s=[0.1], stall_share=0.5)
    step = RunSpec(network="alexnet", options={"input": "disk"})
    r = RunResult(spec=step, status="ok", outcome=StepOutcome(dataflow=o))
    assert dataflow_of(RunResult.model_validate_json(r.model_dump_json())) == o
    ld = RunResult(spec=dplan.loader_spec(step), status="ok", outcome=o)
    assert dataflow_of(RunResult.model_validate_json(ld.model_dump_json())) == o
    assert dataflow_of(RunResult(spec=RunSpec(network="alexnet"), status="ok")) is None


# ----------------------------------------------------------------------------- the report
def _fake(spec: RunSpec, median: float, share: float, cpus=(0, 1)):
    from dlperf.core.spec import Metrics, RunResult

    m = Metrics(steps=5, median_s=median, mean_s=median, std_s=0, min_s=median, max_s=median,
                mad_s=0, iqr_s=0, cv=0, samples_per_s=spec.batch_size / median)
    outcome = None
    if dplan.has_pipeline(spec):
        o = DataflowOutcome(kind=spec.kind, stall_s=[share * median] * 5, stall_share=share,
                            stall_mean_s=share * median, compute_median_s=median * (1 - share),
                            loader_cpus=list(cpus))
        outcome = o if spec.kind == "loader" else StepOutcome(dataflow=o)
    return RunResult(spec=spec, status="ok", metrics=m, step_times_s=[median] * 5,
                     outcome=outcome)


def test_the_sweep_table_answers_the_what_if_from_the_numbers(db, tmp_path):
    from dlperf.api import render_report as render
    from dlperf.core.store import Store
    from dlperf.kinds.dataflow.section import groups, sweep_table
    from dlperf.report import Filters

    base = RunSpec(network="alexnet", batch_size=16)
    grid = {(0, 0): (0.020, 0.50), (0, 2): (0.0102, 0.02), (2, 0): (0.0145, 0.31),
            (2, 2): (0.0103, 0.01), (4, 0): (0.016, 0.20), (4, 2): (0.015, 0.10)}
    with Store(db) as store:
        store.add(_fake(base, 0.010, 0.0))
        for (w, p), (t, share) in grid.items():
            opts = InputOptions(input="disk", loader_workers=w, prefetch=p)
            store.add(_fake(dplan.with_options([base], opts)[0], t, share))
        gs = groups(store)
        assert len(gs) == 1 and gs[0].floor is not None and len(gs[0].points) == 6
        t = sweep_table(gs[0])
        text = "\n".join(t.footnotes)
        assert ("with 2 loader workers the CPU would wait 31% of each step; prefetching 2 "
                "batches removes it (1%)") in text
        assert "floor (10 ms per mini-batch) is reached (within 5%) with 0 loader workers " \
               "and prefetch 2" in text
        # training steps (time x (1 - share)) with 4 workers on 2 CPUs are slower
        assert "oversubscribed: with more processes than the 2 CPUs" in text
        assert [r[-1] for r in t.rows][-2:] == ["1+4 on 2 (over)"] * 2
        rep = render(store, tmp_path / "rep", Filters())
    names = [s.name for s in rep.sections]
    assert "dataflow" in names and (tmp_path / "rep" / "dataflow_1.png").exists()
    # the DLBench table holds the synthetic run only
    dl = next(s for s in rep.sections if s.name == "dlbench")
    assert len(dl.tables[1].rows) == 1


def test_no_dataflow_section_without_dataflow_results(db, tmp_path):
    from dlperf.core.store import Store
    from dlperf.kinds.dataflow.section import dataflow_section
    from dlperf.report.base import Filters

    with Store(db) as store:
        store.add(_fake(RunSpec(network="alexnet", batch_size=16), 0.01, 0.0))
        assert dataflow_section(store, tmp_path, Filters()) is None
