"""The two sides of a comparison: which results each names, read without changing them.

A side is a comma-separated list of items: at most one path (a dlperf store or a report's
results.json; none: the store ``--db`` names) and any number of selections:

- ``machine=ID``: results of the machine whose id, or host name, starts with ID;
- ``since=DATE``, ``until=DATE``: results stored from / before an ISO date or time;
- ``PACKAGE=VERSION`` (``torch=2.13.0``): results measured with that version of a package
  (a prefix: ``torch=2.13`` takes 2.13.0+cpu too);
- ``env=NAME``: results measured in the environment ``dlperf setup`` made
  (``env=torch-2.12.0``), or in dlperf's own (``env=default``).

    old.db  new.db                     two stores
    torch=2.12.0  torch=2.13.0         two versions in one store
    env=default  env=torch-2.12.0      dlperf's own environment and another version's
    machine=laptop  machine=server     two machines in one store
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from dlperf.core import store_import
from dlperf.core.errors import UsageError
from dlperf.core.spec import RunResult

#: kinds whose results are repeated timings of one step (a peak or a calibration kernel
#: measures the machine, not a configuration a user compares)
COMPARED_KINDS = ("step", "inference", "parallel")


@dataclass(frozen=True)
class Side:
    text: str
    path: Path
    machine: str | None = None
    since: float | None = None
    until: float | None = None
    software: dict[str, str] = field(default_factory=dict)
    env: str | None = None  # None: any environment; '': dlperf's own


@dataclass
class Loaded:
    """One side's results: per configuration key, the newest result of each process."""

    side: Side
    processes: dict[tuple[str, str], list[RunResult]]  # (config_id, machine_id) -> runs
    machines: dict[str, str]  # machine_id -> host name (or '')
    versions: dict[str, set[str]]  # package -> versions seen among the selected results


def parse(text: str, default_store: Path) -> Side:
    path: Path | None = None
    sel: dict = {"software": {}}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        if "=" not in item:
            if path is not None:
                raise UsageError(f"side '{text}' names two files ({path}, {item}); one per side")
            path = Path(item).expanduser()
            continue
        key, value = (x.strip() for x in item.split("=", 1))
        if not key or not value:
            raise UsageError(f"side '{text}': '{item}' needs a name and a value (torch=2.13.0)")
        if key == "machine":
            sel["machine"] = value
        elif key == "env":
            sel["env"] = "" if value == "default" else value.replace("==", "-")
        elif key in ("since", "until"):
            sel[key] = _timestamp(value, text)
        else:
            sel["software"][key] = value
    return Side(text=text, path=path or default_store, **sel)


def _timestamp(value: str, text: str) -> float:
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise UsageError(f"side '{text}': '{value}' is not a date (2026-11-27 or "
                         "2026-11-27T14:00)") from None


def load_pair(a: Side, b: Side) -> tuple[Loaded, Loaded]:
    """Both sides, a file both name read once (two selections of one store are common)."""
    read: dict[Path, tuple] = {}
    for side in (a, b):
        if side.path not in read:
            read[side.path] = store_import.read_file(side.path)
    return load(a, read[a.path]), load(b, read[b.path])


def load(side: Side, source: tuple) -> Loaded:
    """The side's results, from ``source``: ``store_import.read_file``'s answer for its
    file."""
    envs, rows, _ = source
    hosts = {mid: json.loads(rec).get("machine", {}).get("hostname", "") or ""
             for _, mid, rec, _ in envs}
    newest: dict[tuple[str, str | None], tuple[float, RunResult]] = {}
    for r, created in rows:
        if not _selected(r, created, side, hosts):
            continue
        key = (r.spec.run_id, r.machine_id)
        if key not in newest or created >= newest[key][0]:
            newest[key] = (created, r)  # the newest measurement of each process
    processes: dict[tuple[str, str], list[RunResult]] = defaultdict(list)
    versions: dict[str, set[str]] = defaultdict(set)
    for _, r in newest.values():
        # matched whatever environment ran it, so that two versions can be compared
        processes[(r.spec.setup_free_id, r.machine_id or "")].append(r)
        for package in (*side.software, r.spec.framework):
            versions[package].add(str(r.software.get(package)))
    if not processes:
        raise UsageError(_nothing_selected(side, rows))
    for runs in processes.values():
        _one_software(side, runs)
    return Loaded(side, dict(processes), {m: hosts.get(m, "") for _, m in processes},
                  dict(versions))


def _one_software(side: Side, runs: list[RunResult]) -> None:
    """A side's processes of one configuration must share their framework's version."""
    fw = runs[0].spec.framework
    seen = sorted({f"{r.software.get(fw)} ({r.spec.env or 'default'})" for r in runs})
    if len(seen) > 1:
        raise UsageError(f"side '{side.text}' holds {runs[0].spec.label()} measured with "
                         f"{fw} {' and '.join(seen)}; select one version per side (add "
                         f"{fw}=VERSION or env=NAME)")


def _selected(r: RunResult, created: float, side: Side, hosts: dict[str, str]) -> bool:
    if r.spec.kind not in COMPARED_KINDS or not (r.ok and r.metrics and r.step_times_s):
        return False
    if side.machine and not (str(r.machine_id).startswith(side.machine)
                             or hosts.get(r.machine_id or "", "").startswith(side.machine)):
        return False
    if side.since is not None and created < side.since:
        return False
    if side.until is not None and created >= side.until:
        return False
    if side.env is not None and r.spec.env != side.env:
        return False
    return all(str(r.software.get(p, "")).startswith(v) for p, v in side.software.items())


def _nothing_selected(side: Side, rows: list[tuple[RunResult, float]]) -> str:
    timed = [r for r, _ in rows if r.spec.kind in COMPARED_KINDS and r.ok and r.step_times_s]
    if not timed:
        return f"{side.path}: no measured step times to compare"
    have = []
    for package in side.software:
        seen = sorted({str(r.software.get(package)) for r in timed if r.software.get(package)})
        have.append(f"{package} {', '.join(seen) or 'never recorded'}")
    if side.machine:
        have.append(f"machines {', '.join(sorted({str(r.machine_id)[:8] for r in timed}))}")
    return (f"side '{side.text}' selects no measured results in {side.path}"
            + (f" (it holds {'; '.join(have)})" if have else ""))
