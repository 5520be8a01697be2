"""Launch a parallel run under torchrun and turn whatever happens into one RunResult.

The command is ``python -m dlperf.launch.torchrun_main``: ``torch.distributed.run`` run by
the current interpreter after arming the parent-death signal (``launch.orphans``), with
torchrun's own c10d rendezvous: on one machine an endpoint on 127.0.0.1 at a free
port; across machines the user's ``--rdzv-endpoint`` and ``--nnodes``. torchrun starts
the workers (``dlperf.parallel.worker``), watches them and, when one fails, stops the
others. This launcher watches torchrun in turn, in its own process group, with:

- a timeout for the whole run and a stall timeout (no rank changed phase or logged a
  step for that long: a hang), after which every process of the run is killed and the
  ranks' phase boards name the rank that held the others up;
- a rendezvous timeout, after which torchrun gives up on nodes that never arrive;
- a memory limit over the whole process tree;

all in the watch loop that the isolated launcher uses too (``launch.watch``).

Whatever happens, the result is kept: rank 0's gathered reports when the run completed,
else a failure naming the worker and the cause, carrying every step already logged.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from dlperf.kinds import Diagnostics, ParallelOutcome
from dlperf.kinds.parallel import ParallelOptions
from dlperf.launch.isolated import LaunchInterrupted, worker_env
from dlperf.launch.orphans import child_env
from dlperf.launch.watch import (
    ProgressReader,
    describe_exit,
    last_meaningful_line,
    oom_kills,
    watch,
)
from dlperf.parallel import analysis, status
from dlperf.spec import RunResult, RunSpec

DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_STALL_S = 300.0
DEFAULT_RDZV_TIMEOUT_S = 120.0
SHUTDOWN_S = 5  # torchrun's grace period between SIGTERM and SIGKILL of its workers


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def loopback_interface() -> str | None:
    """The name of the interface holding 127.0.0.1 ('lo' on Linux)."""
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addrs):
            return name
    return None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def torchrun_command(
    spec_path: Path,
    outdir: Path,
    *,
    nproc_per_node: int,
    nnodes: int = 1,
    rdzv_endpoint: str,
    rdzv_id: str,
    rdzv_backend: str = "c10d",
    rdzv_timeout_s: float = DEFAULT_RDZV_TIMEOUT_S,
    node_rank: int | None = None,
    local_addr: str | None = None,
    python: str | None = None,
    module: str = "dlperf.parallel.worker",
) -> list[str]:
    """The torchrun command line for one node of a run."""
    cmd = [python or sys.executable, "-m", "dlperf.launch.torchrun_main",
           f"--nnodes={nnodes}", f"--nproc-per-node={nproc_per_node}",
           f"--rdzv-backend={rdzv_backend}", f"--rdzv-endpoint={rdzv_endpoint}",
           f"--rdzv-id={rdzv_id}", "--max-restarts=0", "--monitor-interval=0.2",
           f"--shutdown-timeout={SHUTDOWN_S}"]
    if rdzv_backend == "c10d":
        cmd.append(f"--rdzv-conf=join_timeout={max(1, round(rdzv_timeout_s))}")
    if node_rank is not None:
        cmd.append(f"--node-rank={node_rank}")
    if local_addr:
        cmd.append(f"--local-addr={local_addr}")
    return [*cmd, "-m", module, str(spec_path), str(outdir)]


# ----------------------------------------------------------------------------- watching
def _dump_stacks(torchrun_pid: int, wait_s: float = 1.0) -> None:
    """Ask every worker (torchrun's children) for its threads' stacks before the kill: the
    worker registered faulthandler on SIGUSR1, and the stacks land in the kept log."""
    try:
        workers = psutil.Process(torchrun_pid).children()
    except psutil.Error:
        return
    for w in workers:
        try:
            w.send_signal(signal.SIGUSR1)
        except psutil.Error:
            pass
    if workers:
        time.sleep(wait_s)


class _Progress:
    """When did any rank last show a sign of life (a new phase or a logged step)?"""

    def __init__(self, outdir: Path):
        self.outdir = outdir
        self.last_change = time.time()
        self._seen: dict[str, tuple[float, int]] = {}

    def poll(self) -> None:
        for p in [*self.outdir.glob("status_rank*.bin"), *self.outdir.glob("progress_rank*.jsonl")]:
            try:
                st = p.stat()
            except OSError:
                continue
            sig = (st.st_mtime, st.st_size)
            if self._seen.get(p.name) != sig:
                self._seen[p.name] = sig
                self.last_change = time.time()
        # the phase board is written through a memory map: its mtime may lag, so read it
        for r, s in status.read_all(self.outdir).items():
            key = f"s{r}"
            if self._seen.get(key) != (s.since, 0):
                self._seen[key] = (s.since, 0)
                self.last_change = max(self.last_change, s.since)


def read_progress(outdir: Path) -> dict[int, dict[str, Any]]:
    """Every rank's logged records (a partial report each), for a run that did not finish."""
    out: dict[int, dict[str, Any]] = {}
    for p in sorted(outdir.glob("progress_rank*.jsonl")):
        rank = int(p.stem.removeprefix("progress_rank"))
        rep: dict[str, Any] = {"rank": rank, "steps": [], "evals": []}
        try:
            lines = p.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue  # the last line may be cut off by the kill
            kind = ev.pop("log", None)
            if kind == "start":
                rep.update(ev)
            elif kind == "step":
                rep["steps"].append(ev)
            elif kind == "eval":
                rep["evals"].append(ev)
        out[rank] = rep
    return out


_FAILURE_RE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


def _torchrun_failures(log: str) -> dict[int, int]:
    """{global rank: exit code} from torchrun's failure summary."""
    return {int(m.group(1)): int(m.group(3)) for m in _FAILURE_RE.finditer(log)}


def _errors(outdir: Path) -> dict[int, dict[str, Any]]:
    out = {}
    for p in outdir.glob("error_rank*.json"):
        try:
            e = json.loads(p.read_text())
            out[int(e["rank"])] = e
        except (OSError, ValueError, KeyError):
            continue
    return out


def _progress_text(rep: dict[str, Any] | None) -> str:
    if not rep or not rep.get("steps"):
        return "before its first step"
    s = rep["steps"][-1]
    return f"after {s['phase']} step {s['i']}"


def diagnose(outdir: Path, log: str, returncode: int, expected: list[int],
             partial: dict[int, dict[str, Any]], *, oom_killed: bool = False
             ) -> tuple[str, str]:
    """(reason, message) for a torchrun that exited without a result. A rank killed by
    SIGKILL is 'oom' only when ``oom_killed`` (the kernel counted an out-of-memory kill
    during the run) or its log says it ran out of memory."""
    if "RendezvousTimeoutError" in log or "RendezvousClosedError" in log:
        return "timeout", "rendezvous: not every node joined within the rendezvous timeout"
    if "RendezvousConnectionError" in log or "RendezvousError" in log:
        line = next((ln for ln in log.splitlines() if "Rendezvous" in ln and "Error" in ln), "")
        return "error", f"cannot reach the rendezvous: {line.strip()[:200]}"
    codes = _torchrun_failures(log)
    errors = _errors(outdir)
    # a worker killed by a signal (not torchrun's SIGTERM to the survivors) is the cause;
    # the collective errors of the others are its consequence
    killed = sorted(r for r, c in codes.items() if c < 0 and c != -signal.SIGTERM)
    if killed:
        r = killed[0]
        reason = "oom" if codes[r] == -signal.SIGKILL and (oom_killed or _oom_logged(log)) \
            else "crash"
        msg = f"rank {r}: {describe_exit(codes[r]).replace('worker ', '')} " \
              f"{_progress_text(partial.get(r))}"
        others = [f"rank {o}: {errors[o]['message']}" for o in sorted(errors) if o != r]
        return reason, msg + (f"; then {others[0]}" if others else "")
    if errors:
        r = min(errors, key=lambda k: errors[k].get("time", 0))
        e = errors[r]
        return e.get("reason", "error"), f"rank {r}: {e['message']} ({_progress_text(partial.get(r))})"
    if codes:
        r = min(codes)
        return "crash", f"rank {r}: exited with status {codes[r]} {_progress_text(partial.get(r))}"
    last = last_meaningful_line(log)
    return "crash", f"torchrun {describe_exit(returncode).replace('worker ', '')}" + (
        f": {last}" if last else "")


def _oom_logged(log: str) -> bool:
    return "out of memory" in log.lower()


# ----------------------------------------------------------------------------- running
def run_parallel(
    spec: RunSpec,
    *,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    stall_timeout_s: float | None = DEFAULT_STALL_S,
    memory_limit_bytes: int | None = None,
    nnodes: int | None = None,
    nproc_per_node: int | None = None,
    rdzv_endpoint: str | None = None,
    rdzv_id: str | None = None,
    rdzv_backend: str = "c10d",
    rdzv_timeout_s: float = DEFAULT_RDZV_TIMEOUT_S,
    node_rank: int | None = None,
    local_addr: str | None = None,
    comm_timeout_s: float | None = None,
    env: dict[str, str] | None = None,
    workdir: str | os.PathLike | None = None,
    on_event: Callable[[dict], None] | None = None,
) -> RunResult | None:
    """Run ``spec`` (kind 'parallel') on this node; never raises for what the workers do.

    Returns the run's result on the node that held rank 0, or a failure on any node whose
    part failed; None on a node whose workers finished cleanly while rank 0 lived on
    another node (that node has the result). KeyboardInterrupt kills the run and propagates.
    """
    o = spec.options
    nnodes = nnodes or o.nodes
    nproc = nproc_per_node or o.workers // nnodes
    if nproc * nnodes != o.workers:
        raise ValueError(f"{nnodes} nodes x {nproc} workers != {o.workers} workers")
    local = rdzv_endpoint is None
    endpoint = rdzv_endpoint or f"127.0.0.1:{free_port()}"
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    # the same id on every node by default, so that one command line works on all of them
    rid = rdzv_id or (f"{spec.run_id}-{uuid.uuid4().hex[:8]}" if local else spec.run_id)
    if local and local_addr is None:
        local_addr = "127.0.0.1"
    wenv = worker_env(spec)
    if comm_timeout_s is None:
        comm_timeout_s = min(300.0, timeout_s or 300.0)
    wenv["DLPERF_PARALLEL_COMM_TIMEOUT"] = f"{comm_timeout_s:g}"
    if _is_loopback(host) and (lo := loopback_interface()):
        # every transport on loopback: gloo and TensorPipe pick interfaces by hostname
        wenv.setdefault("GLOO_SOCKET_IFNAME", lo)
        wenv.setdefault("TP_SOCKET_IFNAME", lo)
    wenv.update(env or {})
    with tempfile.TemporaryDirectory(prefix="dlperf-par-") as tmp:
        outdir = Path(workdir) if workdir else Path(tmp)
        outdir.mkdir(parents=True, exist_ok=True)
        spec_path = outdir / "spec.json"
        spec_path.write_text(spec.model_dump_json())
        cmd = torchrun_command(spec_path, outdir, nproc_per_node=nproc, nnodes=nnodes,
                               rdzv_endpoint=endpoint, rdzv_id=rid, rdzv_backend=rdzv_backend,
                               rdzv_timeout_s=rdzv_timeout_s, node_rank=node_rank,
                               local_addr=local_addr)
        meta = {"cmd": cmd, "rdzv_endpoint": endpoint, "rdzv_id": rid, "nnodes": nnodes,
                "nproc_per_node": nproc, "comm_timeout_s": comm_timeout_s}
        return _watch(spec, o, cmd, wenv, outdir, meta, timeout_s=timeout_s,
                      stall_timeout_s=stall_timeout_s, memory_limit_bytes=memory_limit_bytes,
                      on_event=on_event)


def _watch(spec: RunSpec, o: ParallelOptions, cmd: list[str], env: dict[str, str], outdir: Path,
           meta: dict[str, Any], *, timeout_s: float | None, stall_timeout_s: float | None,
           memory_limit_bytes: int | None, on_event: Callable[[dict], None] | None
           ) -> RunResult | None:
    log_path = outdir / "torchrun.log"
    log = log_path.open("w+b")
    started, oom_before = time.time(), oom_kills()
    popen = subprocess.Popen(cmd, env=child_env(env), stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)  # its own group: killed as one
    progress = _Progress(outdir)
    forward = _Forward(outdir / "progress_rank0.jsonl", on_event)
    expected = list(range(o.workers)) if meta["nnodes"] == 1 else None

    def check() -> tuple[str, str] | None:
        progress.poll()
        forward()
        now = time.time()
        if timeout_s and now - started > timeout_s:
            return ("timeout", f"exceeded --timeout {timeout_s:g} s; " + status.culprits(
                status.read_all(outdir), expected, now))
        if stall_timeout_s and now - progress.last_change > stall_timeout_s and (
                boards := status.read_all(outdir)) and all(
                s.kind != "i" for s in boards.values()):
            # (start-up, importing torch on a busy machine, is left to --timeout)
            return ("timeout", f"no progress for {stall_timeout_s:g} s (hung); "
                    + status.culprits(boards, expected, now))
        return None

    interrupted = False
    try:
        out = watch(popen, memory_limit_bytes=memory_limit_bytes, check=check,
                    before_kill=lambda pids: _dump_stacks(popen.pid), what=" over all workers")
    except KeyboardInterrupt:
        interrupted, out = True, None
    finally:
        log.seek(0)
        text = log.read().decode(errors="replace")
        log.close()
    meta.update(started_at=started, finished_at=time.time(),
                peak_rss_tree_bytes=out.peak_rss if out else None,
                launcher_cpu_s=out.cpu_s if out else None)
    partial = read_progress(outdir)
    if interrupted:
        failure = ("interrupted", "interrupted by the user (Ctrl-C or SIGTERM) while running")
        raise LaunchInterrupted(_failed(spec, o, failure, partial, text, meta, outdir))
    gathered = outdir / "all.json"
    if out.failure is None and out.returncode == 0:
        if gathered.exists():
            reports = json.loads(gathered.read_text())["reports"]
            return analysis.assemble(spec, reports, launcher=meta)
        if any(outdir.glob("result_rank*.json")):
            return None  # this node's workers finished; rank 0 (elsewhere) has the result
    failure = out.failure or diagnose(outdir, text, out.returncode or 0,
                                      list(range(o.workers)), partial,
                                      oom_killed=_oom_rose(oom_before))
    return _failed(spec, o, failure, partial, text, meta, outdir)


def _oom_rose(before: int | None) -> bool:
    after = oom_kills()
    return before is not None and after is not None and after > before


def _failed(spec: RunSpec, o: ParallelOptions, failure: tuple[str, str],
            partial: dict[int, dict[str, Any]], log: str, meta: dict[str, Any],
            outdir: Path) -> RunResult:
    """A failure that keeps every step the ranks had logged."""
    reports = [partial[r] for r in sorted(partial)]
    extra: dict[str, Any] = {"strategy": o.strategy, "workers": o.workers, "launcher": meta}
    steps, warm = [], []
    if reports:
        phases = {s["phase"] for rep in reports for s in rep["steps"]}
        phase = next((p for p in ("timed", "train", "warmup") if p in phases), "timed")
        summary = analysis.summarize_ranks(spec, reports, phase)
        summary.pop("series", None)
        extra["partial"] = {**summary, "steps_logged": {str(rep["rank"]): len(rep["steps"])
                                                         for rep in reports}}
        r0 = partial.get(0, reports[0])
        steps = [s["t1"] - s["t0"] for s in r0["steps"] if s["phase"] in ("timed", "train")]
        warm = [s["t1"] - s["t0"] for s in r0["steps"] if s["phase"] == "warmup"]
        evals = next((rep["evals"] for rep in reports if rep.get("evals")), [])
        if evals:
            extra["partial"]["evals"] = evals
    stacks = {}
    for p in sorted(outdir.glob("stacks_rank*.txt")):
        try:
            text = p.read_text(errors="replace").strip()
        except OSError:
            continue
        if text:
            stacks[p.stem.removeprefix("stacks_rank")] = text[-4000:]
    # stacks: every thread of every worker, just before the kill
    return RunResult.failed(spec, failure[0], failure[1], step_times_s=steps,
                            warmup_times_s=warm, started_at=meta.get("started_at"),
                            finished_at=meta.get("finished_at"),
                            outcome=ParallelOutcome.model_validate(extra),
                            diagnostics=Diagnostics(log_tail=log[-6000:], stacks=stacks))


class _Forward:
    """Rank 0's new step and evaluation records, as the progress events of a single run."""

    def __init__(self, progress: Path, on_event: Callable[[dict], None] | None):
        self.reader, self.on_event = ProgressReader(progress), on_event

    def __call__(self) -> None:
        if self.on_event is None:
            return
        for ev in self.reader.read():
            if ev.get("log") == "step":
                phase = "step" if ev["phase"] in ("timed", "train") else ev["phase"]
                self.on_event({"phase": phase, "s": ev["t1"] - ev["t0"], "i": ev["i"]})
            elif ev.get("log") == "eval":
                self.on_event({"phase": "train", "text": f"accuracy {ev['accuracy']:.3f} "
                                                         f"after {ev['train_s']:.1f} s"})


def run_probe(nbytes: int, *, workers: int = 2, p2p_bytes: int | None = None,
              repeats: int = 10, threads: int = 1, timeout_s: float = 600.0) -> dict[str, Any]:
    """Measure loopback bandwidth and an isolated all-reduce of ``nbytes`` under torchrun
    (``dlperf.parallel.probe``); raises RuntimeError with the log's end if it fails."""
    from dlperf import backends
    from dlperf.launch.isolated import with_src_path

    env = dict(os.environ)
    env.update(backends.info("torch").thread_env(threads))
    env = with_src_path(env)
    if lo := loopback_interface():
        env.setdefault("GLOO_SOCKET_IFNAME", lo)
    with tempfile.TemporaryDirectory(prefix="dlperf-probe-") as tmp:
        d = Path(tmp)
        (d / "probe.cfg.json").write_text(json.dumps({
            "nbytes": int(nbytes), "p2p_bytes": int(p2p_bytes or nbytes), "repeats": repeats,
            "threads": threads}))
        cmd = torchrun_command(d / "probe.cfg.json", d, nproc_per_node=workers,
                               rdzv_endpoint=f"127.0.0.1:{free_port()}",
                               rdzv_id=f"probe-{uuid.uuid4().hex[:8]}", local_addr="127.0.0.1",
                               module="dlperf.parallel.probe")
        with (d / "probe.log").open("w+b") as log:
            popen = subprocess.Popen(cmd, env=child_env(env), stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
            out = watch(popen, timeout_s=timeout_s)
            if out.failure:
                raise RuntimeError(f"link probe: {out.failure[1]}")
            log.seek(0)
            text = log.read().decode(errors="replace")
        result = d / "probe.json"
        if popen.returncode != 0 or not result.exists():
            raise RuntimeError(f"link probe failed ({popen.returncode}): {text[-1500:]}")
        return json.loads(result.read_text())
