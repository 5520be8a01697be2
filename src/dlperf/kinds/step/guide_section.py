"""The guide's thread table beside this machine's own numbers, and whether its findings
hold here.

The published rows (``dlperf.reference``) are shown as a marked, cited group of their
own and enter no other table. The same ratios are computed on this machine's fcn5 at
batch 64 (the FCN of the table: DLBench's FCN-5 at its default batch), one row per
framework at its default variant, fp32 on the CPU. The paper's machine had 4 physical
cores, so "1 to 4 threads" there is "1 thread to all the physical cores" here, and its
"8 threads" is "twice the physical cores".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dlperf.core import environment, framework_table, units
from dlperf.core.aggregate import ConfigResult, aggregate, direction
from dlperf.core.store import Store
from dlperf.kinds.step.plain import fullest
from dlperf.reference import Reference, guide_table1
from dlperf.report.base import Filters, Section
from dlperf.report.tables import Table

NETWORK = "fcn5"
Verdict = Literal["holds", "does not hold", "not measured here", "no reference"]
#: tools of the paper that do not run on this platform (docs/frameworks.md says why)
NOT_RUNNABLE = {"caffe": "Caffe is not installable on this platform (docs/frameworks.md)"}
TORCH7_NOTE = ("The paper's 'Torch' is Torch7 (Lua); here 'torch' is PyTorch, its successor "
               "(a different front end over a shared lineage of C kernels).")


@dataclass(frozen=True)
class Finding:
    claim: str
    paper: str  # the number there
    here: str  # the number here, or why there is none
    verdict: Verdict
    command: str | None = None  # what to run when not measured here


def local_times(store: Store, cores: int) -> dict[str, dict[int, ConfigResult]]:
    """This machine's fcn5 at the reference batch: framework -> threads -> measured row."""
    ref = guide_table1()
    rows = aggregate(store.results(kind="step", network=NETWORK, batch_size=ref.batch_size,
                                   device="cpu", machine_id=environment.machine_id()))
    return fullest(rows, lambda r: r.spec.framework)


def _sweep(fw: str, threads: list[int]) -> str:
    return (f"dlperf sweep --networks {NETWORK} --frameworks {fw} --threads "
            f"{','.join(map(str, sorted(set(threads))))} --batch-size {guide_table1().batch_size}")


def findings(here: dict[str, dict[int, ConfigResult]], cores: int,
             ref: Reference | None = None) -> list[Finding]:
    """The paper's findings about threads, each checked on this machine's numbers. A ratio
    within 2% of 1 (``analysis.SAME_WITHIN``) counts as no difference."""
    ref = ref or guide_table1()
    pc, out = ref.physical_cores, []
    t = {fw: {n: r.median_s for n, r in by.items()} for fw, by in here.items()}
    wanted = [1, cores, 2 * cores]
    for row in ref.rows:  # 1: every tool is faster on all its cores than on one thread
        fw = row.framework
        p1, pn = ref.time(fw, 1), ref.time(fw, pc)
        ps = f"{p1 / pn:.2f}x from 1 to {pc} threads" if p1 and pn else "n.a."
        h = t.get(fw, {})
        claim = f"{fw}: all the physical cores beat one thread"
        if 1 in h and cores in h and cores > 1:
            s = h[1] / h[cores]
            out.append(Finding(claim, ps, f"{s:.2f}x from 1 to {cores} threads",
                               "holds" if direction(1 / s) == "faster" else "does not hold"))
        else:
            out.append(_missing(claim, ps, fw, wanted))
    if all(fw in t and 1 in t[fw] and cores in t[fw] for fw in ("torch", "tensorflow")):
        st, sf = (t[fw][1] / t[fw][cores] for fw in ("torch", "tensorflow"))
        out.append(Finding("Torch gains more from the cores than TensorFlow",
                           f"{_speedup(ref, 'torch')} vs {_speedup(ref, 'tensorflow')}",
                           f"{st:.2f}x vs {sf:.2f}x", "holds" if direction(sf / st) == "faster" else "does not hold"))
    else:
        out.append(_missing("Torch gains more from the cores than TensorFlow",
                            f"{_speedup(ref, 'torch')} vs {_speedup(ref, 'tensorflow')}",
                            "torch,tensorflow", wanted))
    for row in ref.rows:  # 3: past the physical cores
        fw = row.framework
        pn, p2 = ref.time(fw, pc), ref.time(fw, 2 * pc)
        if not (pn and p2):
            paper, slower = "n.a.", None
        else:
            paper = (f"{p2 / pn:.2f}x the time at {pc} threads with {2 * pc} "
                     f"({'slower' if p2 > pn else 'faster'})")
            slower = p2 > pn
        claim = (f"{fw}: more threads than physical cores "
                 + ("slows it down" if slower else "still speeds it up"
                    if slower is False else "(no published number)"))
        h = t.get(fw, {})
        beyond = [n for n in h if n > cores]
        if cores in h and beyond:
            n = max(beyond)
            r = h[n] / h[cores]
            change = direction(r)
            text = f"{r:.2f}x the time at {cores} threads with {n} ({change})"
            verdict: Verdict = ("no reference" if slower is None else "holds"
                                if change == ("slower" if slower else "faster") else "does not hold")
            out.append(Finding(claim, paper, text, verdict))
        else:
            out.append(_missing(claim, paper, fw, wanted))
    slow = [fw for fw, h in t.items() if cores in h and any(n > cores for n in h)
            and direction(h[max(n for n in h if n > cores)] / h[cores]) == "slower"]
    any_past = any(cores in h and any(n > cores for n in h) for h in t.values())
    claim = "More threads than physical cores can slow training down"
    paper = _past(ref, "caffe")
    if any_past:
        out.append(Finding(claim, paper, ("slower past the cores: " + ", ".join(slow)) if slow
                           else "no framework measured here was slower past the cores",
                           "holds" if slow else "does not hold"))
    else:
        out.append(_missing(claim, paper, "torch,tensorflow", wanted))
    p_tf, p_to = ref.time("tensorflow", 1), ref.time("torch", 1)
    claim = "TensorFlow is the slowest at one thread"
    paper = f"tensorflow {p_tf:g} s vs torch {p_to:g} s ({p_tf / p_to:.1f}x)"
    if 1 in t.get("tensorflow", {}) and 1 in t.get("torch", {}):
        a, b = t["tensorflow"][1], t["torch"][1]
        out.append(Finding(claim, paper, f"tensorflow {units.seconds(a)} vs torch "
                           f"{units.seconds(b)} ({a / b:.2f}x)", "holds" if direction(a / b) == "slower" else
                           "does not hold"))
    else:
        out.append(_missing(claim, paper, "torch,tensorflow", [1]))
    return out


def _speedup(ref: Reference, fw: str) -> str:
    a, b = ref.time(fw, 1), ref.time(fw, ref.physical_cores)
    return f"{a / b:.2f}x" if a and b else "n.a."


def _past(ref: Reference, fw: str) -> str:
    a, b = ref.time(fw, ref.physical_cores), ref.time(fw, 2 * ref.physical_cores)
    return (f"{fw} {a:g} s at {ref.physical_cores} threads, {b:g} s at "
            f"{2 * ref.physical_cores} ({b / a:.1f}x)") if a and b else "n.a."


def _missing(claim: str, paper: str, fw: str, threads: list[int]) -> Finding:
    if fw in NOT_RUNNABLE:
        return Finding(claim, paper, NOT_RUNNABLE[fw], "not measured here")
    names = fw.split(",")
    absent = [n for n in names if not framework_table.installed(n)] if all(
        n in framework_table.BACKENDS for n in names) else []
    why = f" ({', '.join(absent)} not installed)" if absent else ""
    return Finding(claim, paper, "not measured here" + why, "not measured here",
                   _sweep(fw, threads))


def reference_table(here: dict[str, dict[int, ConfigResult]], cores: int, ref: Reference) -> Table:
    threads = sorted(set(ref.threads) | {n for by in here.values() for n in by})
    headers = ["source", "framework", *[f"{n} thread{'s' if n > 1 else ''}" for n in threads]]
    rows, values = [], []
    label = f"published [1]: {ref.cpu}, {ref.physical_cores} cores"
    for r in ref.rows:
        vals = [r.seconds.get(n) for n in threads]
        rows.append([label, r.framework, *[_cell(v, n in r.seconds) for v, n in zip(vals, threads, strict=True)]])
        values.append([label, r.framework, *vals])
    mine = f"measured here: {environment.machine()['cpu_model']}, {cores} cores"
    for fw, by in sorted(here.items()):
        vals = [by[n].median_s if n in by else None for n in threads]
        rows.append([mine, fw, *[_cell(v, False) for v in vals]])
        values.append([mine, fw, *vals])
    return Table(
        title=f"Threads: the guide's table beside this machine (FCN, batch {ref.batch_size})",
        headers=headers, rows=rows, values=values,
        caption="Time per mini-batch in seconds. The 'published' rows are reference data "
        "from the source below, not measurements of dlperf: they enter no other table. "
        f"'measured here': {NETWORK} at batch {ref.batch_size}, each framework's default "
        "variant, fp32.",
        footnotes=["[1] " + " ".join(ref.citation), TORCH7_NOTE])


def _cell(v: float | None, published: bool) -> str:
    """A published 'na' reads 'n.a.'; a count not measured here (or not published) is
    blank."""
    if v is None:
        return "n.a." if published else ""
    return f"{v:.4g}"


def findings_table(found: list[Finding]) -> Table:
    return Table(title="The paper's findings, checked here", headers=[
        "finding", "in the paper", "here", "verdict", "to measure it"],
        rows=[[f.claim, f.paper, f.here, f.verdict, f.command or ""] for f in found])


def guide_section(store: Store, out: Path, filters: Filters) -> Section | None:
    if not store.results(kind=None, **filters.where()):
        return None
    cores = environment.physical_cores()
    ref = guide_table1()
    here = local_times(store, cores)
    return Section("reference", "Published reference: the guide's thread table",
                   tables=[reference_table(here, cores, ref), findings_table(
                       findings(here, cores, ref))],
                   text=f"Reference rows are published numbers ({ref.cpu}, "
                   f"{ref.physical_cores} physical cores), shown for comparison and never "
                   f"counted as measurements. This machine has {cores} physical cores: the "
                   f"paper's 1 to {ref.physical_cores} threads is 1 to {cores} here, and its "
                   f"{2 * ref.physical_cores} threads is {2 * cores} here.")
