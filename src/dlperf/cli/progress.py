"""The console every subcommand prints to, and the progress bar over a list of runs."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dlperf.core import units
from dlperf.core.spec import RunResult, RunSpec
from dlperf.engine.runner import Listener

# Wide when writing to a file or a pipe (rich would assume 80 columns and squeeze tables).
out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
#: Where a command printing JSON (--json) says everything else: stdout is for the document.
err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 160)


def console(json_mode: bool) -> Console:
    """The console for a command's lines beside its result: stderr under --json."""
    return err if json_mode else out


class ProgressListener(Listener):
    """A rich progress bar over configurations, showing the running step of the current one.

    The bar appears at the first configuration, so input errors found before any work
    starts print alone, on one line.
    """

    def __init__(self, to_stderr: bool = False) -> None:
        """``to_stderr``: the bar and the per-run lines on stderr (a command printing JSON
        keeps stdout for the document alone)."""
        self.p: Progress | None = None
        self.task = None
        self.console = console(to_stderr)

    def __enter__(self) -> ProgressListener:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.p is not None:
            self.p.stop()

    def _bar(self) -> Progress:
        if self.p is None:
            self.p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TimeElapsedColumn(), console=self.console, transient=True)
            self.p.start()
            self.task = self.p.add_task("starting", total=None)
        return self.p

    def start(self, spec: RunSpec, index: int, total: int) -> None:
        self._bar().update(self.task, total=total, completed=index,
                           description=escape(spec.label()))

    def event(self, spec: RunSpec, event: dict) -> None:
        phase, p = event.get("phase"), self._bar()
        if phase in ("warmup", "step"):
            p.update(self.task, description=f"{escape(spec.label())}  {phase} "
                                            f"{units.seconds(event['s'])}")
        elif phase == "built":
            p.update(self.task, description=f"{escape(spec.label())}  built")
        elif phase == "train":
            p.update(self.task, description=f"{escape(spec.label())}  "
                                            f"{escape(str(event.get('text', '')))}")

    def skipped(self, spec: RunSpec, why: str) -> None:
        p = self._bar()
        p.advance(self.task)
        p.console.print(f"  [dim]skip[/] {escape(spec.label()):50} {escape(why)}")

    def waiting(self, spec: RunSpec, holder: str) -> None:
        self._bar().update(self.task, description=f"{escape(spec.label())}  waiting for the "
                                                  f"CPUs ({escape(holder)})")

    def cluster(self, counts: dict[str, int]) -> None:
        """The Slurm executor's line: jobs queued, running, done and failed."""
        p, total = self._bar(), sum(counts.values())
        p.update(self.task, total=total, completed=counts["done"] + counts["failed"],
                 description="slurm: " + ", ".join(f"{n} {k}" for k, n in counts.items()))

    def done(self, result: RunResult) -> None:
        p = self._bar()
        p.advance(self.task)
        s = result.spec
        if result.ok:
            t = units.seconds(result.metrics.median_s) if result.metrics else ""
            p.console.print(f"  [green]ok[/] {escape(s.label()):50} {t:>9}")
        else:
            f = result.failure
            p.console.print(f"  [red]- [/] {escape(s.label()):50} {f.reason}: {escape(f.message[:90])}")


def print_plan(title: str, planned, verb: str = "measure", describe=None,
               to: Console = out) -> None:
    """'TITLE: N runs, K already in STORE, M to measure'; with ``describe`` (a dry run),
    one line per run still to do."""
    to.print(f"{title}: {len(planned.specs)} runs, {planned.stored} already in "
             f"{planned.store_path}, {len(planned.todo)} to {verb}")
    if describe is not None:
        for s in planned.todo:
            to.print(f"  {escape(describe(s))}")
