"""A storage bandwidth measurement as a result (kind "storage").

The engine runs it in the dlperf process itself (``launcher="in_process"``), under the
machine's measurement lock: it needs no framework, and its work is in the kernel (fio is
a process of its own, with a time limit).
The result carries ``StorageOptions`` (path, test-file size, tool: the identity) and a
``StorageOutcome`` as its outcome; the report and ``dlperf dataflow storage``
read it back to say whether the storage can feed a measured training rate.
"""

from __future__ import annotations

import shutil
import time
import traceback
from pathlib import Path

from dlperf.core.errors import UsageError
from dlperf.core.spec import RunResult, RunSpec
from dlperf.kinds.dataflow import storage
from dlperf.kinds.dataflow.options import StorageOptions, StorageOutcome


def resolve_tool(tool: str) -> str:
    """'auto' -> 'fio' where installed, else 'direct'."""
    if tool == "auto":
        return "fio" if shutil.which("fio") else "direct"
    if tool == "fio" and not shutil.which("fio"):
        raise UsageError("--tool fio: fio is not installed (apt-get install fio)")
    return tool


def storage_spec(path: Path, file_bytes: int, tool: str) -> RunSpec:
    size = path.stat().st_size if path.is_file() else file_bytes
    opts = StorageOptions(path=str(path.resolve()), file_bytes=size, tool=tool)
    return RunSpec(kind="storage", network="storage", framework=tool,
                   options=opts)


def run_storage(spec: RunSpec) -> RunResult:
    """Measure the read bandwidth of the spec's path (a failure comes back as a failed
    result; a usage error, such as a missing tool, is raised)."""
    o = spec.options
    assert isinstance(o, StorageOptions)
    started = time.time()
    try:
        bw = storage.measure(Path(o.path), o.file_bytes, o.tool)
    except UsageError:
        raise
    except Exception as e:
        last = traceback.format_exc(limit=2).strip().splitlines()[-1]
        return RunResult.failed(spec, "error", f"{type(e).__name__}: {e}"[:500] or last,
                                started_at=started, finished_at=time.time())
    out = StorageOutcome(tool=bw.tool, method=bw.method, file_bytes=bw.file_bytes,
                         seq_bytes_per_s=bw.sequential.bytes_per_s, seq_block=bw.sequential.block,
                         rand_bytes_per_s=bw.random.bytes_per_s, rand_block=bw.random.block,
                         notes=list(bw.notes))
    return RunResult(spec=spec, status="ok", software={"storage_tool": bw.tool},
                     started_at=started, finished_at=time.time(), outcome=out)
