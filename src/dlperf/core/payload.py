"""The two shapes every kind's payload takes.

``Frozen`` for what a run is asked to do (options: part of its identity, so nothing
unknown is accepted); ``Payload`` for what a run found (outcomes): its known fields are
typed, and a field written by another version of dlperf is kept as it was, so reading an
older or newer store loses nothing.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")


class Diagnostics(Payload):
    """What the launcher kept of a run that failed: the end of the worker's output, the
    memory the process tree reached, every thread's stack just before a kill, and the
    launcher's own record (command, rendezvous, times)."""

    log_tail: str | None = None
    peak_rss_bytes: int | None = None
    stacks: dict[str, str] = {}
    launcher: dict[str, object] | None = None
