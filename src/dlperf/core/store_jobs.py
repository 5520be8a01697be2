"""The store's record of the cluster jobs it sent runs to (``slurm_jobs``): one row per run
and partition, with the Slurm job id that measures it, where the job writes its results,
and what became of it. It is the cluster's form of a claim: a driver started again reads
it and submits nothing twice, and ``--retry-failed`` resubmits what it records as failed.

The table is created by the store's own schema (``CREATE TABLE IF NOT EXISTS``), so a
store written by an earlier dlperf gains it when it is opened and keeps its schema
version: no row of it changes, and an earlier dlperf still opens the store.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3

SCHEMA = """
CREATE TABLE IF NOT EXISTS slurm_jobs (
    run_id TEXT NOT NULL,
    partition TEXT NOT NULL,
    job_id TEXT NOT NULL,
    folder TEXT NOT NULL,
    task INTEGER NOT NULL,
    label TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT,
    node TEXT,
    submitted_at REAL NOT NULL,
    settled_at REAL,
    PRIMARY KEY (run_id, partition)
);
"""

#: a row written before sbatch answered: its job id is not known yet
SUBMITTING = "SUBMITTING"


@dataclass(frozen=True)
class ClusterJob:
    """One run sent to the cluster. ``job_id`` is Slurm's '<array id>_<task>' (empty while
    submitting); ``partition`` is '' for the cluster's default; ``settled_at`` is when its
    results, or its failure, were stored (None while the job is queued or running)."""

    run_id: str
    partition: str
    job_id: str
    folder: str
    task: int
    label: str
    state: str
    reason: str | None = None
    node: str | None = None
    submitted_at: float = 0.0
    settled_at: float | None = None

    @property
    def array_id(self) -> str:
        return self.job_id.partition("_")[0]

    @property
    def failed(self) -> bool:
        # a Slurm failure, or a job that ended well with its run failed in it
        return self.settled_at is not None and (self.state != "COMPLETED" or bool(self.reason))


_COLUMNS = [f.name for f in fields(ClusterJob)]


class JobsTable:
    """The store's methods over ``slurm_jobs`` (mixed into ``Store``)."""

    if TYPE_CHECKING:  # Store's
        _db: sqlite3.Connection

        def _tx(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def put_jobs(self, jobs: Iterable[ClusterJob]) -> None:
        """Record runs sent to the cluster, replacing an earlier job of the same run and
        partition (a resubmission)."""
        with self._tx() as db:
            db.executemany(f"INSERT OR REPLACE INTO slurm_jobs({','.join(_COLUMNS)}) VALUES "
                           f"({','.join('?' * len(_COLUMNS))})",
                           [tuple(getattr(j, c) for c in _COLUMNS) for j in jobs])

    def jobs(self, run_ids: Iterable[str] | None = None) -> list[ClusterJob]:
        """The recorded jobs (of these runs), oldest first."""
        sql = f"SELECT {','.join(_COLUMNS)} FROM slurm_jobs"
        rows = self._db.execute(sql + " ORDER BY submitted_at, job_id").fetchall()
        wanted = None if run_ids is None else set(run_ids)
        return [ClusterJob(*r) for r in rows if wanted is None or r[0] in wanted]

    def update_jobs(self, jobs: Iterable[ClusterJob], *, state: str, reason: str | None = None,
                    node: str | None = None, settled: bool = False) -> None:
        """Set the state (and reason, node) of these jobs; ``settled``: their results or
        failures are stored now."""
        now = time.time() if settled else None
        with self._tx() as db:
            for j in jobs:
                db.execute("UPDATE slurm_jobs SET state=?, reason=?, node=COALESCE(?, node),"
                           " settled_at=? WHERE run_id=? AND partition=?",
                           (state, reason, node, now, j.run_id, j.partition))

    def forget_jobs(self, jobs: Iterable[ClusterJob]) -> None:
        """Drop rows of jobs that were never submitted (sbatch refused them, or a driver
        killed before sbatch left them with no array job under their name)."""
        with self._tx() as db:
            db.executemany("DELETE FROM slurm_jobs WHERE run_id=? AND partition=? AND state=?",
                           [(j.run_id, j.partition, SUBMITTING) for j in jobs])
