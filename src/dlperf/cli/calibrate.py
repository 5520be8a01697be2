"""``dlperf calibrate``: time this machine's kernels per framework and thread count, store
them, and print the fitted curves the model then predicts with. Parsing and printing
only; the plan lives in ``dlperf.kinds.calibrate.plan``, the fits in ``dlperf.perfmodel.fit``.

    dlperf calibrate                               # installed frameworks, threads 1..cores
    dlperf calibrate --frameworks torch --threads 1,2 --fine
    dlperf calibrate --repeat 3                    # each kernel's median over three runs
    dlperf calibrate --device gpu --precision bf16 # PyTorch's kernels under autocast
    dlperf calibrate --networks fcn5,alexnet       # their layers' shapes and a skeleton
                                                   # of the grid
    dlperf calibrate --networks fcn5,alexnet --skeleton cores   # the skeleton at the
                                                   # physical cores only
    dlperf calibrate --networks fcn5,alexnet --skeleton once    # ... and in the first
                                                   # framework only (the main job's)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

from dlperf.cli import args
from dlperf.cli.progress import ProgressListener, console, out
from dlperf.core import units
from dlperf.core.errors import UsageError
from dlperf.kinds.calibrate.plan import SKELETONS
from dlperf.perfmodel.fit import LocalFit


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate", help="time this machine's kernels for the performance model",
        description="Time GEMMs over a grid of shapes, convolutions, memory bandwidth, the "
        "per-op cost and, with PyTorch, a gloo all-reduce on loopback, per framework and "
        "thread count, through the normal worker (stored, resumable). About 17 minutes on "
        "2 cores for torch, tensorflow and jax at 1 and 2 threads; --networks times their "
        "shapes and a skeleton of the grid (4 to 7 minutes for three networks). The model "
        "is fitted on these kernels only, never on the networks it predicts.")
    args.add_run_flags(
        p, network=args.Take(many=True, help="time the products and convolutions at these "
                             "networks' layer shapes (at --batch-size) and a skeleton of the "
                             "grid instead of the whole grid: faster, exact for them, and "
                             "added to what is stored; with --dataflow: whose data "
                             "(default: the DLBench networks). Comma-separated"),
        batch_size=args.Take(many=True, help="with --networks: the batches whose shapes to "
                             "time, comma-separated (default: each network's DLBench "
                             "default)"),
        framework=args.Take(many=True, help="comma-separated (default: every installed "
                               "one of torch, tensorflow, jax)"),
        threads=args.Take(many=True, help="comma-separated or 'auto' (default: 1, 2, 4, ... "
                          "up to the physical cores)"),
        device=True, precision=args.Take(help="the kernels' precision (default fp32): tf32 "
                                         "turns TF32 on (a GPU's), bf16 and fp16 run "
                                         "PyTorch's kernels under autocast; 'dlperf predict "
                                         "--precision' then uses that calibration"),
        repeat=args.Take(help="time every kernel this many times, in turns, and fit each "
                         "one's median: steadier curves on a noisy machine, as many times as "
                         "long (default 1; runs already stored count)"))
    p.add_argument("--fine", action="store_true", help="a denser grid, each shape timed "
                   "longer (several times slower)")
    p.add_argument("--skeleton", choices=SKELETONS, default="all",
                   help="with --networks: where to time the skeleton of the grid that "
                   "predicts networks outside them: at every thread count (all, the default), "
                   "only at the one 'dlperf advise' predicts them at (cores: all the "
                   "physical cores; elsewhere only what the networks' own predictions read), "
                   "or there in the first of --frameworks alone (once: the main job's; "
                   "advise then predicts them in that framework)")
    p.add_argument("--no-allreduce", action="store_true", help="skip the all-reduce kernels")
    p.add_argument("--dataflow", action="store_true", help="time the input pipelines' "
                   "loaders instead of the kernels: each framework's cost per sample on "
                   "each data shape and source (jpeg, png, raw, memory) of --networks, for "
                   "'dlperf predict --input' (seconds each)")
    args.add_sweep_flags(p, retry_failed=False)
    args.add_executor(p)
    args.add_json(p, help="print the fitted curves as JSON")
    args.add_db(p)
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.core import framework_table
    from dlperf.kinds.calibrate import plan as calibration

    frameworks = [framework_table.info(f).name
                  for f in (a.frameworks or calibration.default_frameworks())]
    threads = a.threads or calibration.default_threads(a.device)
    calibration.check_precision(a.precision, a.device, frameworks,
                                hint=" (add --frameworks torch)")
    slurm = args.slurm_from(a)
    if slurm is not None:
        api.check_slurm(slurm)
    if a.dataflow:
        if a.batch_size:
            raise UsageError("--batch-size: --dataflow times each loader on batches of its own")
        return _dataflow(a, frameworks)
    scope = _scope(a)
    if a.dry_run:
        def line(s) -> str:
            scoped = getattr(s.options, "scope", ())
            return (f"  {s.framework:10} x{s.threads}  {s.network}"
                    + (f" for {', '.join(scoped)}" if scoped else "")
                    + (f"  (repeat {s.repeat})" if a.repeat > 1 else ""))

        return _dry_run(calibration.specs(frameworks, threads, device=a.device, fine=a.fine,
                                          allreduce=not a.no_allreduce, repeat=a.repeat,
                                          precision=a.precision, scope=scope,
                                          skeleton=a.skeleton), a, line)
    started = time.monotonic()
    with ProgressListener(to_stderr=a.json) as listener:  # --json: stdout for the document
        cal = api.calibrate(frameworks, threads, db=a.db, device=a.device, fine=a.fine,
                            allreduce=not a.no_allreduce, force=a.force, listener=listener,
                            repeat=a.repeat, precision=a.precision, slurm=slurm,
                            scope=scope, skeleton=a.skeleton)
    if slurm is not None:  # the curves are the nodes', not this machine's
        console(a.json).print("calibrated on the Slurm nodes; their kernels are in the store "
                              "with their machines ('dlperf status' lists the jobs)")
        if a.json:  # no curves of this machine
            print("[]")
        return 0
    fits = [f for f in cal.fits if f.framework in frameworks and f.threads in threads
            and f.precision == a.precision]
    if a.json:
        print(json.dumps([f.model_dump() for f in fits], indent=1, default=str))
        return 0
    for f in fits:
        print_fit(f)
    missing = {(fw, t) for fw in frameworks for t in threads} - {(f.framework, f.threads)
                                                                 for f in fits}
    for fw, t in sorted(missing):
        out.print(f"  [red]{fw} x{t}: incomplete[/] (a kernel run failed; 'dlperf report' or "
                  "the store has its reason)")
    out.print(quality_line(fits), markup=False)
    # what the calibration cost, as the study's own line says its (the main job's budget)
    out.print(f"calibrate: {time.monotonic() - started:.0f} s", markup=False)
    return 1 if missing else 0


def _dry_run(specs: list, a: argparse.Namespace, line) -> int:
    """--dry-run: each run's ``line``, or under --json the runs' specs as one document."""
    if a.json:
        print(json.dumps([s.model_dump() for s in specs], default=str))
    else:
        for s in specs:
            out.print(line(s), markup=False)
    return 0


def _scope(a: argparse.Namespace) -> list[tuple[str, int]]:
    """--networks and --batch-size: the (network, batch) pairs whose shapes to time (none:
    the whole grid)."""
    from dlperf import workloads

    if not a.networks:
        if a.batch_size:
            raise UsageError("--batch-size needs --networks (whose layers to time at it)")
        if a.skeleton != "all":
            raise UsageError("--skeleton needs --networks (a calibration of the whole grid "
                             "has no skeleton)")
        return []
    if a.fine:
        raise UsageError("--fine times the whole grid denser; --networks times their shapes")
    out = []
    for name in a.networks:
        wl = workloads.get(name)
        sizes = (wl.batch_sweep if a.batch_size == "sweep" else
                 [wl.default_batch] if a.batch_size in (None, "default") else a.batch_size)
        out += [(wl.name, b) for b in sizes]
    return out


def _dataflow(a: argparse.Namespace, frameworks: list[str]) -> int:
    """``--dataflow``: the loaders' costs per sample, measured and printed."""
    from dlperf import api
    from dlperf.kinds.dataflow import calibration as loaders
    from dlperf.report.exporters import print_table
    from dlperf.report.tables import Table

    if a.precision != "fp32" or a.device != "cpu" or a.repeat > 1 or a.fine:
        raise UsageError("--dataflow times the loaders on this machine's CPU: --device, "
                         "--precision, --repeat and --fine apply to the kernels")
    nets = a.networks or None
    fws = [f for f in frameworks if f in loaders.FRAMEWORKS]
    if not fws:
        raise UsageError(f"--dataflow: none of {', '.join(frameworks)} has an input pipeline "
                         f"in dlperf ({', '.join(loaders.FRAMEWORKS)} do)")
    specs = loaders.specs(fws, nets)
    if a.dry_run:
        return _dry_run(specs, a, lambda s: f"  {s.framework:10} {s.label()}")
    with ProgressListener(to_stderr=a.json) as listener:
        costs = api.calibrate_dataflow(fws, nets, db=a.db, force=a.force, listener=listener)
    rows = [c for key, c in sorted(costs.items()) if key[0] in fws]
    if a.json:
        print(json.dumps([c.model_dump() for c in rows], indent=1))
        return 0
    print_table(Table(title="Loader cost per sample (one core)", headers=[
        "framework", "data", "per sample", "read", "decode", "augment", "collate"],
        rows=[[c.framework, c.data, units.seconds(c.per_sample_s)] + [
            units.seconds(c.stages[k]) if k in c.stages else "-"
            for k in ("read_s", "decode_s", "augment_s", "collate_s")] for c in rows],
        caption="Each framework's loader alone, no workers: its wall time is one core's "
        "work. 'dlperf predict --input disk --loader-workers N' predicts the stall from "
        "them."), out)
    return 1 if any(loaders.key_of(s) not in costs for s in specs) else 0


def quality_line(fits) -> str:
    """The calibration's one line on its own quality: undisturbed, or which kernels other
    processes disturbed or the machine's own speed moved under, and by how much
    (``LocalFit.quality``)."""
    from dlperf.perfmodel.fit import far_passes_said

    bad = [f for f in fits if f.doubtful]
    speed = f"; {line}" if (line := speed_steadiness(fits)) else ""
    # the passes left out of the others' curves, named by their calibration
    far = {f"{f.framework} x{f.threads} {k}": v for f in fits if not f.doubtful
           for k, v in f.far_passes.items()}
    if bad:
        return "calibration quality: " + "; ".join(
            f"{f.framework} x{f.threads}: {f.quality()}" for f in bad) + far_passes_said(
            far) + speed
    # the most disturbed of the undisturbed speaks for them all, with every one's samples
    # timed again and passes left out
    worst = max(fits, key=lambda f: max(f.other_cpu_share.values(), default=-1.0),
                default=None)
    if worst is not None:
        worst = worst.model_copy(update={"retimed": tuple(
            sum(f.retimed[i] for f in fits) for i in (0, 1)),
            "threads_retimed": sum(f.threads_retimed for f in fits),
            "runs_retimed": sum(f.runs_retimed for f in fits), "far_passes": far})
    return ("calibration quality: " + (worst.quality() if worst else "nothing calibrated")
            + speed)


def speed_steadiness(fits) -> str | None:
    """Whether the machine kept one speed across the calibrations' workers: the speed
    probes (``core.speed_probe``) of the slowest and the fastest, in the part that
    differs most; None with fewer than two probed."""
    from dlperf.core import speed_probe

    probed = [f for f in fits if f.speed_probe]
    if len(probed) < 2:
        return None
    spread = []
    for part in speed_probe.PARTS:
        have = sorted((f for f in probed if part in f.speed_probe),
                      key=lambda f: f.speed_probe[part])
        if len(have) >= 2:
            spread.append((have[-1].speed_probe[part] / have[0].speed_probe[part] - 1, part,
                           have[-1], have[0]))
    change, part, slow, fast = max(spread, key=lambda s: s[0])
    if change <= speed_probe.DRIFT:
        return (f"machine speed steady (the speed probes of its {len(probed)} calibrations "
                f"within {change:.0%})")
    return (f"MACHINE SPEED MOVED: the speed probe's {part} part took {change:.0%} longer "
            f"with {slow.label} than with {fast.label}; the machine ran at another speed "
            f"for some calibrations, so their predictions disagree as much or more "
            f"(calibrate again when it is steady, --force)")


def _spread(residuals: tuple[float, ...]) -> str:
    """The median and largest deviation of the samples from the fitted form (before the
    smoother takes the rest up)."""
    if not residuals:
        return "-"
    dev = [abs(math.exp(r) - 1) for r in residuals]
    return f"median {statistics.median(dev):.0%}, max {max(dev):.0%}"


def print_fit(f: LocalFit) -> None:
    g, d, m = f.gemm, f.dispatch, f.memory
    out.print(f"[bold]{f.label}[/] ({f.samples} samples)")
    out.print(f"  GEMM        {units.flops(g.rate, '/s')} asymptotic; half rate at "
              f"m {g.h[0]:.3g}, n {g.h[1]:.3g}, k {g.h[2]:.3g}; fit off by {_spread(g.residuals)}")
    for name, c in (("conv fwd", f.conv), ("conv bwd", f.conv_bwd)):
        out.print(f"  {name:11} {units.flops(c.rate, '/s')} asymptotic; half rate at "
                  f"{c.h[0]:.3g} output pixels, {c.h[1]:.3g} output and {c.h[2]:.3g} input "
                  f"channels; fit off by {_spread(c.residuals)}")
    if (w := f.conv_wgrad) is not None:  # calibrations since revision 19
        out.print(f"  first wgrad {w.scale:.2g} of the conv bwd curve (a first layer's weight "
                  f"gradient alone); off by {_spread(w.residuals)}")
    for name, c in (("memory", m), ("loss", f.xent), ("batch norm", f.bn)):
        if c is not None:  # the loss and batch norm: calibrations since revision 7 and 8
            small, big = c.nbytes[0], c.nbytes[-1]
            out.print(f"  {name:11} {small / c.seconds[0] / 1e9:.3g} GB/s at "
                      f"{units.nbytes(small)} .. {big / c.seconds[-1] / 1e9:.3g} GB/s at "
                      f"{units.nbytes(big)}")
    out.print(f"  dispatch    {units.seconds(d.op_s)} per op, {units.seconds(d.call_s)} per call; "
              f"in a training step {units.seconds(d.step_op_s)} per op, "
              f"{units.seconds(d.step_call_s)} per step")
    for name, curves in (("all-reduce", f.allreduce), ("all-gather", f.allgather),
                         ("reduce-scatter", f.reducescatter), ("broadcast", f.broadcast)):
        for w, ab in sorted(curves.items()):
            out.print(f"  {name:11} {w} processes: {units.seconds(ab.alpha_s)} + bytes / "
                      f"{ab.beta_bytes_per_s / 1e9:.3g} GB/s")
    points = f.sharing or (((None, f.sharing_cost),) if f.sharing_cost else ())
    if points:  # the cost of two processes on one core, by the length of their step
        out.print("  core share  two processes on one CPU: " + ", ".join(
            f"x{cost:.3g}" + (f" for a {units.seconds(step)} step" if step else "")
            for step, cost in points) + " beyond processor sharing")

