"""The Slurm commands dlperf runs, each with a short timeout: ``scontrol ping`` and
``sinfo`` to check the cluster before anything is submitted, ``sbatch --parsable`` to
submit an array job, ``scontrol show job`` (then ``sacct``, where the cluster keeps
accounting) for the state of each task.

Plain commands, not submitit: they are what every Slurm user types, they need no
dependency on the nodes, and an array job is one ``sbatch`` line. A problem found before
anything is submitted (no Slurm on the PATH, a controller that does not answer, an unknown
partition, a submission Slurm refuses) is one ``UsageError`` line.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dlperf.core.errors import UsageError
from dlperf.engine.slurm.settings import SlurmSettings

#: seconds a command may take: a controller that does not answer within it is down
TIMEOUT_S = 15.0

#: Slurm's job states: still to run, running, or ended (and how)
QUEUED = frozenset({"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD",
                    "CONFIGURING", "SUSPENDED", "STOPPED", "SPECIAL_EXIT", "RESIZING"})
RUNNING = frozenset({"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT"})
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL",
                   "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED"})


class SlurmError(Exception):
    """A Slurm command failed or did not answer (while polling: try again later)."""


@dataclass(frozen=True)
class TaskState:
    state: str  # Slurm's JobState: PENDING, RUNNING, COMPLETED, TIMEOUT, ...
    reason: str | None = None  # Slurm's Reason, when it says one (TimeLimit, ...)
    node: str | None = None
    exit_code: str | None = None

    @property
    def ended(self) -> bool:
        return self.state in ENDED


def run(*argv: str, timeout_s: float = TIMEOUT_S) -> str:
    """Run a Slurm command; its stdout, or SlurmError with its first line of complaint."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} is not on the PATH") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"'{' '.join(argv[:2])}' did not answer within {timeout_s:.0f} s "
                         "(is the Slurm controller up?)") from None
    if r.returncode != 0:
        # the words, not the banners ('** RESTORE SLURMCTLD DAEMON TO SERVICE **')
        lines = [ln.strip() for ln in (r.stderr + "\n" + r.stdout).splitlines()
                 if ln.strip() and not ln.strip().startswith("*")]
        # sbatch repeats itself: 'error: invalid partition' then 'submission failed: ...'
        raise SlurmError(lines[-1] if lines else f"{argv[0]} exited with {r.returncode}")
    return r.stdout


def check(settings: SlurmSettings) -> list[str]:
    """Before anything is submitted: Slurm's commands on the PATH, a controller that
    answers, and each partition asked for known to it. Returns the cluster's partitions;
    a problem is one UsageError line."""
    for tool in ("sbatch", "scontrol", "sinfo", "squeue"):
        if shutil.which(tool) is None:
            raise UsageError(f"--executor slurm: {tool} is not on the PATH (install Slurm's "
                             "client commands, or load the cluster's Slurm module)")
    try:
        ping = run("scontrol", "ping")
    except SlurmError as e:
        raise UsageError(f"--executor slurm: the Slurm controller does not answer ({e})") from None
    if "UP" not in ping:
        raise UsageError("--executor slurm: the Slurm controller does not answer ("
                         f"scontrol ping: {' '.join(ping.split())})")
    try:
        known = sorted({p.strip().rstrip("*") for p in run("sinfo", "-h", "-o", "%P").split()})
    except SlurmError as e:
        raise UsageError(f"--executor slurm: sinfo failed: {e}") from None
    for p in settings.partitions:
        if p not in known:
            raise UsageError(f"--executor slurm: unknown Slurm partition '{p}' (this cluster "
                             f"has: {', '.join(known) or 'none'})")
    return known


def submit(script: Path, *, name: str, tasks: int, partition: str, settings: SlurmSettings,
           cpus: int, gpus: int, output: str, nodes: int = 1) -> str:
    """Submit ``script`` as an array job of ``tasks`` tasks (0 .. tasks-1); its id."""
    argv = ["sbatch", "--parsable", f"--job-name={name}", f"--array=0-{tasks - 1}",
            f"--output={output}", f"--cpus-per-task={cpus}", f"--nodes={nodes}",
            "--ntasks-per-node=1"]
    if partition:
        argv.append(f"--partition={partition}")
    for flag, value in (("--constraint", settings.constraint),
                        ("--nodelist", settings.nodelist), ("--time", settings.time),
                        ("--account", settings.account)):
        if value:
            argv.append(f"{flag}={value}")
    if gpus:
        argv.append(f"--gpus-per-node={gpus}")
    if settings.exclusive:
        argv.append("--exclusive")
    try:
        out = run(*argv, str(script))
    except SlurmError as e:
        raise UsageError(f"--executor slurm: sbatch refused the job: {e}") from None
    job = out.strip().split(";")[0]  # --parsable: 'id' or 'id;cluster'
    if not job.isdigit():
        raise UsageError(f"--executor slurm: sbatch printed no job id ({out.strip()[:80]})")
    return job


def find_by_name(name: str) -> str | None:
    """The id of a queued or running array job of this name (a submission whose id the
    driver did not get to store), or None."""
    out = run("squeue", "-h", f"--name={name}", "-o", "%F")
    ids = sorted({x.strip() for x in out.split() if x.strip().isdigit()})
    return ids[0] if ids else None


def states(array_id: str) -> dict[int, TaskState]:
    """Each task's state (by task index) of an array job, from the controller while it
    keeps the job (``MinJobAge``), else from accounting; tasks neither knows are left out
    (the job's own record in its folder then says what happened)."""
    try:
        found = _from_scontrol(run("scontrol", "-o", "show", "job", array_id))
    except SlurmError as e:
        if "Invalid job id" not in str(e):
            raise
        found = {}
    if not found and shutil.which("sacct"):
        try:
            found = _from_sacct(run("sacct", "-n", "-P", "-X", "-j", array_id, "-o",
                                    "JobID,State,NodeList,ExitCode,Reason"))
        except SlurmError:
            pass  # no accounting storage on this cluster
    return found


def _fields(line: str) -> dict[str, str]:
    return dict(m.groups() for m in re.finditer(r"(\w[\w/:]*)=(\S*)", line))


def _task_indices(text: str) -> list[int]:
    """'3' -> [3]; '0-5%2' -> [0..5]; '1,3,5-6' -> [1, 3, 5, 6] (a pending array's rest)."""
    out: list[int] = []
    for part in text.split("%")[0].split(","):
        a, _, b = part.partition("-")
        if a.isdigit():
            out.extend(range(int(a), int(b) + 1) if b.isdigit() else [int(a)])
    return out


def _from_scontrol(text: str) -> dict[int, TaskState]:
    found: dict[int, TaskState] = {}
    for line in text.splitlines():
        f = _fields(line)
        if "JobState" not in f or "ArrayTaskId" not in f:
            continue
        st = TaskState(state=f["JobState"], reason=_none(f.get("Reason")),
                       node=_none(f.get("NodeList")), exit_code=_none(f.get("ExitCode")))
        for i in _task_indices(f["ArrayTaskId"]):
            found[i] = st
    return found


def _from_sacct(text: str) -> dict[int, TaskState]:
    found: dict[int, TaskState] = {}
    for line in text.splitlines():
        job, state, node, code, reason = (line.split("|") + [""] * 5)[:5]
        _, _, task = job.partition("_")
        task = task.strip("[]")
        # 'CANCELLED by 0' -> CANCELLED
        st = TaskState(state=state.split()[0] if state else "UNKNOWN", reason=_none(reason),
                       node=_none(node), exit_code=_none(code))
        for i in _task_indices(task):
            found[i] = st
    return found


def _none(v: str | None) -> str | None:
    return None if v in (None, "", "None", "(null)", "None assigned") else v
