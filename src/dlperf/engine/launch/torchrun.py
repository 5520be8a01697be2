"""Launch a parallel run under torchrun and turn whatever happens into one RunResult.

The command is ``python -m dlperf.engine.launch.torchrun_main``: ``torch.distributed.run`` run by
the current interpreter after arming the parent-death signal (``launch.orphans``), with
torchrun's own c10d rendezvous: on one machine an endpoint on 127.0.0.1 at a free
port; across machines the user's ``--rdzv-endpoint`` and ``--nnodes``. torchrun starts
the workers (``dlperf.kinds.parallel.run``), watches them and, when one fails, stops the
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

from dlperf.core.orphans import child_env
from dlperf.core.spec import RunResult, RunSpec
from dlperf.engine.launch.isolated import LaunchInterrupted, over_limit, worker_env
from dlperf.engine.launch.scratch import scratch_dir, temp_env
from dlperf.engine.launch.torchrun_failure import (
    diagnose,
    failed_result,
    oom_rose,
    read_progress,
)
from dlperf.engine.launch.watch import ProgressReader, oom_kills, watch
from dlperf.kinds.parallel import results, status
from dlperf.kinds.parallel.options import ParallelOptions

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
    module: str = "dlperf.kinds.parallel.run",
) -> list[str]:
    """The torchrun command line for one node of a run."""
    cmd = [python or sys.executable, "-m", "dlperf.engine.launch.torchrun_main",
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
    # dedicated parameter servers are extra ranks of the same job (one node): torchrun
    # watches them with the workers, and they die with it
    nproc = nproc_per_node or o.processes // nnodes
    if nproc * nnodes != o.processes:
        raise ValueError(f"{nnodes} nodes x {nproc} processes != {o.processes} processes")
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
    with scratch_dir("dlperf-par-") as tmp:
        wenv.update(temp_env(tmp))
        outdir = Path(workdir) if workdir else tmp
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
    expected = list(range(o.processes)) if meta["nnodes"] == 1 else None

    def check() -> tuple[str, str] | None:
        progress.poll()
        forward()
        now = time.time()
        if timeout_s and now - started > timeout_s:
            return ("timeout", f"exceeded --timeout {timeout_s:g} s; " + status.culprits(
                status.read_all(outdir), expected, now))
        if stall_timeout_s and now - progress.last_change > stall_timeout_s and (
                boards := status.read_all(outdir)) and all(
                s.kind != "starting" for s in boards.values()):
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
        raise LaunchInterrupted(failed_result(spec, o, failure, partial, text, meta, outdir))
    gathered = outdir / "all.json"
    if out.failure is None and out.returncode == 0:
        if gathered.exists():
            reports = json.loads(gathered.read_text())["reports"]
            # a rank whose own peak passed the limit between the watch's reads (the watch
            # limits the workers' sum; one rank's peak is a lower bound of it)
            return over_limit(results.assemble(spec, reports, launcher=meta),
                              memory_limit_bytes)
        if any(outdir.glob("result_rank*.json")):
            return None  # this node's workers finished; rank 0 (elsewhere) has the result
    failure = out.failure or diagnose(outdir, text, out.returncode or 0,
                                      list(range(o.processes)), partial,
                                      oom_killed=oom_rose(oom_before))
    return failed_result(spec, o, failure, partial, text, meta, outdir)


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
    (``dlperf.kinds.parallel.probe``); raises RuntimeError with the log's end if it fails."""
    from dlperf.core import framework_table
    from dlperf.engine.launch.isolated import with_src_path

    env = dict(os.environ)
    env.update(framework_table.info("torch").thread_env(threads))
    env = with_src_path(env)
    if lo := loopback_interface():
        env.setdefault("GLOO_SOCKET_IFNAME", lo)
    with tempfile.TemporaryDirectory(prefix="dlperf-probe-") as tmp:
        d = Path(tmp)
        env.update(temp_env(d))
        (d / "probe.cfg.json").write_text(json.dumps({
            "nbytes": int(nbytes), "p2p_bytes": int(p2p_bytes or nbytes), "repeats": repeats,
            "threads": threads}))
        cmd = torchrun_command(d / "probe.cfg.json", d, nproc_per_node=workers,
                               rdzv_endpoint=f"127.0.0.1:{free_port()}",
                               rdzv_id=f"probe-{uuid.uuid4().hex[:8]}", local_addr="127.0.0.1",
                               module="dlperf.kinds.parallel.probe")
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
