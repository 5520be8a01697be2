"""A GPU run's memory limit. ``--memory-limit`` on a GPU caps the device memory the
framework may take, as a card of that size would hold it, and leaves the host's resident
memory alone. The launcher hands the limit to the worker in ``ENV``; the backend caps its
allocator with it before anything is built."""

from __future__ import annotations

import os

#: the limit in bytes, set by the launcher for a GPU run under ``--memory-limit``
ENV = "DLPERF_DEVICE_MEMORY_LIMIT"


def limit() -> int | None:
    """The device memory this worker may take, or None: no limit."""
    value = os.environ.get(ENV)
    return int(value) if value else None
