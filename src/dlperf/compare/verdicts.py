"""Matching the two sides' configurations and judging each: faster, slower, no
significant change, or too few repetitions to say (and how many would do).

Two results are the same configuration when everything but the machine and the software
is the same (their ``config_id``: network, size, framework, variant, device, threads,
batch, precision, options and measurement settings). When each side holds one machine,
configurations are matched across machines; otherwise on the same machine only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlperf.compare import stats
from dlperf.compare.sides import Loaded
from dlperf.core import speed_probe
from dlperf.core.aggregate import ConfigResult
from dlperf.core.errors import UsageError
from dlperf.core.spec import RunResult
from dlperf.core.stats import UNSTABLE_CV, robust_cv

TOO_FEW = "too few repetitions"


class Sample(ConfigResult):
    """One side of one configuration: its processes (``ConfigResult``'s median of
    per-process medians and spread between them), their step times and their state."""

    @classmethod
    def of(cls, runs: list[RunResult]) -> Sample:
        return cls(spec=runs[0].spec, results=list(runs), machine_id=runs[0].machine_id)

    @property
    def medians(self) -> list[float]:
        return [r.metrics.median_s for r in self.ok]  # type: ignore[union-attr]

    @property
    def steps(self) -> list[list[float]]:
        return [list(r.step_times_s) for r in self.ok]

    @property
    def speed_probe(self) -> dict[str, float]:
        """The machine's speed as its processes ran (``core.speed_probe``; the median of
        their probes; empty: none probed)."""
        return speed_probe.typical([r.metrics.speed_probe for r in self.ok
                                    if r.metrics and r.metrics.speed_probe])

    def disturbed(self) -> str | None:
        """Why this side's numbers may not be what the configuration does: a process whose
        steps vary more than the instability threshold, processes that disagree, or a
        warning a run recorded about its machine."""
        why = []
        cvs = [robust_cv(r.metrics.mad_s, r.metrics.median_s) for r in self.ok]  # type: ignore[union-attr]
        unstable = [cv for cv in cvs if cv > UNSTABLE_CV]
        if unstable:
            why.append(f"{len(unstable)} of {self.processes} processes unstable "
                       f"(cv up to {max(unstable):.0%})")
        between = self.between_cv
        if between is not None and between > UNSTABLE_CV:
            why.append(f"processes differ by {between:.0%}")
        notes = {w for r in self.ok for w in r.warnings if "disturb" in w or "injected" in w}
        return "; ".join(why + sorted(notes)) or None


@dataclass(frozen=True)
class Comparison:
    label: str
    config_id: str
    machines: tuple[str, str]
    a: Sample
    b: Sample
    interval: stats.Interval | None  # None: too few processes on a side
    needed: int | None  # processes per side that would resolve ``threshold``

    @property
    def verdict(self) -> str:
        return self.interval.verdict if self.interval else TOO_FEW


@dataclass(frozen=True)
class Outcome:
    comparisons: list[Comparison]
    summary: stats.Interval | None
    method: str
    level: float
    threshold: float

    def count(self, verdict: str) -> int:
        return sum(c.verdict == verdict for c in self.comparisons)

    def slowdowns(self, limit: float) -> list[Comparison]:
        """Configurations significantly slower, by more than ``limit`` (0.05: 5%)."""
        return [c for c in self.comparisons
                if c.verdict == "slower" and c.interval and c.interval.ratio > 1 + limit]


def compare(a: Loaded, b: Loaded, *, method: str = "welch", level: float = 0.95,
            threshold: float = 0.05) -> Outcome:
    if method not in stats.METHODS:
        raise UsageError(f"unknown method '{method}' (known: {', '.join(stats.METHODS)})")
    if not 0.5 <= level < 1:
        raise UsageError(f"confidence level {level} out of range (0.5 .. 0.999)")
    pairs = _match(a, b)
    comparisons = [_judge(ka, kb, a, b, method, level, threshold) for ka, kb in pairs]
    judged = [c.interval for c in comparisons if c.interval]
    if not judged:
        worst = min(min(c.a.processes, c.b.processes) for c in comparisons)
        raise UsageError(
            f"{len(comparisons)} configuration{'s' if len(comparisons) > 1 else ''} in common, "
            f"but with {worst} process{'es' if worst != 1 else ''} on a side; a verdict needs "
            f"at least {stats.MIN_PROCESSES} per side (dlperf sweep --repeat "
            f"{stats.MIN_PROCESSES})")
    summary = stats.geometric_summary(judged, level)
    return Outcome(comparisons, summary, method, level, threshold)


def _match(a: Loaded, b: Loaded) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    if _run_ids(a) == _run_ids(b):
        raise UsageError(f"'{a.side.text}' and '{b.side.text}' select the same results; "
                         "nothing to compare")
    if len(a.machines) == 1 and len(b.machines) == 1:
        by_config = {cfg: (cfg, m) for cfg, m in b.processes}
        pairs = [(k, by_config[k[0]]) for k in a.processes if k[0] in by_config]
    else:
        pairs = [(k, k) for k in a.processes if k in b.processes]
    if not pairs:
        extra = ("" if len(a.machines) == 1 and len(b.machines) == 1 else
                 f" on the same machine (A holds {len(a.machines)} machines, B "
                 f"{len(b.machines)}; pick one per side with machine=ID)")
        raise UsageError(f"'{a.side.text}' and '{b.side.text}' have no configuration in "
                         f"common{extra}")
    return sorted(pairs, key=lambda p: a.processes[p[0]][0].spec.label())


def _run_ids(side: Loaded) -> set[tuple[str, str | None, float | None]]:
    return {(r.spec.run_id, r.machine_id, r.started_at)
            for runs in side.processes.values() for r in runs}


def _judge(ka: tuple[str, str], kb: tuple[str, str], a: Loaded, b: Loaded, method: str,
           level: float, threshold: float) -> Comparison:
    sa, sb = Sample.of(a.processes[ka]), Sample.of(b.processes[kb])
    interval = None
    if min(sa.processes, sb.processes) >= stats.MIN_PROCESSES:
        interval = (stats.welch_log_ratio(sa.medians, sb.medians, level) if method == "welch"
                    else stats.hierarchical_bootstrap(sa.steps, sb.steps, level))
    needed = None
    if interval is None or (interval.verdict == "no significant change" and (
            interval.high > 1 + threshold or interval.low < 1 / (1 + threshold))):
        needed = stats.processes_needed(sa.medians, sb.medians, threshold, level)
    return Comparison(label=sa.spec.label(), config_id=ka[0], machines=(ka[1], kb[1]),
                      a=sa, b=sb, interval=interval, needed=needed)


def percent(ratio: float) -> str:
    """A ratio as a signed change: 1.07 -> '+7.0%'."""
    return f"{(ratio - 1) * 100:+.1f}%" if math.isfinite(ratio) else "?"
