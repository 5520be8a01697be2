"""Per-framework factors on the model's terms, fitted on whole measured networks: the one
thing in the model fitted beyond kernels, and only ever on networks other than the one
predicted (``dlperf validate --leave-one-network-out``).

The kernel curves time each product and each memory pass alone; a framework's training
step adds what those miss (fusion in XLA and TensorFlow's grappler, the autograd
engine's bookkeeping, layout conversions between convolutions, caches warm or cold
between layers). One factor per term and framework absorbs the average of that, in the
spirit of Paleo's per-platform efficiency factors (Qi et al., ICLR 2017, sec. 4):
measured ~ a x compute + b x memory + c x overhead, fitted by non-negative least squares
on relative error (each configuration counts the same, whatever its time). Terms the
kernels do not set (communication, bubble, straggler) are left as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from dlperf.perfmodel.result import Breakdown

TERMS = ("compute_s", "memory_s", "overhead_s")
#: weight of the prior "factor 1" rows (ridge towards the uncorrected model), so that a
#: term few configurations depend on keeps a factor near 1 instead of whatever fits noise
PRIOR = 0.3


class Factors(BaseModel):
    """Multipliers of the compute, memory and overhead terms, and what they were fitted
    on (never the configuration they are applied to)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    compute: float = 1.0
    memory: float = 1.0
    overhead: float = 1.0
    fitted_on: tuple[str, ...] = ()  # the networks whose measurements set them
    points: int = 0

    def apply(self, b: Breakdown) -> float:
        """The corrected time per mini-batch."""
        rest = b.total_s - sum(getattr(b, t) for t in TERMS)
        return self.compute * b.compute_s + self.memory * b.memory_s + self.overhead * b.overhead_s + rest


def fit_factors(points: Sequence[tuple[Breakdown, float]], networks: Sequence[str] = ()) -> Factors:
    """Non-negative least squares of measured = a C + b M + c O + rest on relative error,
    with a prior row per term pulling its factor towards 1 (``PRIOR``). A term no point
    has (all zero) keeps factor 1. Fewer than two points: no correction."""
    from scipy.optimize import nnls

    if len(points) < 2:
        return Factors(fitted_on=tuple(networks), points=len(points))
    rows, target = [], []
    for b, measured in points:
        rest = b.total_s - sum(getattr(b, t) for t in TERMS)
        rows.append([getattr(b, t) / measured for t in TERMS])
        target.append(1.0 - rest / measured)
    rows += list(PRIOR * np.eye(len(TERMS)))
    target += [PRIOR] * len(TERMS)
    a, y = np.asarray(rows), np.asarray(target)
    used = a[: len(points)].any(axis=0)
    coef = np.ones(len(TERMS))
    if used.any():
        coef[used] = nnls(a[:, used], y)[0]
    return Factors(compute=float(coef[0]), memory=float(coef[1]), overhead=float(coef[2]),
                   fitted_on=tuple(sorted(set(networks))), points=len(points))
