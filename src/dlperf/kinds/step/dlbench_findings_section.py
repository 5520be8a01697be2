"""DLBench's findings checked by name: each with the paper's numbers (its Table 4), this
machine's (or the model's, for hardware it cannot measure, marked so) and a verdict:
'holds', 'does not hold', 'holds (predicted)', 'does not hold (predicted)' or 'not
measurable here' with what it would take. A finding about a tool that cannot run here
(Caffe, CNTK) is shown with the paper's numbers only."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from dlperf.core.aggregate import direction
from dlperf.kinds.step.paper import ABSENT, CLASSES, predicted
from dlperf.reference import TABLE4_GPUS, Table4
from dlperf.report.tables import Table

#: "barely better": less than half the speed-up the added cores allow (4 -> 16: 2x)
BARELY = 0.5


@dataclass(frozen=True)
class PaperFinding:
    claim: str
    paper: str
    here: str
    verdict: str


def _pair_verdict(faster_here: bool | None, pred: bool = False) -> str:
    if faster_here is None:
        return "not measurable here"
    return ("holds" if faster_here else "does not hold") + (" (predicted)" if pred else "")


def _time(here: dict, net: str, fw: str, threads: int) -> float | None:
    row = here.get((net, fw), {}).get(threads)
    return row.median_s if row else None


def many_cores(t4: Table4, here: dict, cores: int) -> PaperFinding:
    speedups = {}
    for tool in ("caffe", "cntk", "tensorflow", "torch"):
        got = [a / b for n in t4.networks if (a := t4.time(n, tool, "s4"))
               and (b := t4.time(n, tool, "s16"))]
        if got:
            speedups[tool] = statistics.median(got)
    paper = "server, 4 -> 16 threads, median over networks: " + ", ".join(
        f"{t} {s:.2f}x" for t, s in speedups.items())
    if cores < 16:
        return PaperFinding("tools barely gain from 16 cores over 4", paper,
                            f"this machine has {cores} physical cores", "not measurable here")
    mine = [a / b for (n, fw) in here if (a := _time(here, n, fw, 4))
            and (b := _time(here, n, fw, 16))]
    s = statistics.median(mine) if mine else None
    return PaperFinding("tools barely gain from 16 cores over 4", paper,
                        f"median {s:.2f}x" if s else "no 4- and 16-thread runs stored",
                        _pair_verdict(s < 1 + BARELY * 3 if s else None))


def best_on_gpu(t4: Table4, cls: str) -> PaperFinding:
    """The paper's fastest tool on the GTX 1080 for a class; PyTorch against TensorFlow
    needs a GPU here."""
    wins = {}
    for n in CLASSES[cls]:
        times = {t: v for t in t4.tools(n) if (v := t4.time(n, t, "gtx1080"))}
        if times:
            wins[n] = min(times, key=times.get)
    paper = ", ".join(f"{n}: {t}" for n, t in wins.items())
    absent = sorted({t for t in wins.values() if t in ABSENT})
    why = "no GPU on this machine"
    if absent:
        why += f"; {', '.join(absent)} cannot run here ({ABSENT[absent[0]].split(': ')[1]})"
    return PaperFinding(f"on GPUs, the fastest tool for {cls}s", paper, why,
                        "not measurable here")


def rnn_cpu(t4: Table4, here: dict, cores: int) -> PaperFinding:
    p_tf, p_torch = t4.time("lstm32", "tensorflow", "d4"), t4.time("lstm32", "torch", "d4")
    paper = (f"lstm32, desktop 4 threads: CNTK {t4.time('lstm32', 'cntk', 'd4')} s fastest; "
             f"TensorFlow {p_tf} s, Torch {p_torch} s")
    h_tf, h_torch = _time(here, "lstm32", "tensorflow", cores), _time(here, "lstm32", "torch",
                                                                        cores)
    if h_tf is None or h_torch is None:
        return PaperFinding("for RNNs on a CPU, TensorFlow beats Torch (CNTK beats both)",
                            paper, f"lstm32 at {cores} threads not measured with both "
                            "(dlperf reproduce dlbench --brief)", "not measurable here")
    return PaperFinding("for RNNs on a CPU, TensorFlow beats Torch (CNTK beats both)", paper,
                        f"lstm32 at {cores} threads: TensorFlow {h_tf:.3g} s, PyTorch "
                        f"{h_torch:.3g} s (CNTK cannot run here)",
                        _pair_verdict(direction(h_tf / h_torch) == "faster"))


def rnn_gpu(t4: Table4) -> PaperFinding:
    paper = ", ".join(f"{t} {t4.time('lstm32', t, 'gtx1080')} s"
                      for t in t4.tools("lstm32"))
    return PaperFinding("for RNNs on a GPU, TensorFlow is fastest (CNTK slowest)",
                        f"lstm32, GTX 1080: {paper}", "no GPU on this machine",
                        "not measurable here")


def newest_gpu(t4: Table4) -> PaperFinding:
    cells = [(n, t) for n in t4.networks for t in t4.tools(n)
             if all(t4.time(n, t, g) for g in TABLE4_GPUS)]
    won = sum(t4.time(n, t, "gtx1080") <= min(t4.time(n, t, g) for g in TABLE4_GPUS)
              for n, t in cells)
    pred = {n: {g: predicted(n, g, t4.batch[n]) for g in TABLE4_GPUS} for n in t4.networks}
    fastest = [n for n, p in pred.items() if None not in p.values()
               and p["gtx1080"] <= min(p.values())]
    return PaperFinding(
        "the newest GPU (GTX 1080) is always the fastest", f"fastest in {won} of {len(cells)} "
        "tool x network cells", f"the model of today's kernels: fastest for {len(fastest)} of "
        f"{len(pred)} networks", _pair_verdict(len(fastest) == len(pred), pred=True))


def gpu_speedup(t4: Table4) -> PaperFinding:
    ratios = [min(d) / min(g) for n in t4.networks for t in t4.tools(n)
              if (d := [v for c in ("d1", "d2", "d4", "d8") if (v := t4.time(n, t, c))])
              and (g := [v for c in TABLE4_GPUS if (v := t4.time(n, t, c))])]
    return PaperFinding(
        "GPUs are one to two orders of magnitude faster than CPUs (up to 112x)",
        f"a tool's best GPU time against its best desktop time: median "
        f"{statistics.median(ratios):.0f}x, largest {max(ratios):.0f}x", "no GPU on this "
        "machine (on one: dlperf sweep --networks fcn5,alexnet,lstm32 --frameworks "
        "torch,tensorflow --devices cpu,gpu)",
        "not measurable here")


def batch_curves(t4: Table4) -> PaperFinding:
    b0, b1 = 64, 4096
    p0, p1 = predicted("fcn5", "gtx1080", b0), predicted("fcn5", "gtx1080", b1)
    model = (f"model, fcn5 on the GTX 1080: batch x{b1 // b0} -> time x{p1 / p0:.0f}"
             if p0 and p1 else "no prediction")
    return PaperFinding("Fig. 1: on GPUs, time per mini-batch grows with the batch, less "
                        "than in proportion at small batches", "a figure (no table); see "
                        "the paper", f"no GPU on this machine; {model} "
                        "(dlperf sweep --networks fcn5 --devices gpu --batch-size sweep draws the curves)",
                        "not measurable here")


def findings(t4: Table4, here: dict, cores: int) -> list[PaperFinding]:
    return [many_cores(t4, here, cores), best_on_gpu(t4, "FCN"), best_on_gpu(t4, "CNN"),
            rnn_cpu(t4, here, cores), rnn_gpu(t4), newest_gpu(t4), gpu_speedup(t4),
            batch_curves(t4)]


def findings_table(t4: Table4, here: dict, cores: int) -> Table:
    return Table(title="DLBench's findings, checked here",
                 headers=["finding", "in the paper (Table 4)", "here", "verdict"],
                 rows=[[f.claim, f.paper, f.here, f.verdict]
                       for f in findings(t4, here, cores)],
                 caption="'(predicted)': from the model of today's kernels on the paper's "
                 "hardware, which this machine cannot measure; the paper's tools that cannot "
                 "run here (Caffe, CNTK) are shown with its numbers only.")
