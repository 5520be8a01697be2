"""Published reference numbers, shipped as data and read as reference rows.

A reference row is a number someone else measured on their machine and published; it is
shown beside the user's own measurements, always marked and cited, and is never a
RunResult: it never enters the store, a DLBench table, a ranking or an average.

``guide_table1.csv``: the guide's thread table (time per mini-batch of a fully connected
network, batch 64, on a 4-core i7-3820, for Caffe, TensorFlow and Torch at 1, 2, 4 and 8
threads), with its citation in the file's comment lines.

``dlbench_table4.csv``: DLBench's Table 4 (Shi et al. 2016): time per mini-batch of
Caffe, CNTK, TensorFlow and Torch7 for FCN-5/8, AlexNet, ResNet-50 and the LSTMs on its
desktop (i7-3820) at 1-8 threads, its server (2 x E5-2630 v3) at 1-32 threads and three
GPUs, with the software versions of its Table 1 in the file's comment lines.

``published_gpu.csv``: ResNet-50 training throughput published for GPUs that have a
catalogue entry (one to eight GPUs, fp32/TF32 and mixed precision), with its citation:
what ``dlperf validate --published`` predicts from the catalogue alone.

``measured_gpu.csv``: the one exception to "someone else": steps dlperf's own sweep
measured on a GPU lent to its developers that is not the reference curves' GPU, five
networks (GPT-2 among them) at four precisions, the machine, software and command in its
comment lines;
``dlperf validate --published`` predicts them the same way, in a table of their own.

``measured_gpu_memory.csv``: likewise dlperf's own, the allocator's peak of single
training steps on a lent H200, which ``dlperf validate --published`` sets the memory model
beside and ``dlperf advise`` quotes as its error on a catalogue GPU.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources


@dataclass(frozen=True)
class ReferenceRow:
    """One framework's published times: thread count -> seconds per mini-batch (None
    where the source has none, 'na')."""

    framework: str
    seconds: dict[int, float | None]


@dataclass(frozen=True)
class Reference:
    """A published table: its rows and what they were measured on, as the source says."""

    name: str
    citation: tuple[str, ...]  # the file's comment lines, verbatim
    network: str  # the network in the source's words
    batch_size: int
    cpu: str
    physical_cores: int
    rows: tuple[ReferenceRow, ...]

    def time(self, framework: str, threads: int) -> float | None:
        row = next((r for r in self.rows if r.framework == framework), None)
        return row.seconds.get(threads) if row else None

    @property
    def threads(self) -> list[int]:
        return sorted({t for r in self.rows for t in r.seconds})


def _number(text: str) -> float | None:
    return None if text.strip().lower() in ("na", "n.a.", "") else float(text)


def _stated(pattern: str, citation: str, what: str, name: str = "guide_table1.csv") -> str:
    """A fact the citation states (batch size, CPU, cores); a file that no longer states it
    is a packaging error, said loudly rather than guessed."""
    m = re.search(pattern, citation)
    if not m:
        raise ValueError(f"{name}: its header no longer states the {what}")
    return m.group(1)


def _read(name: str) -> tuple[tuple[str, ...], list[str]]:
    """A shipped CSV's comment lines (its citation, verbatim) and its other lines."""
    text = resources.files("dlperf.reference").joinpath(name).read_text()
    comments = tuple(line.lstrip("# ").rstrip() for line in text.splitlines()
                     if line.startswith("#"))
    return comments, [line for line in text.splitlines() if line and not line.startswith("#")]


@cache
def guide_table1() -> Reference:
    """The guide's Table I (seed slides and paper draft), citing DLBench."""
    comments, body = _read("guide_table1.csv")
    rows = []
    for rec in csv.DictReader(body):
        seconds = {int(k.removeprefix("threads_")): _number(v) for k, v in rec.items()
                   if k.startswith("threads_")}
        rows.append(ReferenceRow(framework=rec["framework"], seconds=seconds))
    cite = " ".join(comments)
    return Reference(
        name="guide_table1", citation=comments,
        network="fully connected network (FCN)",
        batch_size=int(_stated(r"batch (\d+)", cite, "batch size")),
        cpu=_stated(r"on an? (Intel [\w-]+)", cite, "CPU"),
        physical_cores=int(_stated(r"(\d+) physical cores", cite, "core count")),
        rows=tuple(rows))


@dataclass(frozen=True)
class PublishedStep:
    """One published training throughput on a GPU of the catalogue."""

    gpu: str  # as the source names it
    device: str  # the catalogue entry
    gpus: int
    precision: str  # the precision the model predicts it at
    published_precision: str  # as the source names it
    network: str
    batch_size: int  # all GPUs together
    samples_per_s: float
    note: str
    size: str | None = None  # the network's size where not its default

    @property
    def time_s(self) -> float:
        """Seconds per mini-batch of ``batch_size`` samples."""
        return self.batch_size / self.samples_per_s


@dataclass(frozen=True)
class Published:
    citation: tuple[str, ...]
    rows: tuple[PublishedStep, ...]


@cache
def published_gpu() -> Published:
    """ResNet-50 training throughputs published for catalogue GPUs (``published_gpu.csv``)."""
    return _steps("published_gpu.csv")


@cache
def measured_gpu() -> Published:
    """Steps dlperf measured on a lent catalogue GPU, not the reference's (``measured_gpu.csv``)."""
    return _steps("measured_gpu.csv")


@dataclass(frozen=True)
class MeasuredPeak:
    """One training step's allocator peak that dlperf measured on a lent GPU."""

    gpu: str
    device: str  # the catalogue entry
    framework: str
    network: str
    size: str
    precision: str
    batch_size: int
    device_peak_bytes: int
    session: str  # 'first': seen before the model's GPU rule was written; 'held-out': after


@cache
def measured_gpu_memory() -> tuple[tuple[str, ...], tuple[MeasuredPeak, ...]]:
    """The shipped GPU peaks (``measured_gpu_memory.csv``): its comment lines and rows."""
    comments, body = _read("measured_gpu_memory.csv")
    rows = tuple(MeasuredPeak(gpu=r["gpu"], device=r["device"], framework=r["framework"],
                              network=r["network"], size=r["size"], precision=r["precision"],
                              batch_size=int(r["batch"]),
                              device_peak_bytes=int(r["device_peak_bytes"]),
                              session=r["session"])
                 for r in csv.DictReader(body))
    return comments, rows


def _steps(name: str) -> Published:
    comments, body = _read(name)
    rows = tuple(PublishedStep(gpu=r["gpu"], device=r["device"], gpus=int(r["gpus"]),
                               precision=r["precision"],
                               published_precision=r["published_precision"],
                               network=r["network"], batch_size=int(r["batch"]),
                               samples_per_s=float(r["samples_per_s"]), note=r["note"],
                               size=r.get("size") or None)
                 for r in csv.DictReader(body))
    return Published(citation=comments, rows=rows)


#: DLBench's machines: a column of its Table 4 -> (the catalogue entry, threads; None on a
#: GPU). Its desktop is the i7-3820 (columns d1..d8), its server two E5-2630 v3 (s1..s32).
TABLE4_MACHINES = {"d": "i7-3820", "s": "e5-2630v3-x2"}
TABLE4_GPUS = ("gtx980", "gtx1080", "k80")


@dataclass(frozen=True)
class Table4:
    """DLBench's Table 4: (network, tool) -> column -> seconds per mini-batch (None: '-')."""

    citation: tuple[str, ...]
    cells: dict[tuple[str, str], dict[str, float | None]]
    batch: dict[str, int]  # network -> the mini-batch it was measured at

    def time(self, network: str, tool: str, column: str) -> float | None:
        return self.cells.get((network, tool), {}).get(column)

    @property
    def networks(self) -> list[str]:
        return list(dict.fromkeys(n for n, _ in self.cells))

    def tools(self, network: str) -> list[str]:
        return [t for n, t in self.cells if n == network]


def table4_machine(column: str) -> tuple[str, int | None]:
    """A column's machine: ('i7-3820', 4) for 'd4', ('gtx1080', None) for 'gtx1080'."""
    if column in TABLE4_GPUS:
        return column, None
    return TABLE4_MACHINES[column[0]], int(column[1:])


@cache
def dlbench_table4() -> Table4:
    comments, body = _read("dlbench_table4.csv")
    cite = " ".join(comments)
    cells: dict[tuple[str, str], dict[str, float | None]] = {}
    for rec in csv.DictReader(body):
        cells[(rec["network"], rec["tool"])] = {
            k: None if v.strip() == "-" else float(v) for k, v in rec.items()
            if k not in ("network", "tool")}
    fcn, cnn, lstm = (int(_stated(p, cite, what, "dlbench_table4.csv")) for p, what in (
        (r"FCN-5/8 (\d+)", "FCN batch"), (r"AlexNet/ResNet-50 (\d+)", "CNN batch"),
        (r"LSTM (\d+)", "LSTM batch")))
    batch = {n: fcn if n.startswith("fcn") else lstm if n.startswith("lstm") else cnn
             for n, _ in cells}
    return Table4(citation=comments, cells=cells, batch=batch)
