"""What one Slurm array task runs on its node: ``python -m dlperf.engine.slurm.job FOLDER``.

It measures its runs exactly as a local sweep does, through the same ``Runner``: a fresh
worker per run, the machine's lock (two tasks on one node measure one at a time), the
peak resolved first (reused from the rates the driver seeded, else measured here). The
results go to the task's own store in the shared folder, never to the driver's; the task
says where it ran before it starts and that it finished when every run is stored
(``dlperf.engine.slurm.batch``). Slurm's SIGTERM (a time limit, ``scancel``, preemption)
takes the Ctrl-C path: the run in flight is stored as interrupted, with its timed steps.

A multi-node task (``dlperf parallel --executor slurm --nodes N``) runs once on each node
of its allocation (``srun``): every node's part of a run joins one torchrun rendezvous on
the first node, node 0 writes the task's record and end marker, and each node stores
what it measured in a store of its own (``task-<i>.node<k>.db``): the result lives with
whichever node held rank 0.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
from pathlib import Path

from dlperf.core import environment
from dlperf.core.store import Store
from dlperf.engine.runner import Interrupted, Runner
from dlperf.engine.slurm import batch, commands


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    folder = Path(argv[0])
    index = int(argv[1]) if len(argv) > 1 else int(os.environ["SLURM_ARRAY_TASK_ID"])
    signal.signal(signal.SIGTERM, _terminate)
    task = batch.read_task(folder, index)
    nodes, node = int(os.environ.get("SLURM_NNODES") or 1), int(
        os.environ.get("SLURM_NODEID") or 0)
    first = node == 0  # the node that speaks for the task: its record, its end marker
    db = batch.node_store(folder, index, node)
    seed = folder / "seed.db"  # the driver's stored peak rates (not node 0's live store)
    if not first and seed.exists():
        shutil.copyfile(seed, db)
    hosts = _hostnames()
    torchrun = dict(task.torchrun)
    if nodes > 1:  # one torchrun rendezvous over the allocation's nodes
        torchrun.update(nnodes=nodes, node_rank=node, rdzv_endpoint=_rendezvous(hosts))
    with Store(db) as store:
        record = environment.record()
        if first:
            batch.write_node(folder, index, {
                "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
                "nodes": hosts, "job_id": _job_id(),
                "machine_id": environment.machine_id(),
                "env_id": store.put_environment(record), "environment": record})
        runner = Runner(store, timeout_s=task.timeout_s, memory_limit=task.memory_limit,
                        peak_size=task.peak_size, torchrun=torchrun)
        try:
            runner.run_all(task.specs)
        except Interrupted as e:
            print(f"dlperf job: interrupted after {e.saved} results", file=sys.stderr)
            return 130
    if first:
        batch.mark_done(folder, index)
    return 0


def _hostnames() -> list[str]:
    """The allocation's nodes, in Slurm's order."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    if not nodelist:
        return []
    try:
        return commands.run("scontrol", "show", "hostnames", nodelist).split() or [nodelist]
    except commands.SlurmError:
        return [nodelist]


def _rendezvous(hosts: list[str]) -> str:
    """HOST:PORT of the run's rendezvous: the first node's address (its NodeAddr, which a
    test cluster sets to 127.0.0.1 for nodes sharing one machine) and a port every node
    derives alike from the job id."""
    first = (hosts or [socket.gethostname()])[0]
    try:
        shown = commands.run("scontrol", "show", "node", first)
    except commands.SlurmError:
        shown = ""
    addr = next((w.split("=", 1)[1] for w in shown.split() if w.startswith("NodeAddr=")),
                first)
    job = int(os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID") or 0)
    task = int(os.environ.get("SLURM_ARRAY_TASK_ID") or 0)
    return f"{addr}:{29500 + (job * 16 + task) % 20000}"


def _job_id() -> str:
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID", "")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
