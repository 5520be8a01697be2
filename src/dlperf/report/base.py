"""What every report section is made of, and the filters a report takes. Imports no
section, so that each section module can import these."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dlperf.dataflow.plan import has_pipeline
from dlperf.report.aggregate import ConfigResult, aggregate
from dlperf.report.tables import Table


@dataclass
class Section:
    name: str  # file-name stem
    title: str
    tables: list[Table] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)
    text: str = ""


@dataclass
class Report:
    out_dir: Path
    sections: list[Section]
    files: list[Path]

    @property
    def html(self) -> Path:
        return self.out_dir / "report.html"


@dataclass(frozen=True)
class Filters:
    networks: tuple[str, ...] = ()
    frameworks: tuple[str, ...] = ()
    size: str | None = None
    # the machines whose results to show (full ids); empty: every machine in the store
    machines: tuple[str, ...] = ()

    def where(self) -> dict:
        return {
            "network": list(self.networks) or None,
            "framework": list(self.frameworks) or None,
            "size": self.size,
            "machine_id": list(self.machines) or None,
        }


def plain_steps(rows: list[ConfigResult]) -> list[ConfigResult]:
    """The rows a thread curve or a framework ranking may compare: on synthetic data (an
    input pipeline adds the wait for data) and with the workload's own parameters (an
    experiment's variants, such as the input-size sides, are other workloads)."""
    return [r for r in rows if not r.spec.params and not has_pipeline(r.spec)]


def step_rows(store, filters: Filters = Filters()) -> list[ConfigResult]:
    """The stored DLBench-style step results the filters select, one ConfigResult per configuration
    and machine."""
    return aggregate(store.results(kind="step", **filters.where()))
