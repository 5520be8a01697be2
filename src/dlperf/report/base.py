"""What every report section is made of, and the filters a report takes. Imports no
section, so that each section module can import these."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dlperf.report.tables import Table


@dataclass
class Section:
    name: str  # file-name stem
    title: str
    tables: list[Table] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)
    text: str = ""
    #: how many of its tables a terminal summary prints (``dlperf report``, ``reproduce``)
    terminal: int = 1


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
