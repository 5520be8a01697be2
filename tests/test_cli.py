"""The dlperf command end to end: exit codes, one-line errors, output, Ctrl-C, reports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlperf.cli import main
from dlperf.core import units
from dlperf.core.spec import Metrics, RunResult, RunSpec
from dlperf.core.store import Store


def dlperf(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlperf.cli", *args], capture_output=True,
                          text=True, timeout=300, **kw)


@pytest.mark.parametrize("command", ["train", "experiment", "parallel"])
def test_module_entry_point_has_the_extension_commands(command):
    p = dlperf(command, "--help")
    assert p.returncode == 0, p.stderr
    assert f"usage: dlperf {command}" in p.stdout


def test_every_subcommand_has_help(capsys):
    # in this process (the module entry point is the test above's): a fresh interpreter
    # per subcommand spent 20 s importing dlperf again
    from dlperf.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in sub.choices:
        with pytest.raises(SystemExit) as ended:
            main([name, "--help"])
        out = capsys.readouterr()
        assert ended.value.code == 0 and f"usage: dlperf {name}" in out.out, (name, out.err)


@pytest.mark.parametrize("fmt", [[], ["--json"]])  # rich's console, and plain print
def test_a_closed_pipe_ends_quietly(fmt):
    # 'dlperf networks | head -1': the reader has left; here it is gone before the first
    # line, so the first write fails (EPIPE) for certain
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "dlperf.cli", "networks", "--no-count", *fmt],
                           stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w)
    # no traceback, no line at all (rich ends its own broken pipe with status 1)
    assert p.returncode in (0, 1) and p.stderr == "", p.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--network", "fcn6"], "unknown network 'fcn6'"),
        (["run", "--network", "fcn5", "--batch-size", "0"], "batch"),
        (["run", "--network", "fcn5", "--threads", "0"], "thread"),
        (["run", "--network", "fcn5", "--framework", "caffe"], "unknown framework 'caffe'"),
        (["run", "--network", "fcn5", "--memory-limit", "lots"], "bad memory size"),
        (["run"], "--network"),
        (["sweep", "--networks", "fcn5", "--threads", "1,x"], "not a comma-separated list"),
        (["sweep", "--networks", "fcn5", "--batch-size", "-4"], "batch"),
        (["sweep", "/nonexistent.toml"], "not found"),
        (["sweep", "--networks", "fcn5", "--db", "/proc/dlperf/x.db"], "cannot open results store"),
        (["report", "--out", "/proc/dlperf-report"], "cannot write the report"),
        (["reproduce", "imagenet"], "unknown study"),
        (["bogus"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_status_2(args, message, capsys):
    assert main(args) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("dlperf: error:") and message in lines[0]
    assert "Traceback" not in captured.err + captured.out


RUN = ["run", "--network", "fcn5", "--size", "tiny"]
SWEEP = ["sweep", "--networks", "fcn5", "--size", "tiny"]
TRAIN = ["train", "--network", "ffn", "--size", "tiny"]
PARALLEL = ["parallel", "--network", "fcn5", "--size", "tiny", "--strategy", "sync"]


@pytest.mark.parametrize(
    "args, flag",
    [
        (RUN + ["--min-time", "nan"], "--min-time"),
        (RUN + ["--min-time", "inf"], "--min-time"),
        (RUN + ["--min-time", "0"], "--min-time"),
        (RUN + ["--min-steps", "0"], "--min-steps"),
        (RUN + ["--min-steps", "5000"], "--min-steps"),  # above the most timed steps
        (RUN + ["--warmup-time", "-1"], "--warmup-time"),
        (RUN + ["--timeout", "0"], "--timeout"),
        (RUN + ["--timeout", "nan"], "--timeout"),
        (RUN + ["--repeat", "0"], "--repeat"),
        (RUN + ["--seed", "-1"], "--seed"),
        (RUN + ["--threads", "x"], "--threads"),
        (RUN + ["--param", "hidden=nan"], "--param hidden"),
        (RUN + ["--precision", "fp8"], "--precision"),
        (SWEEP + ["--repeat", "0"], "--repeat"),
        (SWEEP + ["--timeout", "inf"], "--timeout"),
        (SWEEP + ["--min-time", "nan"], "--min-time"),
        (SWEEP + ["--precision", "fp32,fp8"], "--precision"),
        (["reproduce", "dlbench", "--timeout", "0"], "--timeout"),
        (["reproduce", "dlbench", "--warmup-time", "nan"], "--warmup-time"),
        (["env", "--peak-size", "0"], "--peak-size"),
        (TRAIN + ["--max-time", "nan"], "--max-time"),
        (TRAIN + ["--max-epochs", "inf"], "--max-epochs"),
        (TRAIN + ["--lr", "0"], "--lr"),
        (TRAIN + ["--eval-every", "0"], "--eval-every"),
        (TRAIN + ["--timeout", "0"], "--timeout"),
        (TRAIN + ["--target", "nan"], "--target"),
        (TRAIN + ["--option", "lr=inf"], "--option lr"),
        (["experiment", "families", "--max-time", "0"], "--max-time"),
        (["experiment", "families", "--timeout", "nan"], "--timeout"),
        (["experiment", "families", "--threads", "0"], "--threads"),
        (PARALLEL + ["--timeout", "0"], "--timeout"),
        (PARALLEL + ["--stall-timeout", "inf"], "--stall-timeout"),
        (PARALLEL + ["--lr", "nan"], "--lr"),
        (PARALLEL + ["--target-loss", "nan"], "--target-loss"),
        (PARALLEL + ["--eval-every", "0"], "--eval-every"),
        (PARALLEL + ["--straggler-delay", "nan"], "--straggler-delay"),
        (PARALLEL + ["--min-time", "inf"], "--min-time"),
        (PARALLEL + ["--warmup-steps", "-1"], "--warmup-steps"),
    ],
)
def test_bad_numbers_name_a_real_flag(args, flag, capsys):
    assert main(args) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlperf: error:"), captured.err
    assert flag in lines[0]
    assert "Traceback" not in captured.err + captured.out
    # the flag named is one the command has
    from dlperf import cli

    sub = cli.build_parser()._subparsers._group_actions[0].choices[args[0]]
    assert flag.split()[0] in sub._option_string_actions


@pytest.mark.parametrize("command", [
    ["report"], ["status"], ["validate"], ["validate", "--memory"],
    ["compare", "framework=torch", "framework=jax"],
])
def test_a_command_that_only_reads_the_store_makes_none_at_a_mistyped_path(command, tmp_path,
                                                                           capsys):
    """A --db with no store behind it is one line and status 2, and no file is left there;
    a command that measures makes its store (run, sweep, calibrate)."""
    typo = tmp_path / "no" / "reslts.db"
    assert main([*command, "--db", str(typo)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"no results store at {typo}" in err[0], err
    assert not (tmp_path / "no").exists()


def test_bad_sweep_file_through_the_command(tmp_path, capsys):
    f = tmp_path / "s.toml"
    f.write_text("[sweep]\nnetworks = 'fcn5'\nthreads = [1, 'two']\n")
    assert main(["sweep", str(f)]) == 2
    err = capsys.readouterr().err
    assert str(f) in err and len(err.strip().splitlines()) == 1


def test_networks_lists_every_dlbench_network(capsys):
    assert main(["networks", "--no-count", "--json"]) == 0
    nets = {n["name"]: n for n in json.loads(capsys.readouterr().out)}
    assert {"fcn5", "fcn8", "alexnet", "resnet50", "lstm32", "lstm64"} <= set(nets)
    assert nets["fcn5"]["params"] == 117_997_696
    assert nets["fcn5"]["flops_per_step"] == 38_285_606_912


@pytest.mark.slow
def test_run_prints_every_measure(db):
    p = dlperf("run", "--network", "fcn5", "--size", "tiny", "--batch-size", "4", "--threads",
               "2", "--min-time", "0.1", "--db", str(db), env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 0, p.stderr
    for text in ("time per mini-batch", "MAD", "IQR", "CV", "samples/s", "FLOP/s",
                 "best measured rate at 2 threads", "limit", "peak memory",
                 "threads in force     2"):
        assert text in p.stdout, (text, p.stdout)
    with Store(db) as st:
        [r] = st.results(kind="step")
        assert r.ok and r.spec.threads == 2 and r.metrics.peak_share is not None
    # the peak's share that is the libraries' files, which a fresh install maps more of
    assert f"the libraries' files {units.nbytes(r.metrics.file_rss_bytes)})" in p.stdout


@pytest.mark.slow
def test_ctrl_c_keeps_what_was_measured_and_resume_finishes(db):
    # four configurations of at least half a second each (plus a worker start each): the
    # interrupt, sent once the first result is stored and the second's worker runs, always
    # lands mid-sweep
    args = ["sweep", "--networks", "fcn5", "--size", "tiny", "--batch-size", "1,2,3,4",
            "--min-time", "0.5", "--db", str(db)]
    # started as a shell starts a command: SIGINT neither blocked nor ignored, whatever the
    # test process (with the frameworks' threads loaded by earlier tests) has inherited
    start = ("import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, []); "
             "signal.signal(signal.SIGINT, signal.SIG_DFL); "
             "os.execv(sys.executable, [sys.executable, '-m', 'dlperf.cli', *sys.argv[1:]])")
    proc = subprocess.Popen([sys.executable, "-c", start, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
        # a result is stored and the next run's worker is running: the interrupt lands on a
        # run in flight (not in the moment between two runs, which a busy machine stretches)
        if db.exists() and _worker_running(proc.pid):
            with Store(db) as st:
                if st.results(kind="step") and _worker_running(proc.pid):
                    break
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    try:  # the sweep's signal state, for the message should the interrupt not take
        status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
    except OSError:
        status = []
    sig_state = [line.strip() for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (err, sig_state)
    assert "interrupted" in err and "Traceback" not in err
    with Store(db) as st:
        stored = st.results(kind="step")
    kept = sum(r.ok for r in stored)
    assert 1 <= kept < 4
    # the configuration in flight is stored as interrupted (test_worker checks its steps)
    [flight] = [r for r in stored if not r.ok]
    assert flight.failure.reason == "interrupted" and "was stored as interrupted" in err
    p = dlperf(*args)
    assert p.returncode == 0, p.stderr
    assert f"{kept} already in" in p.stdout  # the interrupted one is measured again
    with Store(db) as st:
        assert sum(r.ok for r in st.results(kind="step")) == 4


def _worker_running(pid: int) -> bool:
    import psutil

    try:
        return any("dlperf.engine.worker" in " ".join(c.cmdline())
                   for c in psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return False


def _result(network, threads, median=None, fail=None, batch=None, device="cpu"):
    from dlperf import workloads

    spec = RunSpec(network=network, threads=threads, device=device,
                   batch_size=batch or workloads.get(network).default_batch)
    if fail:
        return RunResult.failed(spec, fail, "exceeded --timeout 5 s")
    m = Metrics(steps=3, median_s=median, mean_s=median, std_s=0.01, min_s=median,
                max_s=median, mad_s=0.001, iqr_s=0.002, cv=0.01, samples_per_s=1 / median,
                flops_per_step=1e9, achieved_flops=1e9 / median)
    return RunResult(spec=spec, status="ok", metrics=m, step_times_s=[median] * 3,
                     threads_in_force=threads)


def test_report_is_rendered_from_the_store_alone(db, tmp_path, capsys):
    with Store(db) as st:
        st.add(_result("fcn5", 1, 1.25))
        st.add(_result("fcn5", 2, 0.75))
        st.add(_result("alexnet", 1, 2.5))
        st.add(_result("alexnet", 2, fail="timeout"))
        st.add(_result("fcn5", 2, 1.5, batch=128))
    out = tmp_path / "rep"
    assert main(["report", "--db", str(db), "--out", str(out)]) == 0
    md = (out / "dlbench.md").read_text()
    assert "| fcn5 | torch/eager | 64 | default | 1.25 | 0.75 |" in md
    assert "| alexnet | torch/eager | 16 | default | 2.5 | -[1] |" in md
    assert "[1] alexnet torch/eager 2 threads: timeout: exceeded --timeout 5 s" in md
    assert "settings default: min-time 2 s, min-steps 5" in md  # what measured the numbers
    csv_text = (out / "dlbench.csv").read_text()
    assert "fcn5,torch/eager,64,default,1.25,0.75" in csv_text
    assert (out / "thread_scaling.png").stat().st_size > 1000
    assert (out / "dlbench_table.png").stat().st_size > 1000
    assert (out / "batch_size.png").stat().st_size > 1000  # fcn5 at 64 and 128
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3
    raw = json.loads((out / "results.json").read_text())
    assert len(raw["results"]) == 5 and raw["environments"]
    assert "1.25" in capsys.readouterr().out  # the table is printed too


def test_report_on_an_empty_store_says_so(db, tmp_path, capsys):
    with Store(db):  # made, with nothing in it
        pass
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "r")]) == 0
    assert "no results yet" in capsys.readouterr().out


def test_run_json_keeps_stdout_for_the_document(tmp_path):
    """The progress goes to stderr under --json, so a script can parse stdout whole."""
    p = dlperf("run", "-n", "fcn5", "--size", "tiny", "-b", "8", "--min-time", "0.05",
               "--json", "--db", str(tmp_path / "r.db"))
    assert p.returncode == 0, p.stderr
    (result,) = json.loads(p.stdout)
    assert result["status"] == "ok" and "fcn5" in p.stderr


@pytest.mark.parametrize("args, kind, said", [
    (PARALLEL + ["--dry-run"], "parallel", "parallel: 1 runs, 0 already in"),
    (["calibrate", "--frameworks", "torch", "--threads", "1", "--networks", "fcn5",
      "--dry-run"], "kernel", None),
    (["calibrate", "--dataflow", "--frameworks", "torch", "--networks", "fcn5", "--dry-run"],
     "loader", None),
])
def test_a_dry_run_under_json_prints_the_runs_as_one_document(args, kind, said, db, capsys):
    """A dry run's plan under --json: its specs on stdout; the plan's line, where the
    command has one, on stderr (calibrate's dry run has none beside its runs)."""
    assert main([*args, "--json", "--db", str(db)]) == 0
    captured = capsys.readouterr()
    specs = json.loads(captured.out)
    assert specs and all(RunSpec.model_validate(s).kind == kind for s in specs)
    err = " ".join(captured.err.split())
    assert said in err if said else err == "", err


def test_a_note_of_a_run_under_json_goes_to_stderr(db, capsys):
    """A data set larger than --memory-limit is streamed from disk, and the run says so:
    on stderr under --json (the run itself is out of memory at so small a limit)."""
    assert main([*RUN, "-b", "8", "--input", "memory", "--samples", "64", "--memory-limit",
                 "10K", "--min-time", "0.05", "--json", "--db", str(db)]) == 1
    captured = capsys.readouterr()
    (result,) = json.loads(captured.out)
    assert result["spec"]["options"]["input"] == "disk" and result["failure"]["reason"] == "oom"
    assert "streamed from disk" in captured.err


# ----------------------------------------------------------------------------- the run group
def _commands(parser=None, path=()):
    """(path, parser) of every subcommand, nested ones ('dataflow sweep') too."""
    import argparse

    from dlperf.cli import build_parser

    parser = parser or build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _commands(sub, (*path, name))


def _taking(flag):
    return [(path, p) for path, p in _commands() if flag in p._option_string_actions]


#: every flag of the run group with its one short spelling (None: it has none)
RUN_GROUP = {"--network": "-n", "--size": None, "--framework": "-f", "--variant": None,
             "--device": "-d", "--precision": None, "--threads": "-t", "--batch-size": "-b"}


@pytest.mark.parametrize("flag", [*RUN_GROUP, "--networks", "--frameworks", "--param",
                                  "--repeat", "--seed", "--json", "--db", "--timeout",
                                  "--memory-limit", "--min-time", "--dry-run"])
def test_each_shared_flag_is_declared_once(flag):
    src = Path(__file__).resolve().parents[1] / "src" / "dlperf" / "cli"
    found = [f"{f.name}:{i}" for f in src.glob("*.py")
             for i, line in enumerate(f.read_text().splitlines(), 1)
             if f'add_argument("{flag}"' in line]
    assert len(found) == 1, found


@pytest.mark.parametrize("flag, short", RUN_GROUP.items())
def test_a_group_flag_has_the_same_spellings_everywhere(flag, short):
    taking = _taking(flag)
    assert taking, flag
    for path, p in taking:
        action = p._option_string_actions[flag]
        assert set(action.option_strings) == {flag} | ({short} if short else set()), path


@pytest.mark.parametrize("path", [" ".join(path) for path, _ in _taking("--threads")])
@pytest.mark.parametrize("value, message", [("0", "must be at least 1"),
                                            ("x", "x"), ("1.5", "1.5")])
def test_every_threads_flag_refuses_a_bad_count_in_one_line(path, value, message, capsys):
    for spelling in ("--threads", "-t"):
        # the bad value is found while parsing, before any required flag is missed
        assert main([*path.split(), spelling, value]) == 2
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("dlperf: error: argument --threads"), \
            captured.err
        assert message in lines[0] and "Traceback" not in captured.err + captured.out


@pytest.mark.parametrize("path", [" ".join(path) for path, _ in _taking("--batch-size")])
def test_every_batch_size_flag_refuses_zero_in_one_line(path, capsys):
    assert main([*path.split(), "-b", "0"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "argument --batch-size/-b: must be at least 1" in lines[0]


def test_threads_take_one_value_or_a_list_as_each_command_says():
    from dlperf.cli import build_parser

    def parsed(*argv):
        return build_parser().parse_args(list(argv)).threads

    # lists: what sweeps over thread counts
    assert parsed("sweep", "-t", "1,2,2,4") == [1, 2, 4]
    assert parsed("calibrate", "--threads", "2") == [2]
    assert parsed("env", "-t", "auto") == parsed("reproduce", "dlbench", "-t", "auto")
    # one value: what runs one configuration
    assert parsed("explain", "-n", "fcn5", "-t", "2") == 2
    assert parsed("dataflow", "loader", "-n", "fcn5") == 1  # the group's default
    assert parsed("parallel", "-n", "fcn5", "-s", "sync") is None  # its own default
    with pytest.raises(Exception, match="not an integer"):
        parsed("predict", "-n", "fcn5", "-d", "cpu", "-t", "1,2")


def test_run_takes_lists_in_inference_mode_only(capsys):
    assert main(["run", "-n", "fcn5", "--threads", "1,2"]) == 2
    assert "takes one value in train mode" in capsys.readouterr().err
    assert main(["run", "-n", "fcn5", "-b", "sweep"]) == 2
    assert "only 'dlperf sweep'" in capsys.readouterr().err


def test_the_device_flag_is_this_machines_or_the_catalogues():
    from dlperf.cli import build_parser

    for path, p in _taking("--device"):
        action = p._option_string_actions["--device"]
        if path in (("predict",), ("calc", "transfer")):  # any catalogue device
            assert action.choices is None, path
        else:
            assert tuple(action.choices) == ("cpu", "gpu") and action.default == "cpu", path
    a = build_parser().parse_args(["predict", "-n", "resnet50", "-d", "a100-40gb"])
    assert a.device == "a100-40gb"


def test_the_command_line_opens_no_store():
    src = Path(__file__).resolve().parents[1] / "src" / "dlperf" / "cli"
    for f in src.glob("*.py"):
        text = f.read_text()
        assert "core.store import" not in text and "Store(" not in text, f.name
