"""The Slurm executor: the runs of a sweep sent to a cluster as array jobs, their results
merged into the store as the jobs end.

The steps, each resumable:

1. check the cluster (``commands.check``): one clear line and nothing submitted if Slurm
   is missing, its controller does not answer, or a partition is unknown;
2. decide what to submit from the store's record of jobs (``slurm_jobs``), per run and
   partition: nothing already submitted (queued, running or done) is submitted again;
   failed ones only with ``--retry-failed``, everything settled with ``--force``;
3. group the runs that share a node's set-up (kind, device and thread count: they share
   the peak their share is taken of, measured once per task) into array tasks, one array
   job per partition and allocation, rows recorded *before* sbatch is called (state
   SUBMITTING) and given their ids after, so that a driver killed in between finds its
   array job by name instead of submitting it twice;
4. watch: every ``poll_s`` seconds each array's task states; a task that ended has its
   results imported from its own store (with their machines) and each run it left
   without a result stored as a failure with Slurm's state and reason.

Stopped (Ctrl-C) the driver leaves the jobs to Slurm; started again it goes on watching
them.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dlperf.core.errors import UsageError
from dlperf.core.payload import Diagnostics
from dlperf.core.spec import RunResult, RunSpec
from dlperf.core.store import Store
from dlperf.core.store_import import import_file
from dlperf.core.store_jobs import SUBMITTING, ClusterJob
from dlperf.engine.runner import Interrupted, Listener
from dlperf.engine.slurm import batch, commands
from dlperf.engine.slurm.commands import RUNNING, SlurmError, TaskState
from dlperf.engine.slurm.settings import SlurmSettings
from dlperf.kinds import KINDS

#: Slurm's end state -> the failure reason stored with the run
REASONS = {"TIMEOUT": "timeout", "DEADLINE": "timeout", "CANCELLED": "interrupted",
           "PREEMPTED": "interrupted", "OUT_OF_MEMORY": "oom", "FAILED": "crash",
           "NODE_FAIL": "crash", "BOOT_FAIL": "error", "REVOKED": "error", "LOST": "error"}


def default_root(store_path: Path) -> Path:
    """Where jobs write their results when no folder is given: beside the store."""
    return store_path.with_name(store_path.name + ".slurm")


def partitions_of(settings: SlurmSettings) -> list[str]:
    """Where the runs go, each a node type: a partition ('' for the cluster's default),
    with the constraint when there is one ('cpu:skylake'), since a constraint picks
    another node type in the same partition. The store's jobs are keyed by it."""
    suffix = f":{settings.constraint}" if settings.constraint else ""
    return [p + suffix for p in settings.partitions or [""]]


def pending(store: Store, specs: Sequence[RunSpec], settings: SlurmSettings, *,
            force: bool = False, retry_failed: bool = False) -> list[tuple[str, RunSpec]]:
    """The (partition, run) pairs to submit: those the store records no job of; those
    whose job failed, with ``retry_failed``; every settled one with ``force``. A job
    still queued or running is never submitted again."""
    recorded = {(j.run_id, j.partition): j for j in store.jobs(s.run_id for s in specs)}
    out = []
    for p in partitions_of(settings):
        for s in specs:
            j = recorded.get((s.run_id, p))
            if j is None or (j.settled_at is not None and (force or (retry_failed and j.failed))):
                out.append((p, s))
    return out


def counts(jobs: Sequence[ClusterJob]) -> dict[str, int]:
    """Queued, running, done and failed, as ``dlperf status`` and the progress line say."""
    c: Counter[str] = Counter()
    for j in jobs:
        if j.settled_at is not None:
            c["failed" if j.failed else "done"] += 1
        elif j.state in RUNNING:
            c["running"] += 1
        else:
            c["queued"] += 1
    return {k: c[k] for k in ("queued", "running", "done", "failed")}


@dataclass
class SlurmDriver:
    store: Store
    settings: SlurmSettings
    timeout_s: float = 1800.0
    memory_limit: int | None = None
    peak_size: int = 2048
    torchrun: dict[str, Any] = field(default_factory=dict)
    listener: Listener = field(default_factory=Listener)

    @property
    def root(self) -> Path:
        return Path(self.settings.folder) if self.settings.folder else default_root(self.store.path)

    def run(self, specs: Sequence[RunSpec], *, force: bool = False,
            retry_failed: bool = False) -> list[RunResult]:
        """Submit what is pending, then watch every job of ``specs`` until all have ended;
        the results stored meanwhile (failures included)."""
        commands.check(self.settings)
        self._adopt(specs)
        todo = pending(self.store, specs, self.settings, force=force, retry_failed=retry_failed)
        by_partition: dict[str, list[RunSpec]] = defaultdict(list)
        for p, s in todo:
            by_partition[p].append(s)
        for p, ss in by_partition.items():
            self._submit(p, ss)
        try:
            return self._watch(specs)
        except KeyboardInterrupt:
            raise Interrupted(0) from None

    # ------------------------------------------------------------------ submit
    def _groups(self, specs: Sequence[RunSpec]) -> list[list[RunSpec]]:
        groups: dict[tuple, list[RunSpec]] = defaultdict(list)
        for s in specs:
            groups[(s.kind, s.device, s.threads)].append(s)
        return list(groups.values())

    def _allocation(self, group: Sequence[RunSpec]) -> tuple[int, int]:
        """CPUs and GPUs per task: the settings', else what the group's runs use."""
        cpus = self.settings.cpus_per_task or max(_cpus(s) for s in group)
        gpus = self.settings.gpus if self.settings.gpus is not None else int(
            any(s.device == "gpu" for s in group))
        return cpus, gpus

    def _submit(self, partition: str, specs: Sequence[RunSpec]) -> None:
        arrays: dict[tuple[int, int], list[list[RunSpec]]] = defaultdict(list)
        for g in self._groups(specs):
            arrays[self._allocation(g)].append(g)
        for (cpus, gpus), groups in arrays.items():
            self._submit_array(partition, groups, cpus, gpus)

    def _submit_array(self, partition: str, groups: list[list[RunSpec]], cpus: int,
                      gpus: int) -> None:
        try:
            folder = batch.new_folder(self.root, partition.partition(":")[0])
        except OSError as e:
            raise UsageError(f"--slurm-dir: cannot write job folders in {self.root}: {e}") from None
        seed = self._seed_db(folder)
        for i, g in enumerate(groups):
            batch.write_task(folder, i, batch.Task(list(g), self.timeout_s, self.memory_limit,
                                                   self.peak_size, self.torchrun))
            if seed is not None:
                shutil.copyfile(seed, batch.task_file(folder, i, "db"))
        script = batch.write_script(folder, self.settings.python or sys.executable,
                                    self.settings.nodes)
        now = time.time()
        rows = [ClusterJob(s.run_id, partition, "", str(folder), i, s.label(), SUBMITTING,
                           submitted_at=now) for i, g in enumerate(groups) for s in g]
        self.store.put_jobs(rows)  # before sbatch: a driver killed in between finds them
        try:
            array = commands.submit(script, name=folder.name, tasks=len(groups),
                                    partition=partition.partition(":")[0], settings=self.settings, cpus=cpus,
                                    gpus=gpus, output=str(folder / "task-%a.out"),
                                    nodes=self.settings.nodes)
        except UsageError:  # refused: nothing was submitted (interrupted, it may have been)
            self.store.forget_jobs(rows)
            raise
        self.store.put_jobs([replace(r, job_id=f"{array}_{r.task}", state="PENDING")
                             for r in rows])

    def _seed_db(self, folder: Path) -> Path | None:
        """A store holding every stored peak rate (of any machine), copied as each task's
        own store: a node of a type measured before reuses its rates, as a local sweep
        does, instead of timing the peak kernels again in every task."""
        peaks = self.store.results(kind="peak", latest=False)
        if not peaks:
            return None
        envs = {r.env_id: r.machine_id for r in peaks if r.env_id}
        seed = folder / "seed.db"
        with Store(seed) as s:
            s.add_imported(
                [(e, m, json.dumps(self.store.environment(e) or {}, default=str), time.time())
                 for e, m in envs.items()],
                [(r, r.finished_at or r.started_at or 0.0) for r in peaks if r.env_id])
        return seed

    def _adopt(self, specs: Sequence[RunSpec]) -> None:
        """Rows left SUBMITTING by a driver killed around sbatch: the array job Slurm
        has under the folder's name is theirs; with none, they are forgotten (and
        submitted now, as never submitted)."""
        stale = [j for j in self.store.jobs(s.run_id for s in specs) if j.state == SUBMITTING]
        for folder, rows in _by(stale, lambda j: j.folder).items():
            try:
                array = commands.find_by_name(Path(folder).name)
            except SlurmError as e:
                raise UsageError(f"--executor slurm: squeue failed: {e}") from None
            if array is None:
                self.store.forget_jobs(rows)
            else:
                self.store.put_jobs([replace(r, job_id=f"{array}_{r.task}", state="PENDING")
                                     for r in rows])

    # ------------------------------------------------------------------ watch
    def _watch(self, specs: Sequence[RunSpec]) -> list[RunResult]:
        wanted = {s.run_id: s for s in specs}
        partitions = set(partitions_of(self.settings))
        results: list[RunResult] = []
        while True:
            jobs = [j for j in self.store.jobs(wanted) if j.partition in partitions]
            self.listener.cluster(counts(jobs))
            active = [j for j in jobs if j.settled_at is None]
            if not active:
                return results
            for (folder, array), rows in _by(active, lambda j: (j.folder, j.array_id)).items():
                try:
                    states = commands.states(array)
                except SlurmError:
                    continue  # the controller is busy or restarting: ask again next time
                for task, trows in _by(rows, lambda j: j.task).items():
                    st = states.get(task)
                    if st is None:  # neither the controller nor accounting knows it now
                        st = (TaskState("COMPLETED") if batch.is_done(Path(folder), task) else
                              TaskState("LOST", "Slurm no longer knows the job and it left no "
                                        "result (cancelled, timed out or its node failed)"))
                    if st.ended:
                        results += self._settle(Path(folder), task, trows, st, wanted)
                    elif st.state != trows[0].state:
                        self.store.update_jobs(trows, state=st.state, reason=st.reason,
                                               node=st.node)
            time.sleep(self.settings.poll_s)

    def _settle(self, folder: Path, task: int, rows: list[ClusterJob], st: TaskState,
                wanted: dict[str, RunSpec]) -> list[RunResult]:
        """A task that ended: its results imported, each run it left without one stored
        as a failure with Slurm's state and reason; the jobs' rows settled."""
        found = self._import(folder, task)
        node = batch.read_node(folder, task)
        out = []
        for j in rows:
            r = found.get(j.run_id)
            if r is not None and not (r.failure and r.failure.reason == "interrupted"):
                out.append(r)
                self.store.update_jobs([j], state="COMPLETED", node=st.node or _node(node),
                                       reason=None if r.ok else f"{r.failure.reason}: "
                                       f"{r.failure.message[:200]}", settled=True)
                self.listener.done(r)
                continue
            state = st.state if st.state != "COMPLETED" else "FAILED"
            why = _why(j, st, state, node)
            failure = self._store_failure(wanted[j.run_id], state, why, node, folder, task)
            self.store.update_jobs([j], state=state, reason=why, node=st.node or _node(node),
                                   settled=True)
            if failure is not None:
                out.append(failure)
                self.listener.done(failure)
        return out

    def _import(self, folder: Path, task: int) -> dict[str, RunResult]:
        """The task's results merged into the store (machines kept); its newest result
        per run."""
        found: dict[str, RunResult] = {}
        for db in batch.node_stores(folder, task):  # a multi-node task's: each node's
            if not db.exists():
                continue
            try:
                import_file(self.store, db)
                with Store(db) as t:
                    found.update({r.spec.run_id: r for r in t.results(kind=None)
                                  if r.spec.kind != "peak"})
            except UsageError:
                continue  # a store the job left half-written: its runs become failures
        return found

    def _store_failure(self, spec: RunSpec, state: str, why: str, node: dict | None,
                       folder: Path, task: int) -> RunResult | None:
        """The run's failure, stored with the node's machine. A job that never started
        says no machine: its failure is kept in the job's row alone, where ``dlperf
        status`` shows it (stored with this machine, it would count as measured here)."""
        if node is None:
            return None
        now = time.time()
        result = RunResult.failed(
            spec, REASONS.get(state, "error"), why, machine_id=node["machine_id"],
            env_id=node["env_id"], finished_at=now,
            diagnostics=Diagnostics(log_tail=batch.output_tail(folder, task) or None,
                                    launcher={"slurm_job": node.get("job_id"),
                                              "node": node.get("node"), "state": state}))
        self.store.add_imported([(node["env_id"], node["machine_id"],
                                  json.dumps(node["environment"], default=str), now)],
                                [(result, now)])
        return result


def _cpus(spec: RunSpec) -> int:
    of = KINDS[spec.kind].share_threads
    return (of(spec) if of is not None else None) or spec.threads


def _node(node: dict | None) -> str | None:
    return node.get("node") if node else None


def _why(job: ClusterJob, st: TaskState, state: str, node: dict | None) -> str:
    where = st.node or _node(node)
    text = f"Slurm job {job.job_id} {state}"
    if st.reason:
        text += f" ({st.reason})"
    if st.state == "COMPLETED":
        text += ": the job ended without storing this run (see its output)"
    return text + (f" on {where}" if where else " before it started")


def _by(items, key) -> dict:
    out: dict = defaultdict(list)
    for x in items:
        out[key(x)].append(x)
    return out


__all__ = ["SlurmDriver", "counts", "default_root", "pending"]


def live_states(jobs: Sequence[ClusterJob]) -> list[ClusterJob]:
    """``jobs`` with the open ones' state as Slurm says it now (unchanged where Slurm is
    not reachable); for ``dlperf status``, which stores nothing."""
    states: dict[str, dict[int, TaskState]] = {}
    out = []
    for j in jobs:
        if j.settled_at is None and j.job_id:
            if j.array_id not in states:
                try:
                    states[j.array_id] = commands.states(j.array_id)
                except SlurmError:
                    states[j.array_id] = {}
            st = states[j.array_id].get(j.task)
            if st is not None:
                j = replace(j, state=st.state, reason=st.reason, node=st.node or j.node)
        out.append(j)
    return out
