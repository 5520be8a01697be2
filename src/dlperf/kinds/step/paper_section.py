"""DLBench's own Table 4 beside this machine and beside today's model of DLBench's
hardware, and the software's progress since 2016 that the gap shows.

Each paper cell (a tool's time per mini-batch on the paper's desktop, an i7-3820 with 4
cores, or on its GTX 1080) is set beside this machine's measurement at the same network
and batch (PyTorch beside the paper's Torch7, TensorFlow beside TensorFlow; the paper's
1 and 4 threads are 1 thread and all the physical cores here) and beside the model's
prediction for the paper's own hardware from its catalogue entry (``i7-3820``,
``gtx1080``): today's kernels on 2016's machines. The paper's time over that prediction
is what 2016's software lost against today's, hardware held fixed. The paper's cells are
shown, never fitted: the model never sees them.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from dlperf.core import environment
from dlperf.core.store import Store
from dlperf.kinds.step.dlbench_findings_section import findings_table
from dlperf.kinds.step.paper import ABSENT, CLASSES, DESKTOP, FRAMEWORK, GPU, here_times, predicted
from dlperf.reference import Table4, dlbench_table4
from dlperf.report.base import Filters, Section
from dlperf.report.tables import Table

#: gaps within this share of each other are called the same
SAME = 0.15


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2g}x"


def cells_table(t4: Table4, here: dict, cores: int) -> Table:
    rows, values = [], []
    for net in t4.networks:
        b = t4.batch[net]
        m_desk, m_gpu = predicted(net, DESKTOP, b), predicted(net, GPU, b)
        for tool in t4.tools(net):
            fw = FRAMEWORK.get(tool)
            mine = here.get((net, fw), {}) if fw else {}
            h1, hp = (mine[t].median_s if t in mine else None for t in (1, cores))
            p1, p4, pg = (t4.time(net, tool, c) for c in ("d1", DESKTOP, GPU))
            r_desk = p4 / m_desk if p4 and m_desk else None
            r_gpu = pg / m_gpu if pg and m_gpu else None
            name = tool if fw else f"{tool}*"
            rows.append([net, name, _s(p1), _s(p4), _s(pg), _s(h1), _s(hp), _s(m_desk),
                         _x(r_desk), _s(m_gpu), _x(r_gpu)])
            values.append([net, name, p1, p4, pg, h1, hp, m_desk, r_desk, m_gpu, r_gpu])
    return Table(
        title="DLBench's Table 4 beside this machine and today's model of its hardware",
        headers=["network", "tool", "1 thread", "4 threads", "GTX 1080", "1 thread",
                 f"{cores} threads", "desktop, 4 threads", "paper / model", "GTX 1080",
                 "paper / model"],
        groups=[("", 2), ("DLBench 2016: i7-3820 desktop, GTX 1080", 3),
                ("this machine (PyTorch, TensorFlow)", 2),
                ("today's model of DLBench's hardware", 4)],
        rows=rows, values=values,
        caption=(f"Seconds per mini-batch at the paper's batches ({_batches(t4)}). This "
                 f"machine: the paper's 1 and 4 threads (its desktop's cores) are 1 thread "
                 f"and its {cores} physical cores here. 'paper / model': the paper's time over "
                 "the model's prediction for the same hardware (its catalogue entry, never "
                 "fitted on the paper): how much slower 2016's software was than today's "
                 "kernels on that machine."),
        footnotes=[" ".join(t4.citation[:1]), "The paper's 'Torch' is Torch7 (Lua); PyTorch "
                   "stands beside it here. * no measurement here: "
                   + "; ".join(ABSENT.values()) + "."])


def _batches(t4: Table4) -> str:
    return ", ".join(f"{n} {b}" for n, b in t4.batch.items())


def progress(t4: Table4, tool: str, cls: str, column: str) -> float | None:
    """The geometric mean of paper / model over the class's networks the tool ran."""
    ratios = [p / m for net in CLASSES[cls] if (p := t4.time(net, tool, column))
              and (m := predicted(net, column, t4.batch[net]))]
    return math.exp(statistics.fmean(math.log(r) for r in ratios)) if ratios else None


def progress_table(t4: Table4) -> tuple[Table, list[str]]:
    tools = list(dict.fromkeys(t for _, t in t4.cells))
    columns = (("d1", "desktop, 1 thread"), (DESKTOP, "desktop, 4 threads"),
               ("s16", "server, 16 threads"), (GPU, "GTX 1080"), ("k80", "K80"))
    rows, sentences = [], []
    for cls in CLASSES:
        for tool in tools:
            got = [progress(t4, tool, cls, c) for c, _ in columns]
            if any(got):
                rows.append([cls, tool, *(_x(g) for g in got)])
        sentences.append(_sentence(t4, cls, tools))
    return Table(title="The software's progress since 2016: the paper's time over today's "
                 "model on the same hardware", headers=["class", "tool",
                                                        *(n for _, n in columns)],
                 rows=rows, caption="Geometric mean over the class's networks; above 1: "
                 "2016's tool took that many times what the model gives today's kernels.",
                 footnotes=sentences), sentences


def _sentence(t4: Table4, cls: str, tools: list[str]) -> str:
    cpu = {t: g for t in tools if (g := progress(t4, t, cls, DESKTOP))}
    gpu = {t: g for t in tools if (g := progress(t4, t, cls, GPU))}
    if not cpu and not gpu:
        return f"{cls}: no cell to compare."

    def span(d: dict[str, float]) -> str:
        lo, hi = min(d, key=d.get), max(d, key=d.get)
        return (f"{d[lo]:.2g}x ({lo}) to {d[hi]:.2g}x ({hi})" if lo != hi
                else f"{d[lo]:.2g}x ({lo})")

    tail = ""
    if cpu and gpu:
        c, g = statistics.median(cpu.values()), statistics.median(gpu.values())
        if abs(math.log(c / g)) < math.log(1 + SAME):
            tail = (f"; about the same gap on both (median {c:.2g}x on the CPU, {g:.2g}x on "
                    "the GPU)")
        else:
            tail = (f"; 2016's software left more on the {'CPU' if c > g else 'GPU'} "
                    f"(median {c:.2g}x on the CPU against {g:.2g}x on the GPU)")
    return (f"{cls}: on DLBench's desktop the 2016 tools took {span(cpu) if cpu else '-'} "
            f"today's predicted time, on its GTX 1080 {span(gpu) if gpu else '-'}{tail}.")


def paper_section(store: Store, out: Path, filters: Filters) -> Section | None:
    if not store.results(kind="step", **filters.where()):
        return None
    t4 = dlbench_table4()
    cores = environment.physical_cores()
    here = here_times(store, t4)
    table, sentences = progress_table(t4)
    return Section("dlbench_paper", "DLBench's own numbers beside this machine",
                   tables=[cells_table(t4, here, cores), findings_table(t4, here, cores),
                           table],
                   text=" ".join(sentences), terminal=2)
