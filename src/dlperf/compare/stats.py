"""How much faster or slower B is than A, with a confidence interval, from the step times
of the worker processes that measured each side.

The unit of replication is the worker process, not the step: steps within one process
share its memory layout, its threads' placement and its warm caches, so they vary less
than processes do, and an interval built on steps alone is too narrow (Kalibera and
Jones, "Rigorous benchmarking in reasonable time", ISMM 2013, sec. 3: most of the
variation of a benchmark lies between executions). Two methods, both over processes:

- ``welch``: Welch's t-interval (Welch, "The generalization of Student's problem when
  several different population variances are involved", Biometrika 1947) on the logarithm
  of each process's median step time. On the log scale a ratio is a difference, so the
  interval of the difference of means is the interval of the ratio of geometric means
  of the per-process medians. Exact for normal log-medians, and honest with few
  processes: its t quantile widens the interval as the degrees of freedom fall.
- ``bootstrap``: Kalibera and Jones's hierarchical bootstrap (sec. 4): each draw resamples
  the processes with replacement, then each drawn process's step times with replacement;
  the statistic is the ratio of the medians of the per-process medians (what dlperf's
  tables show); the percentile interval of 2000 draws. It assumes no distribution, but
  with few processes it has few distinct draws and its interval is too narrow; the A/A
  benchmark (``benchmarks/bench_compare.py``) measures how often each claims a change.

The summary over many configurations is the geometric mean of their ratios (Fleming and
Wallace, "How not to lie with statistics: the correct way to summarize benchmark
results", CACM 1986), its interval from the configurations' own (independent) intervals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

#: the fewest processes per side for an interval: two give a variance, a third makes the
#: interval's width a figure rather than an accident of two draws
MIN_PROCESSES = 3
METHODS = ("welch", "bootstrap")
BOOTSTRAP_DRAWS = 2000


@dataclass(frozen=True)
class Interval:
    """B's time over A's, with its two-sided confidence interval at ``level``."""

    ratio: float
    low: float
    high: float
    level: float
    #: Welch: the log ratio's standard error and degrees of freedom (for the summary)
    log_se: float = 0.0
    df: float = math.inf
    #: bootstrap: the draws of the log ratio (for the summary)
    draws: tuple[float, ...] = field(default=(), repr=False)

    @property
    def verdict(self) -> str:
        if self.low > 1.0:
            return "slower"
        if self.high < 1.0:
            return "faster"
        return "no significant change"


def welch_log_ratio(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Interval:
    """Welch's interval for geomean(b) / geomean(a), from per-process medians (>= 2 each)."""
    la, lb = np.log(np.asarray(a, float)), np.log(np.asarray(b, float))
    va, vb = la.var(ddof=1) / len(la), lb.var(ddof=1) / len(lb)
    d = lb.mean() - la.mean()
    se = math.sqrt(va + vb)
    df = _satterthwaite([va, vb], [len(la) - 1, len(lb) - 1])
    half = _t(level, df) * se
    return Interval(math.exp(d), math.exp(d - half), math.exp(d + half), level, se, df)


def hierarchical_bootstrap(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]],
                           level: float = 0.95, draws: int = BOOTSTRAP_DRAWS,
                           seed: int = 0) -> Interval:
    """Kalibera and Jones's two-level bootstrap of median-of-medians(b) / (a); ``a`` and
    ``b`` are each process's step times."""
    rng = np.random.default_rng(seed)
    la = np.log(_draw(a, draws, rng))
    lb = np.log(_draw(b, draws, rng))
    logs = lb - la
    point = math.log(_median_of_medians(b) / _median_of_medians(a))
    lo, hi = np.quantile(logs, [(1 - level) / 2, (1 + level) / 2])
    return Interval(math.exp(point), math.exp(lo), math.exp(hi), level,
                    draws=tuple(float(x) for x in logs))


def _median_of_medians(processes: Sequence[Sequence[float]]) -> float:
    return float(np.median([np.median(p) for p in processes]))


def _draw(processes: Sequence[Sequence[float]], draws: int, rng: np.random.Generator) -> np.ndarray:
    """``draws`` bootstrap values of the median of per-process medians: processes drawn
    with replacement, then each one's steps (one inner draw per process and outer draw)."""
    inner = np.stack([np.median(rng.choice(np.asarray(p, float), (draws, len(p))), axis=1)
                      for p in processes], axis=1)  # draws x processes
    pick = rng.integers(0, len(processes), (draws, len(processes)))
    return np.median(np.take_along_axis(inner, pick, axis=1), axis=1)


def geometric_summary(intervals: Sequence[Interval], level: float = 0.95) -> Interval:
    """The geometric mean of the ratios, with its interval: Welch intervals combine their
    standard errors (Satterthwaite's degrees of freedom); bootstrap ones their draws."""
    k = len(intervals)
    mean = sum(math.log(i.ratio) for i in intervals) / k
    if all(i.draws for i in intervals):
        logs = np.mean([np.asarray(i.draws) for i in intervals], axis=0)
        lo, hi = np.quantile(logs, [(1 - level) / 2, (1 + level) / 2])
        return Interval(math.exp(mean), math.exp(lo), math.exp(hi), level)
    variances = [(i.log_se / k) ** 2 for i in intervals]
    se = math.sqrt(sum(variances))
    df = _satterthwaite(variances, [i.df for i in intervals])
    half = _t(level, df) * se
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), level, se, df)


def processes_needed(a: Sequence[float], b: Sequence[float], change: float,
                     level: float = 0.95) -> int:
    """About how many processes per side would make Welch's interval narrower than a
    ``change`` (0.05: 5%) either way, at the spread of the per-process medians seen here
    (pooled; the larger side's if one side has one process)."""
    logs = [np.log(np.asarray(x, float)) for x in (a, b) if len(x) >= 2]
    if not logs:
        return MIN_PROCESSES
    dof = sum(len(x) - 1 for x in logs)
    sd = math.sqrt(sum(x.var(ddof=1) * (len(x) - 1) for x in logs) / dof)
    target = math.log1p(change)
    n = MIN_PROCESSES
    while n < 1000 and _t(level, 2 * n - 2) * sd * math.sqrt(2 / n) > target:
        n += 1
    return n


def _satterthwaite(variances: Sequence[float], dfs: Sequence[float]) -> float:
    """The Welch-Satterthwaite degrees of freedom of a sum of variance estimates."""
    num = sum(variances) ** 2
    den = sum(v * v / d for v, d in zip(variances, dfs, strict=True) if d > 0 and v > 0)
    return num / den if den > 0 else math.inf


def _t(level: float, df: float) -> float:
    return float(sps.t.ppf((1 + level) / 2, df)) if math.isfinite(df) else float(
        sps.norm.ppf((1 + level) / 2))
