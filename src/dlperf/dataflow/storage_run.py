"""A storage bandwidth measurement as a stored result (kind "storage").

It runs in the dlperf process itself, under the machine's measurement lock: it needs no
framework, and its work is in the kernel (fio is a process of its own, with a time limit).
The result carries ``StorageOptions`` (path, test-file size, tool: the identity) and a
``StorageOutcome`` as its outcome; the report and ``dlperf dataflow storage``
read it back to say whether the storage can feed a measured training rate.
"""

from __future__ import annotations

import shutil
import time
import traceback
from pathlib import Path

from dlperf.dataflow import storage
from dlperf.errors import UsageError
from dlperf.kinds.dataflow import StorageOptions, StorageOutcome
from dlperf.launch.cpulock import cpus_held
from dlperf.spec import RunResult, RunSpec
from dlperf.store import Store


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


def measure_and_store(store: Store, path: Path, file_bytes: int, tool: str,
                      max_time_s: float = storage.MAX_TIME_S) -> RunResult:
    """Measure the read bandwidth of ``path`` and store it (a failure is stored too)."""
    spec = storage_spec(path, file_bytes, tool)
    with cpus_held(spec.label()):
        started = time.time()
        try:
            bw = storage.measure(path, file_bytes, tool, max_time_s)
        except UsageError:
            raise
        except Exception as e:
            last = traceback.format_exc(limit=2).strip().splitlines()[-1]
            return store.add(RunResult.failed(spec, "error", f"{type(e).__name__}: {e}"[:500]
                                              or last, started_at=started,
                                              finished_at=time.time()))
    out = StorageOutcome(tool=bw.tool, method=bw.method, file_bytes=bw.file_bytes,
                         seq_bytes_per_s=bw.sequential.bytes_per_s, seq_block=bw.sequential.block,
                         rand_bytes_per_s=bw.random.bytes_per_s, rand_block=bw.random.block,
                         notes=list(bw.notes))
    return store.add(RunResult(spec=spec, status="ok", software={"storage_tool": bw.tool},
                               started_at=started, finished_at=time.time(),
                               outcome=out))
