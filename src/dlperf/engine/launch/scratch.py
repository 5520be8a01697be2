"""A launcher's scratch folder, and the ones a killed launcher left behind.

A worker's files (its spec, its progress, its result) live in a temporary folder that
the launcher removes when the run ends; a launcher killed with SIGKILL cannot, and its
workers die with it (``core.orphans``), so the folder is all that outlives it. Each
folder names its launcher's process (``OWNER``); the next launch removes the folders whose
launcher is gone. A folder without that file (made by an older dlperf), or whose launcher
still runs (or whose number another process now has), is left alone.
"""

from __future__ import annotations

import getpass
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dlperf.core.orphans import alive

#: the file in a scratch folder that holds its launcher's process id
OWNER = "launcher.pid"
#: the folder inside a scratch folder that its child takes as its temporary folder
TEMP = "tmp"


def remove_orphans(prefix: str) -> list[Path]:
    """Remove the scratch folders named ``prefix``* whose launcher is gone; the removed."""
    removed = []
    for d in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        try:
            pid = int((d / OWNER).read_text())
        except (OSError, ValueError):
            continue  # not a folder, not ours, or not yet written
        if pid != os.getpid() and not alive(pid):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


@contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A temporary folder named by ``prefix`` that records this process as its launcher,
    removed on the way out; the orphans of earlier launchers go first."""
    remove_orphans(prefix)
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        (Path(tmp) / OWNER).write_text(str(os.getpid()))
        yield Path(tmp)


def temp_env(scratch: Path) -> dict[str, str]:
    """The environment that gives a child ``scratch``'s own temporary folder, so that what
    it leaves there goes with the scratch folder: TensorFlow's AutoGraph writes a module
    per converted function into the temporary folder and removes it at exit, which a
    worker that leaves without teardown never reaches; torchrun leaves a
    ``torchelastic_*`` folder per run. Both piled up by the thousand in /tmp. The one
    thing there meant to outlive a process, torch.compile's cache, stays where PyTorch
    keeps it by default, so that a compiled variant's warm-up reuses it as before."""
    tmp = scratch / TEMP
    tmp.mkdir(exist_ok=True)
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(
        Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}")
    return {"TMPDIR": str(tmp), "TORCHINDUCTOR_CACHE_DIR": inductor}
