"""The results store: one SQLite file holding every RunResult, failures included, and the
environment each ran in.

Rows are never updated or deleted (a schema upgrade, ``dlperf.core.migrate``, rewrites ids
only): re-measuring (``--force``) adds a row, and readers take the newest row of each run
on each machine. A run's identity is its ``run_id`` (configuration, precision and
measurement settings) together with the ``machine_id`` it ran on. Every result is committed as soon as it arrives, in WAL mode
with a generous busy timeout, so a sweep killed at any point loses nothing it reported and
two sweeps can write to one store at once.
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dlperf.core import environment, migrate
from dlperf.core.errors import StoreWriteError, UsageError
from dlperf.core.orphans import alive
from dlperf.core.spec import RunResult, RunSpec
from dlperf.core.store_jobs import SCHEMA as JOBS_SCHEMA
from dlperf.core.store_jobs import JobsTable

# 2: ids include the measurement settings and the precision; 3: typed options in the ids
SCHEMA_VERSION = 3

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS environments (
    env_id TEXT PRIMARY KEY,
    machine_id TEXT NOT NULL,
    record TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    config_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    network TEXT NOT NULL,
    size TEXT NOT NULL,
    framework TEXT NOT NULL,
    variant TEXT NOT NULL,
    device TEXT NOT NULL,
    threads INTEGER NOT NULL,
    batch_size INTEGER NOT NULL,
    repeat INTEGER NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    median_s REAL,
    env_id TEXT REFERENCES environments(env_id),
    machine_id TEXT,
    created_at REAL NOT NULL,
    result TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_run ON results(run_id);
CREATE TABLE IF NOT EXISTS claims (
    run_id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    label TEXT NOT NULL,
    claimed_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS results_kind ON results(kind, network);
""" + JOBS_SCHEMA


def default_path() -> Path:
    """$DLPERF_DB, else $XDG_DATA_HOME/dlperf/results.db (~/.local/share/dlperf/results.db)."""
    if os.environ.get("DLPERF_DB"):
        return Path(os.environ["DLPERF_DB"]).expanduser()
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "dlperf" / "results.db"


def resolve_path(path: str | os.PathLike | None) -> Path:
    """The store a path names: ``path`` itself (``~`` expanded), else ``default_path()``."""
    return Path(path).expanduser() if path else default_path()


def names_no_store(path: str | os.PathLike | None) -> bool:
    """Whether ``path`` was given and has no store behind it (a typo, for a command that
    only reads one)."""
    return path is not None and not resolve_path(path).is_file()


#: how long opening a store retries while another process makes it (the busy timeout's)
OPEN_TIMEOUT_S = 60.0


class Store(JobsTable):
    """The results store; its cluster jobs' methods are ``JobsTable``'s (core/store_jobs.py)."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = resolve_path(path)
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        while True:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._open()
                break
            except sqlite3.OperationalError as e:
                # two processes making a new store at once: the one whose read lock cannot
                # become a write lock without a deadlock gets 'locked' at once, without
                # the busy timeout's wait (SQLite's documentation, "busy_timeout"); it
                # tries again while the other finishes
                if (db := getattr(self, "_db", None)) is not None:
                    db.close()
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise UsageError(f"cannot open results store {self.path}: {e}") from None
                time.sleep(0.05)
            except (OSError, sqlite3.Error) as e:
                raise UsageError(f"cannot open results store {self.path}: {e}") from None
        self.recovered = self._import_recovery()

    def _open(self) -> None:
        self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=60000")
        self._db.executescript(_SCHEMA)  # idempotent; runs outside a transaction
        with self._tx():
            self._check_version()

    # ------------------------------------------------------------------ recovery
    @property
    def recovery_path(self) -> Path:
        """Where results that could not be written wait for the next command."""
        return self.path.with_name(self.path.name + ".recovery.jsonl")

    def _keep_for_recovery(self, result: RunResult) -> str:
        line = result.model_dump_json() + "\n"
        try:
            with self.recovery_path.open("a") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            return f"kept in {self.recovery_path}; the next dlperf command on this store imports it"
        except OSError:
            # nowhere on disk: the terminal is the last place the number can go
            sys.stderr.write(line)
            return "printed above as JSON (the recovery file could not be written either)"

    def _import_recovery(self) -> int:
        """Store what an earlier command could not, once; returns how many."""
        try:
            lines = self.recovery_path.read_text().splitlines()
        except OSError:
            return 0
        results = []
        for line in lines:
            try:
                results.append(RunResult.model_validate_json(line))
            except ValueError:
                continue  # a line cut off by the full disk
        for r in results:
            stored = self._db.execute("SELECT result FROM results WHERE run_id=?",
                                      (r.spec.run_id,))
            if all(json.loads(b).get("started_at") != r.started_at for (b,) in stored):
                self._insert(r)
        self.recovery_path.unlink(missing_ok=True)
        return len(results)

    # ------------------------------------------------------------------ claims
    def claim(self, spec: RunSpec) -> str | None:
        """Claim a run for this process before measuring it, so that two sweeps on one
        store never measure the same run. Returns None when claimed, else who holds it. A
        claim whose process is gone (on this host) is taken over."""
        host, pid = platform.node(), os.getpid()
        with self._tx() as db:
            row = db.execute("SELECT host, pid, label FROM claims WHERE run_id=?",
                             (spec.run_id,)).fetchone()
            if row and (row[0], row[1]) != (host, pid) and not (
                    row[0] == host and not alive(row[1])):
                return f"pid {row[1]} on {row[0]}"
            db.execute("INSERT OR REPLACE INTO claims(run_id, host, pid, label, claimed_at) "
                       "VALUES (?,?,?,?,?)", (spec.run_id, host, pid, spec.label(), time.time()))
        return None

    def release(self, spec: RunSpec) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM claims WHERE run_id=? AND host=? AND pid=?",
                       (spec.run_id, platform.node(), os.getpid()))

    # ------------------------------------------------------------------ plumbing
    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _check_version(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            self._db.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
            return
        version = int(row[0])
        if version < SCHEMA_VERSION and all(v in migrate.STEPS for v in range(version, SCHEMA_VERSION)):
            for v in range(version, SCHEMA_VERSION):
                migrate.STEPS[v](self._db)
            self._db.execute("UPDATE meta SET value=? WHERE key='schema_version'",
                             (str(SCHEMA_VERSION),))
        elif version != SCHEMA_VERSION:
            raise UsageError(
                f"results store {self.path} has schema version {row[0]}, this dlperf reads "
                f"{SCHEMA_VERSION}; use another --db"
            )

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing
    def put_environment(self, record: dict[str, Any]) -> str:
        env_id = environment.env_id(record)
        mid = environment.machine_id()
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO environments(env_id, machine_id, record, created_at) "
                "VALUES (?, ?, ?, ?)",
                (env_id, mid, json.dumps(record, default=str), time.time()),
            )
        return env_id

    def add(self, result: RunResult) -> RunResult:
        """Store a result (with its environment) and return it with ``env_id`` and
        ``machine_id`` set (a result without a machine ran on this one). If the write
        fails, the result goes to the recovery file and StoreWriteError is raised."""
        try:
            return self._insert(result)
        except (OSError, sqlite3.Error) as e:
            where = self._keep_for_recovery(result)
            raise StoreWriteError(f"cannot write to results store {self.path} ({e}); the "
                                  f"result of {result.spec.label()} is {where}") from None

    def _insert(self, result: RunResult) -> RunResult:
        env_id = result.env_id or self.put_environment(environment.record(result.software))
        machine = result.machine_id or environment.machine_id()
        result = result.model_copy(update={"env_id": env_id, "machine_id": machine})
        s = result.spec
        with self._tx() as db:
            db.execute(
                "INSERT INTO results(run_id, config_id, kind, network, size, framework, variant,"
                " device, threads, batch_size, repeat, status, reason, median_s, env_id,"
                " machine_id, created_at, result)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    s.run_id, s.config_id, s.kind, s.network, s.size, s.framework, s.variant,
                    s.device, s.threads, s.batch_size, s.repeat, result.status,
                    result.failure.reason if result.failure else None,
                    result.metrics.median_s if result.metrics else None,
                    env_id, machine, time.time(), result.model_dump_json(),
                ),
            )
        return result

    def add_imported(self, environments: Iterable[tuple[str, str, str, float]],
                     rows: Iterable[tuple[RunResult, float]]) -> list[bool]:
        """Results measured elsewhere (``dlperf.core.store_import``), in one transaction: every
        environment (env_id, machine_id, record JSON, created_at) not already here, and
        every (result, created_at) whose run, machine and start time are not already here
        (a result without a start time: whose whole JSON is not). Each result must carry
        its machine_id and env_id; the stored time is the source's, so that readers still
        take the newest measurement of a run. Existing rows are never touched. Returns,
        per row, whether it was added."""
        added = []
        with self._tx() as db:
            for env_id, mid, record, created in environments:
                db.execute("INSERT OR IGNORE INTO environments(env_id, machine_id, record, "
                           "created_at) VALUES (?, ?, ?, ?)", (env_id, mid, record, created))
            for result, created in rows:
                s = result.spec
                have = db.execute("SELECT result FROM results WHERE run_id=? AND machine_id=?",
                                  (s.run_id, result.machine_id)).fetchall()
                text = result.model_dump_json()
                if any(_same_run(json.loads(t), result, text) for (t,) in have):
                    added.append(False)
                    continue
                db.execute(
                    "INSERT INTO results(run_id, config_id, kind, network, size, framework,"
                    " variant, device, threads, batch_size, repeat, status, reason, median_s,"
                    " env_id, machine_id, created_at, result)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (s.run_id, s.config_id, s.kind, s.network, s.size, s.framework, s.variant,
                     s.device, s.threads, s.batch_size, s.repeat, result.status,
                     result.failure.reason if result.failure else None,
                     result.metrics.median_s if result.metrics else None,
                     result.env_id, result.machine_id, created, text))
                added.append(True)
        return added

    # ------------------------------------------------------------------ reading
    def done(self, run_ids: Iterable[str], *, include_failed: bool = True,
             machine_id: str | None = None) -> set[str]:
        """Which of these runs already have a stored result on this machine (or on
        ``machine_id``): a result imported from another machine does not count, and a run
        that was interrupted has none (the next sweep measures it again)."""
        ids = list(run_ids)
        found: set[str] = set()
        status = (" AND (status='ok' OR reason IS NOT 'interrupted')" if include_failed
                  else " AND status='ok'")
        machine = machine_id or environment.machine_id()
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            q = (f"SELECT DISTINCT run_id FROM results WHERE machine_id = ? AND "
                 f"run_id IN ({','.join('?' * len(chunk))}){status}")
            found.update(r[0] for r in self._db.execute(q, [machine, *chunk]))
        return found

    def results(self, *, kind: str | None = "step", latest: bool = True, **where: Any) -> list[RunResult]:
        """Stored results, newest row per run and machine unless ``latest=False``. ``where``
        filters on the indexed columns (network, framework, device, threads, batch_size,
        status, machine_id, ...)."""
        clauses, args = [], []
        if kind is not None:
            clauses.append("kind = ?")
            args.append(kind)
        for k, v in where.items():
            if v is None:
                continue
            if isinstance(v, list | tuple | set):
                clauses.append(f"{k} IN ({','.join('?' * len(v))})")
                args.extend(v)
            else:
                clauses.append(f"{k} = ?")
                args.append(v)
        sql = "SELECT result, machine_id FROM results"
        if latest:
            # the newest measurement of each run on each machine: by the time it was
            # stored where it was measured (an imported row keeps its source's time, so an
            # older import never hides a newer result), then by row order
            sql += (" WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY"
                    " run_id, machine_id ORDER BY created_at DESC, id DESC) AS n FROM results)"
                    " WHERE n = 1)")
            if clauses:
                sql += " AND " + " AND ".join(clauses)
        elif clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY id"
        return [_with_machine(RunResult.model_validate_json(text), machine)
                for text, machine in self._db.execute(sql, args)]

    def environment(self, env_id: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT record FROM environments WHERE env_id=?", (env_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def peak_results(self, threads: int, device: str = "cpu") -> list[RunResult]:
        """Every stored peak row (kernel rates, raised peaks, failures) of this machine at
        this thread count and device, oldest first; ``dlperf.kinds.peak.rates.lookup`` decides which are
        still fresh."""
        return self.results(kind="peak", latest=False, threads=threads, device=device,
                            machine_id=environment.machine_id())

    def count(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0]


def _same_run(stored: dict[str, Any], result: RunResult, text: str) -> bool:
    """Whether a stored row (its JSON) is this result: the same start time, or, for a
    result that never started, the same JSON."""
    if result.started_at is not None:
        return stored.get("started_at") == result.started_at
    return stored == json.loads(text)


def _with_machine(result: RunResult, machine_id: str | None) -> RunResult:
    """Rows stored before results carried their machine have it in their column only."""
    if result.machine_id or not machine_id:
        return result
    return result.model_copy(update={"machine_id": machine_id})
