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

Whether a correction carries over from the networks it was fitted on to another is itself
measured, never assumed (``choose_factors``): among no correction, one factor on the
three terms together and one per term, the form whose fits predict each of the training
networks best from the others (leave-one-network-out inside the training networks:
nested cross-validation, Stone 1974, "Cross-validatory choice and assessment of
statistical predictions", JRSS B 36(2)) is fitted on all of them. Where the kernels
alone already err on both sides from network to network, per-term factors fitted on
three networks push the fourth the wrong way, and the inner validation sees it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from dlperf.perfmodel.result import Breakdown

TERMS = ("compute_s", "memory_s", "overhead_s")
#: the corrections ``choose_factors`` picks from, simplest first: none, one factor on the
#: three terms together, one factor per term (``fit_factors``)
FORMS = ("none", "scale", "terms")
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
    form: str = "terms"  # which of FORMS (``choose_factors``)

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


def fit_scale(points: Sequence[tuple[Breakdown, float]], networks: Sequence[str] = ()) -> Factors:
    """One factor s on compute, memory and overhead together: the least squares of
    measured = s (C + M + O) + rest on relative error, with ``fit_factors``' prior row
    pulling s towards 1 (closed form; never negative). One point sets it, unlike three
    factors; none: no correction."""
    if not points:
        return Factors(fitted_on=tuple(sorted(set(networks))), points=len(points), form="scale")
    x = np.array([sum(getattr(b, t) for t in TERMS) / y for b, y in points])
    r = np.array([1.0 - (b.total_s - sum(getattr(b, t) for t in TERMS)) / y for b, y in points])
    scale = max(0.0, float((x @ r + PRIOR**2) / (x @ x + PRIOR**2)))
    return Factors(compute=scale, memory=scale, overhead=scale, points=len(points),
                   fitted_on=tuple(sorted(set(networks))), form="scale")


def fit_form(form: str, points: Sequence[tuple[Breakdown, float]],
             networks: Sequence[str] = ()) -> Factors:
    """The correction of ``form`` (one of FORMS) fitted on ``points``."""
    if form == "none":
        return Factors(fitted_on=tuple(sorted(set(networks))), points=len(points), form="none")
    return fit_scale(points, networks) if form == "scale" else fit_factors(points, networks)


def inner_error(form: str, points: Sequence[tuple[Breakdown, float]],
                networks: Sequence[str]) -> float:
    """Mean |relative error| of ``form`` predicting each network among ``networks`` from
    the others' points: what that correction does to a network it was not fitted on."""
    errors = []
    for held in sorted(set(networks)):
        train = [(p, n) for p, n in zip(points, networks, strict=True) if n != held]
        f = fit_form(form, [p for p, _ in train], [n for _, n in train])
        errors += [abs(f.apply(b) / y - 1)
                   for (b, y), n in zip(points, networks, strict=True) if n == held]
    return statistics.fmean(errors)


def choose_factors(points: Sequence[tuple[Breakdown, float]], networks: Sequence[str]) -> Factors:
    """The form of correction that carries over between the networks it is fitted on
    (module docstring), fitted on all of ``points``; ``networks[i]`` names point i's.
    With fewer than two networks nothing can tell whether it carries over: per-term
    factors, as ``fit_factors`` alone gives."""
    if len(set(networks)) < 2:
        return fit_factors(points, networks)
    scores = {form: inner_error(form, points, networks) for form in FORMS}
    best = min(FORMS, key=lambda form: (scores[form], FORMS.index(form)))
    return fit_form(best, points, networks)
