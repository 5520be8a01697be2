"""Layer layouts at an equal parameter budget, for the layout experiment. Framework-free.

The guide contrasts networks whose layers shrink toward the output (the deep
convolutional network: a funnel from a wide input to a narrow code) with networks whose
layers grow (the deconvolutional network: a narrow code widened into an image). A
feed-forward net with one width per hidden layer isolates that factor: a shrinking
layout (4w, 2w, w), a growing one (w, 2w, 4w) and a constant one (c, c, c), each with
``w`` (or ``c``) solved so that its parameter count, by the neutral definition, is as
close as possible to the budget.
"""

from __future__ import annotations

from dataclasses import replace

from dlperf.workloads.families.classifiers import FFNConfig

DIGITS_FFN = FFNConfig()  # the feed-forward net on the 64 digit inputs

#: layout -> width multipliers of the hidden layers, input side first
SHAPES: dict[str, tuple[int, ...]] = {
    "shrinking": (4, 2, 1),
    "constant": (1, 1, 1),
    "growing": (1, 2, 4),
}


def params_of(widths: tuple[int, ...], base: FFNConfig) -> int:
    cfg = replace(base, widths="-".join(map(str, widths)))
    return sum(layer.params for layer in cfg.layers())


def solve(shape: tuple[int, ...], budget: int, base: FFNConfig = DIGITS_FFN) -> tuple[int, ...]:
    """The widths ``w * shape`` whose parameter count is closest to ``budget``: the count
    grows with w, so a bisection for the first w at or above the budget, then the nearer
    of it and the one below."""
    lo, hi = 1, 1
    while params_of(tuple(hi * m for m in shape), base) < budget:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if params_of(tuple(mid * m for m in shape), base) < budget:
            lo = mid + 1
        else:
            hi = mid
    best = min((w for w in (lo - 1, lo) if w >= 1),
               key=lambda w: abs(params_of(tuple(w * m for m in shape), base) - budget))
    return tuple(best * m for m in shape)


def equal_budget(budget: int, base: FFNConfig = DIGITS_FFN) -> dict[str, tuple[int, ...]]:
    """Every layout of ``SHAPES`` solved for the same budget."""
    return {name: solve(shape, budget, base) for name, shape in SHAPES.items()}
