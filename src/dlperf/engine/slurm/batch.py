"""The folder one submission shares between the driver and its jobs (on a file system both
see), and what each file in it means::

    <root>/<name>/            one array job; <name> is also its Slurm job name
      job.sh                  what each task runs: python -m dlperf.engine.slurm.job <folder>
      task-<i>.json           task i's runs and runner settings (written by the driver)
      task-<i>.db             task i's own results store (seeded by the driver with the
                              stored peak rates, so a node type measured before reuses them)
      task-<i>.node<k>.db     node k's store, in a multi-node task (node 0 writes task-<i>.db)
      task-<i>.node.json      written by the job when it starts: its node, machine, environment
      task-<i>.done           written by the job when every run of it is stored
      task-<i>.out            Slurm's output of the task

The job never opens the driver's store: the driver imports ``task-<i>.db`` with the
ordinary import (``dlperf.core.store_import``), which keeps each result's machine.
"""

from __future__ import annotations

import json
import os
import shlex
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlperf.core.spec import RunSpec


def new_folder(root: Path, partition: str) -> Path:
    """A fresh folder for one array job (its name is the job's name too)."""
    name = f"dlperf-{time.strftime('%Y%m%d-%H%M%S')}-{partition or 'default'}-{uuid.uuid4().hex[:6]}"
    folder = root / name
    folder.mkdir(parents=True)
    return folder


def task_file(folder: Path, task: int, what: str) -> Path:
    """``what``: 'json', 'db', 'node.json', 'done' or 'out'."""
    return folder / f"task-{task}.{what}"


def node_store(folder: Path, task: int, node: int) -> Path:
    """Node ``node``'s results store of a task: node 0's is the task's own."""
    return task_file(folder, task, "db" if node == 0 else f"node{node}.db")


def node_stores(folder: Path, task: int) -> list[Path]:
    """The results stores of a task: its own and, of a multi-node task, each other node's
    (``task-<i>.node<k>.db``: rank 0 of a run may live on any node)."""
    return [node_store(folder, task, 0), *sorted(folder.glob(f"task-{task}.node*.db"))]


@dataclass(frozen=True)
class Task:
    specs: list[RunSpec]
    timeout_s: float
    memory_limit: int | None
    peak_size: int
    torchrun: dict[str, Any]


def write_task(folder: Path, index: int, task: Task) -> None:
    data = {"specs": [json.loads(s.model_dump_json()) for s in task.specs],
            "timeout_s": task.timeout_s, "memory_limit": task.memory_limit,
            "peak_size": task.peak_size, "torchrun": task.torchrun}
    task_file(folder, index, "json").write_text(json.dumps(data))


def read_task(folder: Path, index: int) -> Task:
    data = json.loads(task_file(folder, index, "json").read_text())
    return Task(specs=[RunSpec.model_validate(s) for s in data["specs"]],
                timeout_s=data["timeout_s"], memory_limit=data["memory_limit"],
                peak_size=data["peak_size"], torchrun=data.get("torchrun") or {})


def write_script(folder: Path, python: str, nodes: int = 1) -> Path:
    """The batch script: the job's own interpreter runs the task (``exec``: Slurm's
    signals, at the time limit or on ``scancel``, reach it directly). On ``nodes`` > 1,
    ``srun`` starts it once on each node of the allocation (a multi-node parallel run:
    each node's part joins one torchrun rendezvous, ``dlperf.engine.slurm.job``)."""
    script = folder / "job.sh"
    srun = (f"srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 "
            "--kill-on-bad-exit=1 " if nodes > 1 else "")
    script.write_text("#!/bin/bash\n# written by dlperf: one task of a sweep on this node\n"
                      f"exec {srun}{shlex.quote(python)} -m dlperf.engine.slurm.job "
                      f"{shlex.quote(str(folder))}\n")
    script.chmod(0o755)
    return script


def write_node(folder: Path, index: int, record: dict[str, Any]) -> None:
    _write_atomic(task_file(folder, index, "node.json"), json.dumps(record, default=str))


def read_node(folder: Path, index: int) -> dict[str, Any] | None:
    try:
        return json.loads(task_file(folder, index, "node.json").read_text())
    except (OSError, ValueError):
        return None


def mark_done(folder: Path, index: int) -> None:
    _write_atomic(task_file(folder, index, "done"), f"{time.time()}\n")


def is_done(folder: Path, index: int) -> bool:
    return task_file(folder, index, "done").exists()


def output_tail(folder: Path, index: int, lines: int = 15) -> str:
    try:
        text = task_file(folder, index, "out").read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _write_atomic(path: Path, text: str) -> None:
    # a reader on another node sees the whole file or none of it
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
