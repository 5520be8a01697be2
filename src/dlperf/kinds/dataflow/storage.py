"""Storage read bandwidth, cold: sequential and random reads of one file.

With ``fio`` installed (a Debian package), fio reads the file with ``--direct=1`` (no page
cache), once sequentially and once in random order, and its JSON output
(``--output-format=json``) gives the bandwidth. Without it, a built-in reader does the
same: it opens the file with ``O_DIRECT`` and reads into a page-aligned buffer (an
anonymous ``mmap``), so nothing comes from the page cache; where the file system refuses
``O_DIRECT`` (tmpfs, some overlays) it evicts the file with ``posix_fadvise`` DONTNEED
before each pass and reads through the cache, and says so.

Sequential reads use ``SEQ_BLOCK`` (1 MiB) blocks; random reads ``RAND_BLOCK`` (128 KiB,
about one 224x224 JPEG: what a data loader reads per sample) at a seeded permutation of
the block-aligned offsets, each block once, as fio's ``randread`` does. Framework-free.
"""

from __future__ import annotations

import json
import mmap
import os
import random
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from dlperf.core.errors import UsageError
from dlperf.inputs.cache import evict

SEQ_BLOCK = 1 << 20
RAND_BLOCK = 128 << 10
TEST_FILE = ".dlperf-storage-test.bin"
MAX_TIME_S = 20.0  # per pass: a slow disk is measured on part of the file


@dataclass(frozen=True)
class Pass:
    """One pass over the file: bytes read and the seconds it took."""

    pattern: str  # 'sequential' or 'random'
    block: int
    nbytes: int
    seconds: float

    @property
    def bytes_per_s(self) -> float:
        return self.nbytes / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class Bandwidth:
    path: str
    tool: str  # 'fio 3.33' or 'dlperf direct reader'
    method: str  # how the page cache was kept out
    file_bytes: int
    sequential: Pass
    random: Pass
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- the file
def check_path(path: str) -> Path:
    """The file or folder to measure; one line for a bad one."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UsageError(f"--path: {path} does not exist")
    if p.is_dir():
        if not os.access(p, os.W_OK | os.X_OK):
            raise UsageError(f"--path: cannot write a test file in {path} (not writable); "
                             "give a readable file instead")
    elif not os.access(p, os.R_OK):
        raise UsageError(f"--path: {path} is not readable")
    elif not p.is_file():
        raise UsageError(f"--path: {path} is neither a file nor a folder")
    elif p.stat().st_size < SEQ_BLOCK:
        raise UsageError(f"--path: {path} holds {p.stat().st_size} bytes, less than one "
                         f"{SEQ_BLOCK}-byte block; give a larger file or a folder")
    return p


def test_file(folder: Path, nbytes: int) -> Path:
    """A file of ``nbytes`` incompressible bytes in ``folder``, on the disk (fsync'ed)."""
    f = folder / TEST_FILE
    if f.exists() and f.stat().st_size == nbytes:
        return f
    chunk = 8 << 20
    rng = random.Random(0)
    with f.open("wb") as out:
        left = nbytes
        while left > 0:
            n = min(chunk, left)
            out.write(rng.randbytes(n))
            left -= n
        out.flush()
        os.fsync(out.fileno())
    return f


# ----------------------------------------------------------------------------- built-in
def _offsets(size: int, block: int, random_order: bool) -> list[int]:
    offs = list(range(0, size - block + 1, block))
    if random_order:
        random.Random(0).shuffle(offs)
    return offs


def _open_direct(path: Path) -> int | None:
    flag = getattr(os, "O_DIRECT", None)
    if flag is None:
        return None
    try:
        return os.open(path, os.O_RDONLY | flag)
    except OSError:
        return None


def _read_pass(path: Path, block: int, random_order: bool, max_time_s: float) -> tuple[Pass, str]:
    size = path.stat().st_size
    if size < block:
        raise UsageError(f"{path} holds {size} bytes, less than one {block}-byte block")
    fd = _open_direct(path)
    method = "O_DIRECT (page cache bypassed)"
    if fd is None:
        ev = evict([path])
        method = ("posix_fadvise DONTNEED before the pass, buffered reads (the file system "
                  "refused O_DIRECT)") if ev.ok else f"buffered reads, cache not evicted: {ev.refused}"
        fd = os.open(path, os.O_RDONLY)
    buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT requires
    done = 0
    t0 = time.perf_counter()
    try:
        for off in _offsets(size, block, random_order):
            n = os.preadv(fd, [buf], off)
            if n <= 0:
                break
            done += n
            if time.perf_counter() - t0 > max_time_s:
                break
    finally:
        os.close(fd)
        buf.close()
    p = Pass("random" if random_order else "sequential", block, done, time.perf_counter() - t0)
    return p, method


def direct_read(path: Path, seq_block: int = SEQ_BLOCK, rand_block: int = RAND_BLOCK,
                max_time_s: float = MAX_TIME_S) -> Bandwidth:
    seq, method = _read_pass(path, seq_block, False, max_time_s)
    rnd, _ = _read_pass(path, rand_block, True, max_time_s)
    return Bandwidth(str(path), "dlperf direct reader", method, path.stat().st_size, seq, rnd)


# ----------------------------------------------------------------------------- fio
def fio_version(exe: str) -> str:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip().removeprefix("fio-")
    except (OSError, subprocess.SubprocessError):
        return "?"


def fio_command(exe: str, path: Path, rw: str, block: int, size: int, max_time_s: float,
                direct: bool) -> list[str]:
    return [exe, f"--name=dlperf-{rw}", f"--filename={path}", f"--rw={rw}", f"--bs={block}",
            f"--size={size - size % block}", f"--direct={int(direct)}", "--ioengine=psync",
            "--invalidate=1", "--randrepeat=1", "--norandommap=0", f"--runtime={max_time_s:g}",
            "--output-format=json"]


def parse_fio(text: str) -> tuple[int, float]:
    """(bytes read, seconds) of the first job of fio's JSON report. fio prints notices
    before the JSON on some versions: parsing starts at the first '{'."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON in fio's output")
    job = json.loads(text[start:])["jobs"][0]
    if job.get("error"):
        raise ValueError(f"fio job error {job['error']}")
    read = job["read"]
    nbytes = int(read["io_bytes"])
    ms = float(read.get("runtime") or job.get("job_runtime") or 0)
    if nbytes <= 0 or ms <= 0:
        raise ValueError("fio read nothing")
    return nbytes, ms / 1e3


def fio_read(exe: str, path: Path, seq_block: int = SEQ_BLOCK, rand_block: int = RAND_BLOCK,
             max_time_s: float = MAX_TIME_S) -> Bandwidth:
    size = path.stat().st_size
    passes, direct = {}, True
    for rw, block in (("read", seq_block), ("randread", rand_block)):
        for d in ((True, False) if direct else (False,)):
            out = subprocess.run(fio_command(exe, path, rw, block, size, max_time_s, d),
                                 capture_output=True, text=True, timeout=max_time_s + 60)
            try:
                nbytes, secs = parse_fio(out.stdout)
                direct = d
                break
            except (ValueError, KeyError, json.JSONDecodeError) as e:
                err = e
        else:
            raise RuntimeError(f"fio failed on {path}: {err}; {out.stderr.strip()[:200]}")
        passes[rw] = Pass("sequential" if rw == "read" else "random", block, nbytes, secs)
    method = ("fio --direct=1 (page cache bypassed)" if direct else
              "fio --direct=0 --invalidate=1 (cache dropped before each pass; the file "
              "system refused O_DIRECT)")
    return Bandwidth(str(path), f"fio {fio_version(exe)}", method, size, passes["read"],
                     passes["randread"])


def measure(path: Path, size: int, tool: str = "auto", max_time_s: float = MAX_TIME_S) -> Bandwidth:
    """Bandwidth of ``path`` (a file; or a folder, in which a test file of ``size`` bytes is
    written and removed afterwards) with fio where installed (``tool`` 'auto' or 'fio'),
    else the built-in reader ('direct')."""
    exe = shutil.which("fio")
    if tool == "fio" and exe is None:
        raise UsageError("--tool fio: fio is not installed (apt-get install fio)")
    made = None
    if path.is_dir():
        made = path = test_file(path, size)
    try:
        if exe and tool in ("auto", "fio"):
            return fio_read(exe, path, max_time_s=max_time_s)
        bw = direct_read(path, max_time_s=max_time_s)
        if tool == "auto":
            return Bandwidth(**{**bw.__dict__, "notes": ["fio is not installed: the built-in "
                                                         "reader measured"]})
        return bw
    finally:
        if made is not None:
            made.unlink(missing_ok=True)


def feeds(bytes_per_s: float, samples_per_s: float, bytes_per_sample: float) -> tuple[float, bool]:
    """(bytes/s the training rate needs, whether the storage delivers it): a loader reads
    ``bytes_per_sample`` for each of ``samples_per_s`` samples a second."""
    need = samples_per_s * bytes_per_sample
    return need, bytes_per_s >= need
