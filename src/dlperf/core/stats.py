"""Summary statistics of step times. Plain Python: the parent process uses them too."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: A measurement whose step times vary more than this is flagged. The spread used is the
#: robust coefficient of variation, 1.4826 x MAD / median (equal to std/mean for normal
#: noise, but not inflated by a rare outlier such as one garbage-collection pause).
UNSTABLE_CV = 0.05


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    mean: float
    std: float
    min: float
    max: float
    mad: float  # median absolute deviation from the median
    iqr: float
    cv: float  # std / mean

    @property
    def robust_cv(self) -> float:
        return robust_cv(self.mad, self.median)


def robust_cv(mad: float, median: float) -> float:
    """1.4826 x MAD / median: the coefficient of variation for normal noise, not inflated
    by a rare outlier (``UNSTABLE_CV``)."""
    return 1.4826 * mad / median if median > 0 else 0.0


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted data (numpy's default method)."""
    if not sorted_xs:
        return math.nan
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def summarize(xs: Sequence[float]) -> Summary:
    if not xs:
        raise ValueError("no samples")
    s = sorted(xs)
    med = statistics.median(s)
    mean = statistics.fmean(s)
    std = statistics.stdev(s) if len(s) > 1 else 0.0
    mad = statistics.median(abs(x - med) for x in s)
    return Summary(
        n=len(s),
        median=med,
        mean=mean,
        std=std,
        min=s[0],
        max=s[-1],
        mad=mad,
        iqr=quantile(s, 0.75) - quantile(s, 0.25),
        cv=std / mean if mean > 0 else 0.0,
    )


def instability_warning(cv: float, what: str = "step times") -> str | None:
    """A warning naming the fix, or None when the spread is acceptable."""
    if cv <= UNSTABLE_CV:
        return None
    return (
        f"unstable: {what} vary by {cv:.1%} (robust coefficient of variation); close other busy "
        "programs, or raise --min-time / --repeat so more steps and processes are measured"
    )
