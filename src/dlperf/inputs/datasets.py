"""Data sets generated locally, deterministically, once per shape, in a cache folder.

No downloads: every sample is made from its index and a fixed seed, so the same data set
is the same bytes on every machine. Content is known: seeded noise plus a pattern that
depends on the label (horizontal stripes whose frequency and phase follow the class for
images; a shifted block of features for vectors; next-token targets for token sequences).

Formats (``DataSpec.format``):
- ``jpeg``, ``png``: one image file per sample (``00000.jpg``, ...), made by Pillow,
  read and decoded every time a sample is loaded: read cost plus decode cost;
- ``raw``: fixed-size records of the input tensor's bytes in shards of ``SHARD`` samples
  (``shard-00000.bin``), read with ``pread`` and used as they are: read cost only.
Every folder also holds ``labels.npy`` and ``meta.json`` (written last: a folder with it
is complete). Folders are made under a temporary name and renamed into place, so two
processes making the same data set at once never see half of one.

Where: ``$DLPERF_DATA_DIR``, else ``$XDG_CACHE_HOME/dlperf/data`` (``~/.cache/...``);
``dlperf dataflow clear`` removes it.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dlperf.core.errors import UsageError
from dlperf.workloads.dlbench import LSTMLMConfig

VERSION = 1  # bump when the generator's output changes: old folders are then unused
SHARD = 256  # raw records per shard file
JPEG_QUALITY = 90
SEED = 0
SampleKind = Literal["image", "vector", "tokens"]


def root() -> Path:
    """The cache folder of generated data sets."""
    env = os.environ.get("DLPERF_DATA_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dlperf" / "data"


@dataclass(frozen=True)
class DataSpec:
    """One generated data set: what a sample is, how many, in which format."""

    kind: SampleKind
    shape: tuple[int, ...]  # one sample: image (H, W, C); vector (n,); tokens (T,)
    classes: int  # labels lie in [0, classes); the vocabulary for tokens
    samples: int
    format: str = "raw"

    @property
    def dtype(self) -> np.dtype:
        return np.dtype({"image": np.uint8, "vector": np.float32, "tokens": np.int32}[self.kind])

    @property
    def record_bytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize

    @property
    def name(self) -> str:
        shape = "x".join(map(str, self.shape))
        return f"{self.kind}-{shape}-c{self.classes}-n{self.samples}-{self.format}-v{VERSION}"

    def in_memory_bytes(self) -> int:
        """Bytes of the decoded data set held in host memory (inputs and labels)."""
        label = int(np.prod(self.shape)) * 4 if self.kind == "tokens" else 8
        return self.samples * (self.record_bytes + label)


def for_network(config: Any, samples: int, fmt: str) -> DataSpec:
    """The data set a network trains on: its input shape, its classes. Images are stored
    as height x width x channels bytes (as image files hold them); the loader turns them
    into the network's channels-first floats."""
    if isinstance(config, LSTMLMConfig):
        kind: SampleKind = "tokens"
        shape, classes = (config.seq_len,), config.vocab
    else:
        ishape = tuple(config.input_shape())
        classes = config.classes
        if len(ishape) == 3:
            kind, shape = "image", (ishape[1], ishape[2], ishape[0])
        else:
            kind, shape = "vector", ishape
    if kind != "image" and fmt != "raw":
        raise UsageError(f"--data-format {fmt} holds images; this network takes {kind}s: "
                         "use --data-format raw")
    if kind == "image" and shape[2] not in (1, 3):
        raise UsageError(f"images with {shape[2]} channels cannot be stored as {fmt}")
    return DataSpec(kind, shape, classes, samples, fmt)


# ----------------------------------------------------------------------------- content
def label(spec: DataSpec, i: int) -> np.ndarray | int:
    if spec.kind == "tokens":
        return np.roll(sample(spec, i), -1)  # the next token at every step
    return i % spec.classes


def sample(spec: DataSpec, i: int) -> np.ndarray:
    """Sample ``i``: seeded noise plus a label-dependent pattern (known content)."""
    rng = np.random.default_rng([SEED, i])
    c = i % spec.classes
    if spec.kind == "image":
        h, w, ch = spec.shape
        rows = np.arange(h, dtype=np.float32)[:, None, None]
        stripes = 60.0 * np.sin(2 * np.pi * rows * (1 + c % 8) / h + c)
        noise = rng.normal(128.0, 30.0, size=(h, w, ch)).astype(np.float32)
        return np.clip(noise + stripes, 0, 255).astype(np.uint8)
    if spec.kind == "vector":
        x = rng.standard_normal(spec.shape, dtype=np.float32)
        block = max(1, spec.shape[0] // spec.classes)
        x[(c * block) % spec.shape[0]:][:block] += 2.0
        return x
    return rng.integers(0, spec.classes, size=spec.shape, dtype=np.int32)


def arrays(spec: DataSpec) -> tuple[np.ndarray, np.ndarray]:
    """The whole data set decoded, in memory (input 'memory')."""
    x = np.stack([sample(spec, i) for i in range(spec.samples)])
    y = np.asarray([label(spec, i) for i in range(spec.samples)],
                   dtype=np.int64)
    return x, y


def encode(img: np.ndarray, fmt: str) -> bytes:
    from PIL import Image

    mode = "L" if img.shape[2] == 1 else "RGB"
    buf = io.BytesIO()
    pil = Image.fromarray(img[:, :, 0] if mode == "L" else img, mode=mode)
    if fmt == "jpeg":
        pil.save(buf, format="JPEG", quality=JPEG_QUALITY)
    else:
        pil.save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


# ----------------------------------------------------------------------------- on disk
def path_of(spec: DataSpec) -> Path:
    return root() / spec.name


def file_name(spec: DataSpec, i: int) -> str:
    return f"{i:05d}.{'jpg' if spec.format == 'jpeg' else 'png'}"


def ensure(spec: DataSpec, on_progress: Any = None) -> Path:
    """The data set's folder, generated first if it is not there (once per shape)."""
    final = path_of(spec)
    if (final / "meta.json").exists():
        return final
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=final.parent))
    except OSError as e:
        raise UsageError(f"cannot write the data cache {final.parent}: {e}") from None
    try:
        _write(spec, tmp, on_progress)
        try:
            tmp.rename(final)
        except OSError:  # made meanwhile by another process: keep theirs
            if not (final / "meta.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _write(spec: DataSpec, d: Path, on_progress: Any) -> None:
    labels = np.asarray([label(spec, i) for i in range(spec.samples)], dtype=np.int64)
    if spec.format == "raw":
        for s in range(0, spec.samples, SHARD):
            with (d / f"shard-{s // SHARD:05d}.bin").open("wb") as f:
                for i in range(s, min(s + SHARD, spec.samples)):
                    f.write(sample(spec, i).tobytes())
                _flush(f)
            if on_progress:
                on_progress(min(s + SHARD, spec.samples), spec.samples)
    else:
        for i in range(spec.samples):
            with (d / file_name(spec, i)).open("wb") as f:
                f.write(encode(sample(spec, i), spec.format))
                _flush(f)
            if on_progress and (i + 1) % 64 == 0:
                on_progress(i + 1, spec.samples)
    np.save(d / "labels.npy", labels)
    meta = {"kind": spec.kind, "shape": list(spec.shape), "classes": spec.classes,
            "samples": spec.samples, "format": spec.format, "dtype": spec.dtype.str,
            "record_bytes": spec.record_bytes, "shard": SHARD, "version": VERSION}
    (d / "meta.json").write_text(json.dumps(meta))


def _flush(f: Any) -> None:
    # on disk, not only in dirty pages: a dirty page cannot be evicted for a cold read
    f.flush()
    os.fsync(f.fileno())


def files(spec: DataSpec, d: Path) -> list[Path]:
    """The files a pass over the data set reads."""
    if spec.format == "raw":
        return [d / f"shard-{s:05d}.bin" for s in range((spec.samples + SHARD - 1) // SHARD)]
    return [d / file_name(spec, i) for i in range(spec.samples)]


def size_on_disk(spec: DataSpec, d: Path) -> int:
    return sum(p.stat().st_size for p in files(spec, d))


def clear() -> tuple[Path, int]:
    """Remove every generated data set; (folder, bytes freed)."""
    r = root()
    if not r.exists():
        return r, 0
    freed = sum(p.stat().st_size for p in r.rglob("*") if p.is_file())
    shutil.rmtree(r)
    return r, freed


# ----------------------------------------------------------------------------- reading
class Reader:
    """Reads and decodes samples of a generated data set; framework-free, so every
    framework's pipeline (and a loader process forked from it) can share it."""

    def __init__(self, spec: DataSpec, d: Path):
        self.spec, self.dir = spec, d
        self.labels = np.load(d / "labels.npy")
        self._fds: dict[int, int] = {}
        self._pid = os.getpid()

    def read(self, i: int) -> bytes:
        """The stored bytes of sample ``i`` (a whole image file, or one raw record)."""
        if self.spec.format != "raw":
            return (self.dir / file_name(self.spec, i)).read_bytes()
        if os.getpid() != self._pid:  # a forked loader process opens its own files
            self._fds, self._pid = {}, os.getpid()
        shard = i // SHARD
        fd = self._fds.get(shard)
        if fd is None:
            fd = self._fds[shard] = os.open(self.dir / f"shard-{shard:05d}.bin", os.O_RDONLY)
        n = self.spec.record_bytes
        return os.pread(fd, n, (i % SHARD) * n)

    def decode(self, buf: bytes) -> np.ndarray:
        """The sample as an array (image: H x W x C bytes)."""
        if self.spec.format == "raw":
            return np.frombuffer(buf, dtype=self.spec.dtype).reshape(self.spec.shape)
        from PIL import Image

        img = np.asarray(Image.open(io.BytesIO(buf)))
        return img[:, :, None] if img.ndim == 2 else img


# ----------------------------------------------------------------------------- preparation
MEAN, STD = 0.5, 0.25  # images: x / 255 normalised to about zero mean, unit spread


def prepare(spec: DataSpec, x: np.ndarray, i: int, channels_last: bool = False) -> np.ndarray:
    """The augmentation and layout every pipeline applies (numpy; tf.data uses its own ops
    for the same): images are flipped left-right on odd indices and become float32
    (x / 255 - 0.5) / 0.25, channels first (PyTorch) or last (TensorFlow, JAX); vectors
    and tokens are used as they are."""
    if spec.kind != "image":
        return np.array(x, dtype=np.int64 if spec.kind == "tokens" else np.float32)
    if i % 2:
        x = x[:, ::-1]
    if not channels_last:
        x = np.transpose(x, (2, 0, 1))
    return (x.astype(np.float32) / 255.0 - MEAN) / STD


def bytes_per_sample(spec: DataSpec, probe: int = 8) -> float:
    """Bytes a loader reads per sample: measured on the data set when it is on disk, else
    from encoding the first ``probe`` samples (raw records: their fixed size)."""
    d = path_of(spec)
    if (d / "meta.json").exists():
        return size_on_disk(spec, d) / spec.samples
    if spec.format == "raw":
        return float(spec.record_bytes)
    n = min(probe, spec.samples)
    return sum(len(encode(sample(spec, i), spec.format)) for i in range(n)) / n
