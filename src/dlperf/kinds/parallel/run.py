"""The torchrun entry point: one process per worker.

    python -m torch.distributed.run [torchrun options] -m dlperf.kinds.parallel.run SPEC.json OUTDIR

torchrun gives each process its rank and the rendezvous (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, ...). The process pins itself to its share of the CPUs before torch loads,
joins the process group (gloo on CPUs, NCCL on GPUs) with a timeout, builds its part of
the strategy, warms up, times, and writes into OUTDIR:

- ``status_rank{r}.bin``: its current phase (``dlperf.kinds.parallel.status``), at all times;
- ``progress_rank{r}.jsonl``: every step's record as it happens (nothing lost on a kill);
- ``result_rank{r}.json``: its report at the end, and on rank 0 ``all.json``: every rank's
  report, gathered over the process group (so a multi-node run has them all in one place);
- ``error_rank{r}.json``: the exception, if it raised one.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from dlperf.core import speed_probe
from dlperf.core.environment import peak_resident_bytes
from dlperf.core.errors import is_out_of_memory
from dlperf.core.spec import RunSpec
from dlperf.kinds.parallel.status import StatusBoard

DEFAULT_COMM_TIMEOUT_S = 300.0


def rank_cpus(local_rank: int, threads: int) -> list[int]:
    """This worker's CPUs: consecutive blocks of ``threads`` usable CPUs per local rank
    (distinct physical cores first), wrapping around when the node is oversubscribed."""
    from dlperf.core.environment import usable_cpus

    cpus = usable_cpus()
    start = (local_rank * threads) % len(cpus)
    return sorted({cpus[(start + k) % len(cpus)] for k in range(min(threads, len(cpus)))})


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, default=str))
    tmp.replace(path)  # atomic: the launcher never reads half a file


def _inject_fault(rank: int, phase: str, i: int) -> None:
    """Tests: DLPERF_PARALLEL_FAULT=RANK:KIND:STEP makes that rank die by SIGKILL ('kill'),
    hang ('hang') or raise ('error') at that timed step, as a broken worker might."""
    fault = os.environ.get("DLPERF_PARALLEL_FAULT")
    if not fault or phase == "warmup":
        return
    r, kind, step = fault.split(":")
    if int(r) != rank or int(step) != i:
        return
    if kind == "kill":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "hang":
        while True:
            time.sleep(1)
    elif kind == "error":
        raise RuntimeError(f"injected fault at step {i}")


def _run_step(strat: Any, ctx: Any, i: int, phase: str, deadline: float | None = None) -> dict:
    ctx.status.set("compute", f"compute, {phase} step {i}")
    _inject_fault(ctx.rank, phase, i)
    rec = strat.step(i, phase, deadline)
    ctx.log.step(rec)
    return rec


def time_steps(strat: Any, ctx: Any) -> dict[str, Any]:
    """Warm up until rank 0's step times settle, then time: a fixed number of steps for the
    lockstep strategies, a common time window for the free-running ones. The warm-up rule
    and the length of the sample are ``measure.timing``'s, the same as a single worker's;
    rank 0 applies it and tells the others, so every rank runs the same steps."""
    import torch.distributed as dist

    from dlperf.core.timing import WarmUp

    o = ctx.opts
    warm = WarmUp(ctx.spec.measurement)
    if o.warmup_steps != 0:
        n = 0
        while True:
            rec = _run_step(strat, ctx, n, "warmup")
            n += 1
            over = warm.add(rec["t1"] - rec["t0"])
            go = n < o.warmup_steps if o.warmup_steps is not None else not over
            # rank 0 decides for everyone: the ranks must agree on the number of steps
            if not ctx.bcast([1.0 if go else 0.0], src=0)[0]:
                break
    n_timed = o.steps or warm.timed_steps()
    n_timed, window = ctx.bcast([float(n_timed), n_timed * warm.estimate_s], src=0)
    n_timed = int(n_timed)
    ctx.status.set("communication", "barrier before the timed steps")
    dist.barrier(group=ctx.group)
    start = time.time()
    if strat.lockstep or o.steps or not warm.times:  # (no warm-up: no step time for a window)
        for i in range(n_timed):
            _run_step(strat, ctx, i, "timed")
    else:  # every worker runs freely until the common window ends
        deadline, i = start + window, 0
        while not _run_step(strat, ctx, i, "timed", deadline)["stop"]:
            i += 1
    return {"start": start, "warmup_steps": len(warm.times),
            "settled": warm.settled or o.warmup_steps is not None, "timed_steps": n_timed,
            "window_s": window}


def train(strat: Any, ctx: Any) -> dict[str, Any]:
    """Train on real data until the held-out target or the budget; evaluate every
    ``eval_every`` global mini-batches."""
    import torch.distributed as dist

    from dlperf.core.target_rules import reached
    from dlperf.kinds.parallel.common import budget, goals

    o, b = ctx.opts, ctx.spec.batch_size
    ctx.status.set("communication", "barrier before training")
    dist.barrier(group=ctx.group)
    start = time.time()
    i = 0
    if strat.lockstep:
        eval_s, stop = 0.0, False
        while not stop:
            _run_step(strat, ctx, i, "train")
            i += 1
            if i % o.eval_every and not (o.max_steps and i >= o.max_steps):
                continue
            e0 = time.time()
            ctx.status.set("compute", f"evaluation after step {i}")
            res = strat.evaluate()
            stop_flag = 0.0
            if res is not None:
                loss, acc = res
                train_s = e0 - start - eval_s  # everyone waited for earlier evaluations
                stop_flag = float(reached(goals(o), {"accuracy": acc, "loss": loss})
                                  or budget(o).spent(steps=i, train_s=train_s) is not None)
                eval_s += time.time() - e0
                ctx.log.eval({"t": e0 - start, "samples": i * b, "loss": loss, "accuracy": acc,
                              "eval_s": eval_s, "train_s": train_s})
            stop = bool(ctx.bcast([stop_flag], src=strat.evaluator)[0])
    else:
        # the step itself says when to stop: its leader read the server's flag and told its
        # group, so every rank of a group leaves after the same step (the evaluator's
        # decision reaches the server first, and rank 0 like any worker at its next push)
        while True:
            rec = _run_step(strat, ctx, i, "train")
            i += 1
            if rec["stop"]:
                break
            if ctx.rank == strat.evaluator:
                strat.after_step(start)
    return {"start": start, "steps": i}


def run(spec: RunSpec, outdir: Path, status: StatusBoard, cpus: list[int],
        started: float) -> dict[str, Any]:
    import datetime

    import torch
    import torch.distributed as dist

    startup = {"process": started, "torch_imported": time.time()}
    if spec.options.strategy in ("sync", "mixed"):
        _preload("torch._dynamo")  # DDP imports it: seconds, overlapped with the rendezvous

    from dlperf.backends.base import UnsupportedError
    from dlperf.backends.torch_backend import TorchBackend
    from dlperf.core.environment import physical_cores
    from dlperf.kinds.parallel import common

    opts = spec.options
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if world != opts.processes:
        raise UnsupportedError(f"torchrun started {world} processes, the run asks for "
                               f"{opts.processes}")
    backend_impl = TorchBackend()
    in_force = backend_impl.set_threads(spec.threads)
    if spec.device == "gpu":
        if not torch.cuda.is_available():
            raise UnsupportedError("no CUDA GPU visible to torch")
        device, backend = torch.device("cuda", local_rank), "nccl"
        torch.cuda.set_device(device)
    else:
        device, backend = torch.device("cpu"), "gloo"
    timeout = float(os.environ.get("DLPERF_PARALLEL_COMM_TIMEOUT", DEFAULT_COMM_TIMEOUT_S))
    status.set("starting", f"joining the {backend} process group")
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    startup["group_joined"] = time.time()
    dump = os.environ.get("DLPERF_PARALLEL_DUMP")
    log = common.StepLog(outdir / f"progress_rank{rank}.jsonl")
    ctx = common.Context(
        spec=spec, opts=opts, rank=rank, world=world, local_rank=local_rank,
        local_world=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        node=int(os.environ.get("GROUP_RANK", "0")), device=device, backend=backend,
        outdir=outdir, status=status, log=log, comm_timeout_s=timeout,
        dump_dir=Path(dump) if dump else None,
    )
    if opts.servers:  # every rank takes part in creating it, servers included
        ctx.group = dist.new_group(list(range(opts.workers)))
    strat = _strategy("server" if ctx.is_server else opts.strategy)(ctx)
    status.set("starting", "building the network")
    strat.setup()
    startup["built"] = time.time()
    info = {"rank": rank, "node": ctx.node, "local_rank": local_rank, "host": socket.gethostname(),
            "pid": os.getpid(), "cpus": cpus, "threads_in_force": in_force,
            "physical_cores": physical_cores(), "logical_cpus": os.cpu_count(),
            "param_count": strat.net.param_count, "flops_per_sample": strat.net.flops_per_sample,
            "backend": backend, "software": backend_impl.software() if rank == 0 else {},
            "startup": startup}
    log.emit({"log": "start", **info})
    if ctx.is_server:
        timing = strat.serve()
    elif opts.data:
        timing = train(strat, ctx)
    else:
        timing = time_steps(strat, ctx)
    status.set("communication", "finishing")
    extra = strat.finish()
    peak = peak_resident_bytes()
    # after the peak is read (the probe's copies must not raise it), on rank 0 alone (the
    # others wait for its report, idle): the machine's speed as the steps ran, for the
    # prediction set beside this run (``core.speed_probe``; a step's worker does the same)
    probe = speed_probe.after_steps(spec.memory_limit, peak) \
        if rank == 0 and device.type == "cpu" else None
    report = {**info, "timing": timing, "strategy": extra, "steps": log.steps,
              "evals": log.evals, "updates": strat.updates, "peak_rss_bytes": peak,
              "speed_probe": probe}
    _write_json(outdir / f"result_rank{rank}.json", report)
    status.set("communication", "gathering the reports on rank 0")
    gathered: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(report, gathered, dst=0)
    if rank == 0:
        _write_json(outdir / "all.json", {"reports": gathered})
    # no one leaves before rank 0 holds every report; the process then exits without
    # destroy_process_group (which once hung here at exit, and frees nothing os._exit won't)
    status.set("communication", "final barrier")
    dist.barrier()
    log.close()
    return report


def _preload(module: str) -> None:
    """Import ``module`` in a background thread while the main thread waits for the other
    workers at the rendezvous (the import lock makes a later import wait for it)."""
    import importlib
    import threading

    threading.Thread(target=importlib.import_module, args=(module,), daemon=True).start()


def _strategy(name: str) -> type:
    if name == "server":
        from dlperf.kinds.parallel.ps_server import ServerRank

        return ServerRank
    if name == "hybrid":
        from dlperf.kinds.parallel.hybrid import Hybrid

        return Hybrid
    if name == "sync":
        from dlperf.kinds.parallel.sync import SyncDataParallel

        return SyncDataParallel
    if name == "fsdp":
        from dlperf.kinds.parallel.fsdp import ShardedDataParallel

        return ShardedDataParallel
    if name == "async":
        from dlperf.kinds.parallel.param_server import AsyncParameterServer

        return AsyncParameterServer
    if name == "mixed":
        from dlperf.kinds.parallel.mixed import MixedAsync

        return MixedAsync
    from dlperf.kinds.parallel.pipeline import Pipeline

    return Pipeline


def main(argv: list[str] | None = None) -> int:
    started = time.time()
    import faulthandler
    import signal

    from dlperf.core.orphans import die_with_parent

    die_with_parent()  # dies with torchrun, which dies with the driver
    argv = sys.argv[1:] if argv is None else argv
    spec_path, outdir = Path(argv[0]), Path(argv[1])
    rank = int(os.environ.get("RANK", "0"))
    # the launcher sends SIGUSR1 before it kills a hung run: every thread's stack goes to
    # this rank's own file, which the failure record keeps (open for the process's life)
    stacks = (outdir / f"stacks_rank{rank}.txt").open("w")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    status = StatusBoard(outdir / f"status_rank{rank}.bin")
    status.set("starting", "starting")
    spec = RunSpec.model_validate_json(spec_path.read_text())
    # pin before torch loads, so that its thread pools are sized for these CPUs
    cpus = rank_cpus(int(os.environ.get("LOCAL_RANK", "0")), spec.threads)
    os.sched_setaffinity(0, cpus)
    status.set("starting", "importing torch")
    try:
        import warnings

        # torch.distributed warns about its own internal use of deprecated APIs
        warnings.filterwarnings("ignore", category=UserWarning, module="torch.distributed")
        run(spec, outdir, status, cpus, started)
    except BaseException as e:  # noqa: BLE001 - every failure becomes a record
        from dlperf.backends.base import UnsupportedError

        reason = ("unsupported" if isinstance(e, UnsupportedError)
                  else "oom" if is_out_of_memory(e) else "error")
        _write_json(outdir / f"error_rank{rank}.json", {
            "rank": rank, "time": time.time(), "reason": reason,
            "message": f"{type(e).__name__}: {e}".strip()[:500],
            "traceback": traceback.format_exc(limit=8)[-3000:]})
        status.set("done", f"failed: {type(e).__name__}")
        traceback.print_exc()
        return 1
    status.set("done", "finished")
    return 0


if __name__ == "__main__":
    from dlperf.core.orphans import exit_without_teardown

    exit_without_teardown(main())  # every file is written and closed; torchrun exits sooner
