"""The ``dlperf`` command: parsing and printing only; the work lives in api, runner, report.

Every bad input ends with one line on stderr, ``dlperf: error: ...``, and exit status 2.
Ctrl-C ends with status 130 after saying how many results were stored.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dlperf import __version__, units
from dlperf.dataflow.flags import add_input_flags
from dlperf.dataflow.plan import input_for_run
from dlperf.errors import UsageError
from dlperf.runner import Interrupted, Listener, peak_threads
from dlperf.spec import PRECISIONS, Measurement, RunResult, RunSpec

# Wide when writing to a file or a pipe (rich would assume 80 columns and squeeze tables).
out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)

# Extra subcommands registered by other parts of dlperf: name -> (add_parser, handler).
COMMANDS: dict[str, tuple[Callable[[argparse._SubParsersAction], argparse.ArgumentParser],
                          Callable[[argparse.Namespace], int]]] = {}


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, status 2 (argparse prints usage too)
        raise UsageError(f"{message} (see '{self.prog} --help')")


# ----------------------------------------------------------------------------- value parsing
# argparse types: a bad value becomes "argument --FLAG: <message>", one line, status 2.
def _number(text: str, cast: Callable[[str], Any], kind: str) -> Any:
    try:
        v = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not {kind}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"'{text}' is not a finite number")
    return v


def positive_float(text: str) -> float:
    """A finite number above 0 (seconds, rates, budgets)."""
    v = _number(text, float, "a number")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got '{text}'")
    return v


def nonneg_float(text: str) -> float:
    v = _number(text, float, "a number")
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got '{text}'")
    return v


def positive_int(text: str) -> int:
    """An integer of at least 1 (counts: threads, steps, processes)."""
    v = _number(text, int, "an integer")
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got '{text}'")
    return v


def nonneg_int(text: str) -> int:
    v = _number(text, int, "an integer")
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got '{text}'")
    return v


def seed_int(text: str) -> int:
    """A random seed every framework accepts (NumPy's legacy seed is below 2**32)."""
    v = nonneg_int(text)
    if v >= 2**31:
        raise argparse.ArgumentTypeError(f"must be below 2**31, got '{text}'")
    return v


def _number_list(text: str, what: str, cast: Callable[[str], Any], kind: str) -> list[Any]:
    try:
        vals = [cast(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{what}: '{text}' is not a comma-separated list of {kind}") from None
    if not vals:
        raise UsageError(f"{what}: empty list")
    return vals


def int_list(text: str, what: str) -> list[int]:
    return _number_list(text, what, int, "integers")


def float_list(text: str, what: str) -> list[float]:
    return _number_list(text, what, float, "numbers")


def str_list(text: str | None) -> list[str] | None:
    return [v.strip() for v in text.split(",") if v.strip()] if text else None


def parse_params(items: Sequence[str] | None, flag: str = "--param") -> dict[str, Any]:
    """--param hidden=512 --param init_scale=0.1 -> {'hidden': 512, 'init_scale': 0.1}"""
    params: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} expects NAME=VALUE, got '{item}'")
        params[key.strip()] = _scalar(value.strip(), f"{flag} {key.strip()}")
    return params


def _scalar(v: str, what: str = "value") -> int | float | bool | str:
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    for cast in (int, float):
        try:
            x = cast(v)
        except ValueError:
            continue
        if not math.isfinite(x):  # 'nan', 'inf': no network or option takes them
            raise UsageError(f"{what}: '{v}' is not a finite number")
        return x
    return v


def threads_arg(text: str) -> list[int]:
    if text == "auto":
        from dlperf.config import auto_threads

        return auto_threads()
    vals = int_list(text, "--threads")
    if any(v < 1 for v in vals):
        raise UsageError(f"--threads: thread counts must be at least 1, got '{text}'")
    return vals


def precision_arg(text: str | None) -> list[str] | None:
    vals = str_list(text)
    for v in vals or ():
        if v not in PRECISIONS:
            raise UsageError(f"--precision: unknown precision '{v}' (known: {', '.join(PRECISIONS)})")
    return vals


def batch_arg(text: str | None) -> list[int] | str | None:
    if text in (None, "default", "sweep"):
        return text
    vals = int_list(text, "--batch-size")
    if any(v < 1 for v in vals):
        raise UsageError(f"--batch-size: batch sizes must be at least 1, got '{text}'")
    return vals


# ----------------------------------------------------------------------------- progress
class ProgressListener(Listener):
    """A rich progress bar over configurations, showing the running step of the current one.

    The bar appears at the first configuration, so input errors found before any work
    starts print alone, on one line.
    """

    def __init__(self) -> None:
        self.p: Progress | None = None
        self.task = None

    def __enter__(self) -> ProgressListener:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.p is not None:
            self.p.stop()

    def _bar(self) -> Progress:
        if self.p is None:
            self.p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TimeElapsedColumn(), console=out, transient=True)
            self.p.start()
            self.task = self.p.add_task("starting", total=None)
        return self.p

    def start(self, spec: RunSpec, index: int, total: int) -> None:
        self._bar().update(self.task, total=total, completed=index,
                           description=escape(spec.label()))

    def event(self, spec: RunSpec, event: dict) -> None:
        phase, p = event.get("phase"), self._bar()
        if phase in ("warmup", "step"):
            p.update(self.task, description=f"{escape(spec.label())}  {phase} "
                                            f"{units.seconds(event['s'])}")
        elif phase == "built":
            p.update(self.task, description=f"{escape(spec.label())}  built")
        elif phase == "train":
            p.update(self.task, description=f"{escape(spec.label())}  "
                                            f"{escape(str(event.get('text', '')))}")

    def skipped(self, spec: RunSpec, why: str) -> None:
        p = self._bar()
        p.advance(self.task)
        p.console.print(f"  [dim]skip[/] {escape(spec.label()):50} {escape(why)}")

    def waiting(self, spec: RunSpec, holder: str) -> None:
        self._bar().update(self.task, description=f"{escape(spec.label())}  waiting for the "
                                                  f"CPUs ({escape(holder)})")

    def done(self, result: RunResult) -> None:
        p = self._bar()
        p.advance(self.task)
        s = result.spec
        if result.ok:
            t = units.seconds(result.metrics.median_s) if result.metrics else ""
            p.console.print(f"  [green]ok[/] {escape(s.label()):50} {t:>9}")
        else:
            f = result.failure
            p.console.print(f"  [red]- [/] {escape(s.label()):50} {f.reason}: {escape(f.message[:90])}")


# ----------------------------------------------------------------------------- commands
def cmd_run(a: argparse.Namespace) -> int:
    from dlperf import api

    m = measurement_from(a)
    params = parse_params(a.param)
    inp, notes = input_for_run(a, params)  # --input and friends (docs/dataflow.md)
    for note in notes:
        out.print(f"note: {escape(note)}")
    with ProgressListener() as listener:
        row = api.run(a.network, framework=a.framework, variant=a.variant, device=a.device,
                      precision=a.precision, threads=a.threads, batch_size=a.batch_size,
                      size=a.size, params=params, repeat=a.repeat, seed=a.seed,
                      measurement=m, timeout_s=1800.0 if a.timeout is None else a.timeout,
                      memory_limit=a.memory_limit, db=a.db, listener=listener, input=inp)
    if a.json:
        print(json.dumps([r.model_dump() for r in row.results], default=str))
        return 0 if row.measured else 1
    print_run(row, a.db)
    return 0 if row.measured else 1


def print_run(row, db) -> None:
    from dlperf.report.dataflow import dataflow_lines
    from dlperf.store import default_path

    s = row.spec
    out.print(f"[bold]{escape(s.label())}[/]  ({row.processes} process{'es' if row.processes != 1 else ''})")
    if not row.measured:
        out.print(f"  [red]not measured[/]: {row.failure}")
        return
    r0 = row.ok[0]
    m = r0.metrics
    steps = sum(r.metrics.steps for r in row.ok)
    out.print(f"  time per mini-batch  {units.seconds(row.median_s)}  +- {units.seconds(row.mad_s)} MAD"
              f"  (IQR {units.seconds(m.iqr_s)}, CV {units.percent(row.within_cv)}, "
              f"min {units.seconds(m.min_s)}, max {units.seconds(m.max_s)}; {steps} timed steps "
              f"after {m.warmup_steps} warm-up)")
    if row.between_cv is not None:
        out.print(f"  between processes    CV {units.percent(row.between_cv)} of the per-process medians")
    out.print(f"  samples/s            {row.samples_per_s:.4g}")
    if row.achieved_flops:
        out.print(f"  achieved             {units.flops(row.achieved_flops, '/s')} "
                  f"({units.flops(row.flops_per_step)}/step)")
        for line in peak_lines(row, db):
            out.print(escape(line))
    out.print(f"  peak memory          {units.nbytes(row.peak_rss_bytes)} resident"
              f" (model, data and activations {units.nbytes(m.model_rss_bytes)})"
              + (f"; device {units.nbytes(m.device_peak_bytes)}" if m.device_peak_bytes else ""))
    busy = f" (CPU busy {row.cpu_util:.2f} cores)" if row.cpu_util is not None else ""
    out.print(f"  threads in force     {r0.threads_in_force} on CPUs {r0.cpus}{busy}")
    for line in dataflow_lines(row, db):  # stall, preparation, loader alone
        out.print(escape(line))
    for w in row.warnings:
        out.print(f"  [yellow]warning[/]: {escape(w)}")
    out.print(f"  stored in {db or default_path()}", style="dim")


#: The flag (argparse dest, spelling) that sets each Measurement field.
MEASUREMENT_FLAGS = {"min_time_s": ("min_time", "--min-time"),
                     "min_steps": ("min_steps", "--min-steps"),
                     "warmup_max_time_s": ("warmup_time", "--warmup-time")}


def peak_lines(row, db) -> list[str]:
    """The share of peak of a measured row, against the best measured rate and the
    theoretical one, and what limits it (``dlperf.peak.limit_message``)."""
    from dlperf import peak
    from dlperf.report.analysis import other_framework_rates
    from dlperf.store import Store

    prov = next((r.extra["peak"] for r in reversed(row.ok) if "peak" in r.extra), None)
    if prov is None:
        return []
    pk, s, achieved = peak.Peak.from_dict(prov), row.spec, row.achieved_flops
    best = pk.best
    if best is None or not best.flops:
        return []
    where = f"{pk.threads} thread{'s' if pk.threads != 1 else ''}" if pk.device == "cpu" else "GPU"
    if pk.device == "cpu" and pk.threads < s.threads:
        where += f" (all CPUs; {s.threads} threads oversubscribe them)"
    share = (f"  share of peak        {units.percent(row.peak_share)} of {units.flops(best.flops, '/s')},"
             f" this machine's best measured rate at {where} ({best.source})")
    if pk.theoretical_flops:
        theory = units.flops(pk.theoretical_flops, "/s")
        share += (f"; {units.percent(achieved / pk.theoretical_flops)} of the theoretical {theory}"
                  if achieved <= pk.theoretical_flops else
                  f"; above the theoretical {theory}: the clock, the cores in use or the "
                  "FLOP count differ from what dlperf assumes")
    elif pk.device == "cpu":
        share += f"; theoretical peak {pk.theoretical}"
    with Store(db) as store:
        others = other_framework_rates(store, s)
    limit = peak.limit_message(s.label(), s.network, s.framework, achieved, pk, others)
    return [share, f"  limit                {limit}"]


def measurement_from(a: argparse.Namespace, base: Measurement | None = None) -> Measurement:
    """``base`` (default: Measurement()) with the timing flags that were given, validated
    as a whole (e.g. --min-steps above max_steps is refused); errors name the flags."""
    upd = {field: getattr(a, dest) for field, (dest, _) in MEASUREMENT_FLAGS.items()
           if getattr(a, dest, None) is not None}
    try:
        return Measurement.model_validate({**(base or Measurement()).model_dump(), **upd})
    except ValidationError as e:
        err = e.errors()[0]
        field = err["loc"][0] if err["loc"] else None
        flags = ([MEASUREMENT_FLAGS[field][1]] if field in MEASUREMENT_FLAGS
                 else [MEASUREMENT_FLAGS[f][1] for f in upd]) or ["the measurement settings"]
        raise UsageError(f"{'/'.join(flags)}: {err['msg'].removeprefix('Value error, ')}") from None


def cmd_sweep(a: argparse.Namespace) -> int:
    from dlperf import config

    overrides: dict[str, Any] = dict(
        networks=str_list(a.networks), frameworks=str_list(a.frameworks),
        variants=str_list(a.variants), devices=str_list(a.devices),
        precisions=precision_arg(a.precision),
        threads=threads_arg(a.threads) if a.threads else None,
        batch_sizes=batch_arg(a.batch_size), size=a.size,
        params=parse_params(a.param) or None, repeat=a.repeat, timeout=a.timeout,
        memory_limit=a.memory_limit,
    )
    if a.file:
        cfg = config.load_sweep_file(a.file, **overrides)
    else:
        if not overrides["networks"]:
            raise UsageError("sweep needs --networks or a sweep file")
        cfg = config.build(**overrides)
    cfg = cfg.model_copy(update={"measurement": measurement_from(a, cfg.measurement)})
    return run_sweep(cfg, a, title="sweep")


def run_sweep(cfg, a: argparse.Namespace, title: str) -> int:
    from dlperf import api, backends, plan
    from dlperf.report import Filters, step_rows
    from dlperf.report.tables import detail_table
    from dlperf.store import Store

    for fw in cfg.frameworks:
        backends.require(fw)
    with Store(a.db) as store:
        specs = plan.expand(cfg)
        todo = plan.pending(specs, store, force=a.force, retry_failed=a.retry_failed)
        out.print(f"{title}: {len(specs)} runs in the sweep, {len(specs) - len(todo)} already "
                  f"in {store.path}, {len(todo)} to measure")
        if a.dry_run:
            for s in todo:
                out.print(f"  {escape(s.label())}  (repeat {s.repeat})")
            return 0
    with ProgressListener() as listener:
        api.sweep(cfg, db=a.db, force=a.force, retry_failed=a.retry_failed, listener=listener)
    from dlperf.environment import machine_id

    ids = {s.config_id for s in specs}
    with Store(a.db) as store:
        rows = [r for r in step_rows(store, Filters(tuple(cfg.networks), tuple(cfg.frameworks)))
                if r.spec.config_id in ids and r.machine_id == machine_id()]
    from dlperf.report.exporters import print_table

    print_table(detail_table(rows, title=f"{title}: results"), out)
    return 0


def cmd_reproduce(a: argparse.Namespace) -> int:
    from dlperf import presets
    from dlperf.report import Filters, render
    from dlperf.store import Store

    if a.study != "dlbench":
        raise UsageError(f"unknown study '{a.study}' (known: dlbench)")
    frameworks = presets.resolve_frameworks(str_list(a.frameworks) or ["torch"])
    variants = str_list(a.variants) or ["default"]
    configs = presets.dlbench(quick=a.quick, frameworks=frameworks, variants=variants,
                              threads=threads_arg(a.threads) if a.threads else None,
                              size=a.size, timeout=a.timeout, memory_limit=a.memory_limit)
    started = time.time()
    for name, cfg in configs:
        # timing flags given alongside change the preset's settings (shown as 'custom')
        cfg = cfg.model_copy(update={"measurement": measurement_from(a, cfg.measurement)})
        run_sweep(cfg, a, title=name)
    out_dir = Path(a.out)
    with Store(a.db) as store:
        rep = render(store, out_dir, Filters(tuple(presets.DLBENCH_NETWORKS), tuple(frameworks),
                                             size=configs[0][1].size))
    print_report(rep)
    out.print(f"reproduce dlbench{' --quick' if a.quick else ''}: {time.time() - started:.0f} s; "
              f"results in [bold]{out_dir}/[/] (report.html, *.md, *.csv, *.png)")
    return 0


def print_report(rep) -> None:
    from dlperf.report.exporters import print_table

    if not rep.sections:
        out.print("the store holds no results yet: run 'dlperf sweep' or "
                  "'dlperf reproduce dlbench --quick'")
    for sec in rep.sections:
        if sec.tables:
            print_table(sec.tables[0], out)
    out.print("wrote " + ", ".join(str(p.name) for p in rep.files) + f" in {rep.out_dir}")


def cmd_report(a: argparse.Namespace) -> int:
    from dlperf import api

    rep = api.report(db=a.db, out=a.out, networks=str_list(a.networks),
                     frameworks=str_list(a.frameworks))
    print_report(rep)
    return 0


def cmd_networks(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.report.exporters import print_table
    from dlperf.report.tables import Table

    nets = api.networks(group=a.group)
    counted = {} if a.no_count else _counted_flops(nets)
    rows = []
    for n in nets:
        f = counted.get(n["name"])
        rows.append([n["name"], n["group"], n["description"], units.count(n["params"]),
                     str(n["default_batch"]), units.flops(f if f is not None else n["flops_per_step"]),
                     ", ".join(n["sizes"])])
    src = "PyTorch's FLOP counter" if counted else "closed form"
    t = Table(title="Networks", headers=["name", "group", "definition", "params", "batch",
                                         "FLOPs/step", "sizes"], rows=rows,
              caption=f"FLOPs per training step (forward + backward, matmul and convolution) "
                      f"at the default batch, from {src}.")
    if a.json:
        for n in nets:
            n["flops_per_step_counted"] = counted.get(n["name"])
        print(json.dumps(nets, indent=1))
    else:
        print_table(t, out)
    return 0


def _counted_flops(nets: list[dict]) -> dict[str, float]:
    from dlperf import backends

    if not backends.installed("torch"):
        return {}
    from dlperf.flopcache import counted_flops

    return counted_flops([n["name"] for n in nets])


def cmd_env(a: argparse.Namespace) -> int:
    from dlperf import environment
    from dlperf.runner import Runner
    from dlperf.store import Store

    m = environment.machine()
    out.print(f"[bold]machine[/]  {m['cpu_model']} ({m['cpu_vendor']})")
    out.print(f"  cores    {m['physical_cores']} physical, {m['logical_cpus']} logical, "
              f"{m['usable_cpus']} usable by dlperf" + ("; virtual machine" if m["hypervisor"] else ""))
    out.print(f"  flags    {' '.join(m['cpu_flags']) or '-'}")
    out.print(f"  memory   {units.nbytes(m['memory_bytes'])}")
    gpus = m["gpus"]
    out.print("  GPU      " + (", ".join(f"{g['name']} ({units.nbytes(g['memory_bytes'])})" for g in gpus)
                              if gpus else "none"))
    out.print(f"  system   {m['os']}, Python {m['python']}")
    threads = threads_arg(a.threads) if a.threads else _env_threads()
    threads = sorted({peak_threads(t) for t in threads})  # past the CPUs: the all-CPU peak
    if a.peak_size < 16:
        raise UsageError(f"--peak-size must be at least 16 (got {a.peak_size})")
    with Store(a.db) as store:
        runner = Runner(store, peak_size=a.peak_size)
        peaks = {}
        with ProgressListener() as listener:
            runner.listener = listener
            for t in threads:
                peaks[t] = runner.ensure_peak(t, "cpu", remeasure=a.remeasure)
            if gpus:
                peaks["gpu"] = runner.ensure_peak(1, "gpu", remeasure=a.remeasure)
        latest = store.results(kind="peak", threads=threads[0], framework="torch", status="ok")
        software = latest[-1].software if latest else {}
    out.print("[bold]software[/]")
    for k, v in environment.packages().items():
        out.print(f"  {k:14} {v}")
    for k in ("blas", "cpu_capability", "mkldnn", "cuda"):
        if k in software:
            out.print(f"  {'torch ' + k:14} {software[k]}")
    out.print(f"[bold]fp32 peak[/]: the best of the libraries' kernels (size {a.peak_size}; one "
              "worker each, its best round's median step, GFLOP/s), and the theoretical peak")
    for t, pk in peaks.items():
        print_peak("GPU" if t == "gpu" else f"{t} thread{'s' if t != 1 else ''}", pk)
    return 0


def print_peak(label: str, pk) -> None:
    best = pk.best
    out.print(f"  [bold]{label:12}[/] " + (f"{units.flops(best.flops, '/s')} ({escape(best.source)})"
                                          if best else "no kernel ran"))
    for k in pk.rates:
        rate = units.flops(k.flops, "/s") if k.flops else f"- ({k.failure})"
        each = (f"rounds {', '.join(f'{f / 1e9:.1f}' for f in k.round_flops)}"
                if len(k.round_flops) > 1 else "")
        versions = ", ".join(f"{p} {v}" for p, v in k.versions.items())
        mark = "  <- best" if k is best else ""
        out.print(f"    {escape(k.source):24} {escape(rate):14} {each:22} {escape(versions)}{mark}")
    if pk.device == "cpu":
        out.print(f"    {'theoretical':24} {escape(pk.theoretical)}")


def _env_threads() -> list[int]:
    from dlperf.config import auto_threads

    return auto_threads()


# ----------------------------------------------------------------------------- parser
def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="results store (SQLite); default $DLPERF_DB or "
                                "~/.local/share/dlperf/results.db")


def _limits(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=positive_float, help="seconds (above 0) per worker process "
                   "before it is killed and recorded as a timeout (default 1800)")
    p.add_argument("--memory-limit", help="resident memory per worker, e.g. 8GiB; over it the "
                   "worker is killed and recorded as out of memory")
    p.add_argument("--min-time", type=positive_float, help="time the timed steps for at least "
                   "this many seconds (default 2; part of each result's identity, as are the "
                   "other timing settings)")
    p.add_argument("--min-steps", type=positive_int, help="at least this many timed steps "
                   "(default 5)")
    p.add_argument("--warmup-time", type=positive_float, help="warm-up budget in seconds "
                   "(default 30)")


PRECISION_HELP = ("fp32 (default; TF32 off), tf32 (GPU only), bf16 or fp16 (the framework's "
                  "mixed precision, fp16 with loss scaling)")


def peak_size(text: str) -> int:
    v = _number(text, int, "an integer")
    if v < 16:
        raise argparse.ArgumentTypeError(f"must be at least 16, got '{text}'")
    return v


def _sweep_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="re-measure what the store already has")
    p.add_argument("--retry-failed", action="store_true", help="re-run stored failures")
    p.add_argument("--dry-run", action="store_true", help="list what would run, run nothing")


def build_parser() -> Parser:
    ap = Parser(prog="dlperf", description="Measure, explain and predict how fast neural "
                "networks train.")
    ap.add_argument("--version", action="version", version=f"dlperf {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    p = sub.add_parser("run", help="measure one configuration")
    p.add_argument("--network", "-n", required=True)
    p.add_argument("--framework", "-f", default="torch")
    p.add_argument("--variant", help="e.g. eager|compile (torch), graph|xla (tensorflow), jit (jax), "
                   "hybrid|imperative (mxnet)")
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    p.add_argument("--precision", default="fp32", choices=PRECISIONS, help=PRECISION_HELP)
    p.add_argument("--threads", "-t", type=positive_int, default=1)
    p.add_argument("--batch-size", "-b", type=positive_int,
                   help="default: the network's DLBench default")
    p.add_argument("--size", help="network size (full, tiny; small, large for the guide's families)")
    p.add_argument("--param", action="append", metavar="NAME=VALUE", help="network parameter")
    p.add_argument("--repeat", type=positive_int, default=1, help="worker processes (default 1)")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    _limits(p)
    add_input_flags(p)
    _common(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("sweep", help="measure every combination, resumably")
    p.add_argument("file", nargs="?", help="TOML sweep file (flags override its values)")
    p.add_argument("--networks", help="comma-separated")
    p.add_argument("--frameworks", help="comma-separated (default torch)")
    p.add_argument("--variants", help="comma-separated, 'default' or 'all'")
    p.add_argument("--devices", help="cpu,gpu")
    p.add_argument("--precision", help="comma-separated: " + PRECISION_HELP)
    p.add_argument("--threads", help="comma-separated or 'auto'")
    p.add_argument("--batch-size", help="comma-separated, 'default' or 'sweep'")
    p.add_argument("--size")
    p.add_argument("--param", action="append", metavar="NAME=VALUE")
    p.add_argument("--repeat", type=positive_int)
    _limits(p)
    _sweep_flags(p)
    _common(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("reproduce", help="reproduce a published study (dlbench)")
    p.add_argument("study", help="dlbench")
    p.add_argument("--quick", action="store_true", help="threads 1,2,4, default batches, one "
                   "process each: a few minutes")
    p.add_argument("--frameworks", help="comma-separated, or 'all' installed (default torch)")
    p.add_argument("--variants", help="comma-separated, 'default' or 'all'")
    p.add_argument("--threads", help="override the thread counts")
    p.add_argument("--size", help="'tiny' for a smoke test of the whole pipeline")
    p.add_argument("--out", default="results/dlbench", help="results folder (default results/dlbench)")
    _limits(p)
    _sweep_flags(p)
    _common(p)
    p.set_defaults(func=cmd_reproduce)

    p = sub.add_parser("report", help="render tables and plots from the store (runs nothing)")
    p.add_argument("--out", default="dlperf-report", help="folder (default dlperf-report)")
    p.add_argument("--networks")
    p.add_argument("--frameworks")
    _common(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("networks", help="list the networks with parameters and FLOPs")
    p.add_argument("--group", help="dlbench or guide")
    p.add_argument("--no-count", action="store_true", help="closed-form FLOPs only (no torch)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_networks)

    p = sub.add_parser("env", help="the machine, the software and the measured fp32 peak")
    p.add_argument("--threads", help="thread counts for the peak (default 1, 2, 4, ... past the CPUs)")
    p.add_argument("--remeasure", action="store_true", help="measure the peak kernels again")
    p.add_argument("--peak-size", type=peak_size, default=2048,
                   help="peak kernel size, at least 16: matmul side, conv batch x 64 (default 2048)")
    _common(p)
    p.set_defaults(func=cmd_env)

    for add, handler in COMMANDS.values():
        add(sub).set_defaults(func=handler)
    return ap


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM (a kill, a 'timeout' command, a closing session) takes the Ctrl-C path: the
    # workers are killed and the run in flight is stored as interrupted
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    import os
    import signal

    from dlperf.errors import StoreWriteError

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminate)
    _load_extensions()
    try:
        a = build_parser().parse_args(argv)
        if not getattr(a, "command", None):
            build_parser().print_help()
            return 2
        return a.func(a)
    except UsageError as e:
        # plain print: one line however wide the terminal
        print(f"dlperf: error: {e}", file=sys.stderr)
        return 2
    except StoreWriteError as e:
        print(f"dlperf: error: {e}", file=sys.stderr)
        return 1
    except Interrupted as e:
        flight = (f"; {e.in_flight.spec.label()} was stored as interrupted"
                  if e.in_flight else "")
        print(f"dlperf: interrupted; {e.saved} results stored{flight}. Run the same command "
              "again to continue where it stopped.", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("dlperf: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a defect of dlperf: one line, the traceback on request
        if os.environ.get("DLPERF_DEBUG"):
            raise
        print(f"dlperf: internal error: {type(e).__name__}: {e} (run with DLPERF_DEBUG=1 "
              "for the traceback)", file=sys.stderr)
        return 1


def _load_extensions() -> None:
    """Subcommands that live beside their logic (train, parallel, ...) register here."""
    import importlib

    for mod in ("dlperf.train_cli", "dlperf.calc_cli", "dlperf.predict_cli", "dlperf.parallel.cli",
                "dlperf.setup_cli", "dlperf.dataflow_cli"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod and not mod.startswith(f"{e.name}."):
                raise


if __name__ == "__main__":
    # run as 'python -m dlperf.cli': the subcommands of the extensions register with the
    # module 'dlperf.cli', not with this '__main__' copy of it, so run that module's main
    from dlperf import cli as _cli

    sys.exit(_cli.main())
