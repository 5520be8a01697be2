"""Tables built from aggregated rows. A Table is format-free; exporters render it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dlperf import workloads
from dlperf.core.aggregate import ConfigResult, settings_names, settings_notes
from dlperf.core.framework_table import BACKENDS

#: A performance model as the report uses it: the predicted time per mini-batch of a
#: measured configuration (on its machine) and the model's validated relative error for
#: that kind of configuration (None: not validated yet), or None when it cannot predict it.
Predictor = Callable[[ConfigResult], tuple[float, float | None] | None]


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    footnotes: list[str] = field(default_factory=list)
    caption: str = ""
    # raw numbers behind the cells (for CSV/JSON): same shape as rows, None where no number
    values: list[list[float | str | None]] = field(default_factory=list)
    # column groups over the headers, left to right: (label, number of columns); '' for
    # columns under no group. HTML draws them as a header row of their own; the flat
    # formats prefix each header with its group (``flat_headers``).
    groups: list[tuple[str, int]] = field(default_factory=list)

    def flat_headers(self) -> list[str]:
        """Headers with their group's label in front ('m1 1 thread'), for formats that
        have one header row."""
        if not self.groups:
            return list(self.headers)
        labels = [g for g, n in self.groups for _ in range(n)]
        return [f"{g}: {h}" if g else h for g, h in zip(labels, self.headers, strict=True)]


def _network_order(name: str) -> int:
    names = list(workloads.WORKLOADS)
    return names.index(name) if name in names else len(names)


def _framework_order(fw: str, variant: str) -> tuple[int, int]:
    names = list(BACKENDS)
    i = names.index(fw) if fw in names else len(names)
    variants = BACKENDS[fw].variants if fw in BACKENDS else ()
    return i, variants.index(variant) if variant in variants else len(variants)


def sort_rows(rows: list[ConfigResult]) -> list[ConfigResult]:
    return sorted(rows, key=lambda r: (
        _network_order(r.spec.network), r.spec.size, _framework_order(r.spec.framework, r.spec.variant),
        r.spec.device, r.spec.threads, r.spec.batch_size, r.spec.precision, r.machine_id or ""))


def machine_label(machine_id: str | None) -> str:
    """The short form of a machine id that tables show."""
    return (machine_id or "unknown")[:8]


class Provenance:
    """The 'settings' (and, for rows of several machines, 'machine') cells of a table and
    the footnotes that explain them: every number says what measured it. A table that
    lays machines out as column groups passes ``machine_column=False``."""

    def __init__(self, rows: list[ConfigResult], machines: dict[str, str] | None = None,
                 machine_column: bool = True):
        self.names = settings_names(rows)
        ids = list(dict.fromkeys(r.machine_id for r in rows))
        self.several_machines = len(ids) > 1 and machine_column
        self.notes = settings_notes(self.names)
        if len(ids) > 1:
            self.notes += [f"machine {machine_label(m)}: {(machines or {}).get(m or '', 'unknown')}"
                           for m in ids]

    @property
    def headers(self) -> list[str]:
        return ["settings"] + (["machine"] if self.several_machines else [])

    def cells(self, r: ConfigResult) -> list[str]:
        return [self.names[r.spec.measurement]] + (
            [machine_label(r.machine_id)] if self.several_machines else [])


