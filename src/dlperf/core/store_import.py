"""Importing results measured elsewhere: another dlperf store, or the ``results.json``
that ``dlperf report`` writes, merged into this store without duplicates.

A result's identity is its run, its machine and its start time: a row already here with
the same three is not added again, so importing the same file twice adds nothing. The
source is never modified: a store is copied to a temporary folder (with its write-ahead
log) and upgraded there if it is of an older schema. Nothing already in this store is
changed, and everything is added in one transaction, so an import either happens whole or
not at all. Refused, with one line: a file that is not a dlperf store or results.json, a
store of a newer schema than this dlperf reads, a report's CSV (a table of cells, not
results).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dlperf.core import migrate
from dlperf.core.errors import UsageError
from dlperf.core.spec import SCHEMA_VERSION as RESULT_SCHEMA
from dlperf.core.spec import RunResult
from dlperf.core.store import SCHEMA_VERSION, Store

_SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass
class Imported:
    """What an import did, per machine id: results added, results already there; the
    machine records of the imported environments; rows that could not be read."""

    source: Path
    added: dict[str, int] = field(default_factory=dict)
    present: dict[str, int] = field(default_factory=dict)
    machines: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def import_file(store: Store, path: str | Path) -> Imported:
    """Merge the results in ``path`` (a dlperf store or a report's results.json) into
    ``store``. Bad input raises UsageError naming the file."""
    src = Path(path)
    envs, rows, skipped = read_file(src)
    flags = store.add_imported(envs, rows)
    out = Imported(src, skipped=skipped)
    for (r, _), added in zip(rows, flags, strict=True):
        bucket = out.added if added else out.present
        bucket[r.machine_id] = bucket.get(r.machine_id, 0) + 1
    for _, mid, record, _ in envs:
        m = json.loads(record).get("machine")
        if m and mid not in out.machines:
            out.machines[mid] = m
    return out


def read_file(src: Path) -> tuple[list, list[tuple[RunResult, float]], list[str]]:
    """What a dlperf store or a report's results.json holds, without changing it: its
    environments (env_id, machine_id, record JSON, created_at), its results with the time
    each was stored, and why any could not be read. Bad input raises UsageError."""
    try:
        head = src.read_bytes()[:16] if src.is_file() else None
    except OSError as e:
        raise UsageError(f"{src}: cannot read: {e.strerror}") from None
    if head is None:
        raise UsageError(f"{src}: no such file")
    if head == _SQLITE_MAGIC:
        return _read_store(src)
    if src.suffix.lower() == ".csv":
        raise UsageError(f"{src}: a report's CSV holds table cells, not results (no run ids, "
                         "settings or environments), so it cannot be read; use the "
                         "store (.db) or the report's results.json")
    return _read_json(src)


# ----------------------------------------------------------------------------- a store
def _read_store(src: Path) -> tuple[list, list, list[str]]:
    with tempfile.TemporaryDirectory(prefix="dlperf-import-") as tmp:
        copy = Path(tmp) / "source.db"
        shutil.copyfile(src, copy)
        wal = src.with_name(src.name + "-wal")
        if wal.exists():  # committed results not yet checkpointed into the main file
            shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
        _check_schema(src, copy)
        Store(copy).close()  # upgrades the copy to this dlperf's schema, if older
        db = sqlite3.connect(copy)
        try:
            envs = db.execute("SELECT env_id, machine_id, record, created_at FROM "
                              "environments").fetchall()
            raw = db.execute("SELECT result, machine_id, env_id, created_at FROM results "
                             "ORDER BY id").fetchall()
        finally:
            db.close()
    rows, skipped = [], []
    for text, mid, env_id, created in raw:
        r = _result(text, mid, env_id, skipped)
        if r is not None:
            rows.append((r, created))
    return envs, rows, skipped


def _check_schema(src: Path, copy: Path) -> None:
    try:
        db = sqlite3.connect(copy)
        try:
            tables = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not {"meta", "results", "environments"} <= tables:
                raise UsageError(f"{src}: an SQLite file but not a dlperf store (no results "
                                 "and environments tables)")
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        finally:
            db.close()
    except sqlite3.Error as e:
        raise UsageError(f"{src}: not a readable dlperf store ({e})") from None
    version = int(row[0]) if row and str(row[0]).isdigit() else None
    if version is None:
        raise UsageError(f"{src}: not a dlperf store (no schema version)")
    if version > SCHEMA_VERSION:
        raise UsageError(f"{src}: a store of schema version {version}, newer than this dlperf "
                         f"reads ({SCHEMA_VERSION}); import it with a newer dlperf")
    if any(v not in migrate.STEPS for v in range(version, SCHEMA_VERSION)):
        raise UsageError(f"{src}: a store of schema version {version}, which this dlperf "
                         f"cannot upgrade to {SCHEMA_VERSION}")


# ----------------------------------------------------------------------------- results.json
def _read_json(src: Path) -> tuple[list, list, list[str]]:
    try:
        data = json.loads(src.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise UsageError(f"{src}: neither a dlperf store nor a report's results.json") from None
    if not (isinstance(data, dict) and isinstance(data.get("results"), list)
            and isinstance(data.get("environments"), dict)):
        raise UsageError(f"{src}: JSON, but not a report's results.json (it needs 'results' "
                         "and 'environments')")
    newer = [r.get("schema_version") for r in data["results"] if isinstance(r, dict)
             and isinstance(r.get("schema_version"), int) and r["schema_version"] > RESULT_SCHEMA]
    if newer:
        raise UsageError(f"{src}: results of schema version {max(newer)}, newer than this "
                         f"dlperf reads ({RESULT_SCHEMA}); import them with a newer dlperf")
    rows, skipped, env_machine = [], [], {}
    now = time.time()
    for item in data["results"]:
        r = _result(json.dumps(item), None, None, skipped)
        if r is not None:
            rows.append((r, r.finished_at or r.started_at or now))
            env_machine.setdefault(r.env_id, r.machine_id)
    envs = [(env_id, env_machine[env_id], json.dumps(rec, default=str), now)
            for env_id, rec in data["environments"].items()
            if env_id in env_machine and isinstance(rec, dict)]
    return envs, rows, skipped


def _result(text: str, machine_id: str | None, env_id: str | None,
            skipped: list[str]) -> RunResult | None:
    """A stored result with its machine and environment, or None (and why, in
    ``skipped``) for one this dlperf cannot read or place."""
    try:
        r = RunResult.model_validate_json(text)
    except ValidationError as e:
        skipped.append(f"a result this dlperf cannot read ({e.errors()[0]['msg']})")
        return None
    r = r.model_copy(update={"machine_id": r.machine_id or machine_id,
                             "env_id": r.env_id or env_id})
    if not r.machine_id or not r.env_id:
        skipped.append(f"{r.spec.label()}: no machine or environment recorded with it")
        return None
    return r
