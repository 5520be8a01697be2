"""The machines and software behind the stored numbers: the report's environment section,
the names tables give machines, and the ``--machines`` choice.

A machine is known by the environment records stored with its results (``dlperf import``
copies them with the results of another machine), so every name here comes from the
store, never from a guess.
"""

from __future__ import annotations

from typing import Any

from dlperf.core import environment, units
from dlperf.core.errors import UsageError
from dlperf.core.spec import RunResult
from dlperf.core.store import Store
from dlperf.report.base import Filters, Section
from dlperf.report.tables import Table, machine_label

#: packages the software table shows, in this order, when any environment has them
_PACKAGES = ("torch", "tensorflow-cpu", "tensorflow", "keras", "jax", "jaxlib", "flax", "optax",
             "numpy")


def machine_records(store: Store, results: list[RunResult]) -> dict[str, dict[str, Any]]:
    """Machine id -> its machine record (CPU, cores, memory, GPUs), from the environments
    its results ran in; this machine's own record when the store has none for it."""
    found: dict[str, dict[str, Any]] = {}
    for r in results:
        if r.machine_id and r.machine_id not in found and r.env_id:
            m = (store.environment(r.env_id) or {}).get("machine")
            if m:
                found[r.machine_id] = m
    here = environment.machine_id()
    if any(r.machine_id == here for r in results):
        found.setdefault(here, environment.machine())
    return found


def describe(m: dict[str, Any]) -> str:
    """'Intel Xeon ..., 2 cores, 8 GiB' (and its GPUs)."""
    gpus = m.get("gpus") or []
    gpu = f", {len(gpus)} x {gpus[0].get('name')}" if gpus else ""
    return (f"{m.get('cpu_model', 'unknown CPU')}, {m.get('physical_cores', '?')} cores, "
            f"{m.get('memory_bytes', 0) / 2**30:.0f} GiB{gpu}")


def machine_names(store: Store, results: list[RunResult]) -> dict[str, str]:
    """Machine id -> its description, '(this machine)' added to this one's."""
    here = environment.machine_id()
    return {mid: describe(m) + (" (this machine)" if mid == here else "")
            for mid, m in machine_records(store, results).items()}


def resolve_machines(store: Store, choice: str | None) -> tuple[str, ...]:
    """``--machines``: 'all' (every machine in the store; the default), 'this', or machine
    ids (the 8-character form tables show is enough) -> the ids a Filters takes (empty:
    all). An id no stored result has is one UsageError line listing the known ones."""
    if choice in (None, "", "all"):
        return ()
    known = sorted({r.machine_id for r in store.results(kind=None) if r.machine_id})
    wanted = []
    for item in (x.strip() for x in choice.split(",")):
        if item == "this":
            wanted.append(environment.machine_id())
            continue
        hits = [m for m in known if m.startswith(item)] if item else []
        if len(hits) != 1:
            listed = ", ".join(machine_label(m) for m in known) or "none"
            what = "matches several machines" if hits else "is no machine in the store"
            raise UsageError(f"--machines: '{item}' {what} (known: {listed}; or 'all', 'this')")
        wanted.append(hits[0])
    return tuple(dict.fromkeys(wanted))


def environment_section(store: Store, out: object, filters: Filters) -> Section | None:
    """The machines in the store (this one marked) and the software each measured with."""
    results = store.results(kind=None, **filters.where())
    if not results:
        return None
    records = machine_records(store, results)
    here = environment.machine_id()
    counts: dict[str | None, int] = {}
    for r in results:
        counts[r.machine_id] = counts.get(r.machine_id, 0) + 1
    rows, values = [], []
    for mid, n in counts.items():
        m = records.get(mid or "", {})
        gpus = ", ".join(g.get("name", "?") for g in m.get("gpus") or []) or "none"
        line = [machine_label(mid), "yes" if mid == here else "", str(m.get("cpu_model", "unknown")),
                f"{m.get('physical_cores', '?')} / {m.get('logical_cpus', '?')}",
                units.nbytes(m.get("memory_bytes")), gpus, str(m.get("os", "")), str(n)]
        rows.append(line)
        values.append(line[:6] + [m.get("os"), n])
    machines = Table(title="Machines", headers=[
        "machine", "this one", "CPU", "cores / CPUs", "memory", "GPUs", "system", "results"],
        rows=rows, values=values,
        caption="Every machine with results in the store (imported ones included); a "
        "result's identity includes its machine, and no table combines two machines.")
    return Section("environment", "Environment", tables=[machines, _software(store, results)])


def _software(store: Store, results: list[RunResult]) -> Table:
    seen: dict[tuple, list[str]] = {}
    for r in results:
        env = store.environment(r.env_id) if r.env_id else None
        if not env:
            continue
        pk = env.get("packages") or {}
        key = (r.machine_id, env.get("machine", {}).get("python"), env.get("dlperf"),
               tuple(sorted(pk.items())))
        seen.setdefault(key, [machine_label(r.machine_id), str(key[1] or "-"),
                              str(key[2] or "-"), *[str(pk.get(p) or "") for p in _PACKAGES]])
    cols = [i for i, _ in enumerate(_PACKAGES) if any(line[3 + i] for line in seen.values())]
    rows = [line[:3] + [line[3 + i] for i in cols] for line in seen.values()]
    return Table(title="Software", headers=["machine", "Python", "dlperf",
                                            *[_PACKAGES[i] for i in cols]], rows=rows,
                 caption="One line per distinct set of versions that measured results.")
