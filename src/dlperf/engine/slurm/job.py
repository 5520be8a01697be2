"""What one Slurm array task runs on its node: ``python -m dlperf.engine.slurm.job FOLDER``.

It measures its runs exactly as a local sweep does, through the same ``Runner``: a fresh
worker per run, the machine's lock (two tasks on one node measure one at a time), the
peak resolved first (reused from the rates the driver seeded, else measured here). The
results go to the task's own store in the shared folder, never to the driver's; the task
says where it ran before it starts and that it finished when every run is stored
(``dlperf.engine.slurm.batch``). Slurm's SIGTERM (a time limit, ``scancel``, preemption)
takes the Ctrl-C path: the run in flight is stored as interrupted, with its timed steps.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

from dlperf.core import environment
from dlperf.core.store import Store
from dlperf.engine.runner import Interrupted, Runner
from dlperf.engine.slurm import batch


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    folder = Path(argv[0])
    index = int(argv[1]) if len(argv) > 1 else int(os.environ["SLURM_ARRAY_TASK_ID"])
    signal.signal(signal.SIGTERM, _terminate)
    task = batch.read_task(folder, index)
    with Store(batch.task_file(folder, index, "db")) as store:
        record = environment.record()
        batch.write_node(folder, index, {
            "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
            "job_id": _job_id(), "machine_id": environment.machine_id(),
            "env_id": store.put_environment(record), "environment": record})
        runner = Runner(store, timeout_s=task.timeout_s, memory_limit=task.memory_limit,
                        peak_size=task.peak_size, torchrun=task.torchrun)
        try:
            runner.run_all(task.specs)
        except Interrupted as e:
            print(f"dlperf job: interrupted after {e.saved} results", file=sys.stderr)
            return 130
    batch.mark_done(folder, index)
    return 0


def _job_id() -> str:
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID", "")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
