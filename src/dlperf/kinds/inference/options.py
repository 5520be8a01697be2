"""Kind "inference": the guide's "use after training": forward passes only, in the
framework's inference mode (no autograd, evaluation mode), one query per call, timed
one by one under the same warm-up rule as a training step (``measure.timing``).

A query is one forward pass over ``batch_size`` samples: batch 1 is a single request
answered on its own, a larger batch is requests served together. Latency is the time of
one query; throughput is queries per second and samples per second.

A kind of its own rather than an option of "step": its identity must never meet a
training step's (the same network, framework and batch measure different things), and
its outcome (latency quantiles, the inference mode in force, the proof that no gradient
was recorded) is not a step's.
"""

from __future__ import annotations

from collections.abc import Sequence

from dlperf.core.payload import Frozen, Payload
from dlperf.core.stats import quantile


class InferenceOptions(Frozen):
    """Nothing beyond the RunSpec's own fields: the batch is the query size."""


class InferenceOutcome(Payload):
    """Latency quantiles of the timed queries (seconds), throughput, and what the
    framework ran in (``mode``). ``grad_free``: the backend's own check after timing that
    no gradient was recorded (torch: autograd recorded no graph and every parameter's
    ``.grad`` is still None; the others build no gradient function at all)."""

    queries: int
    p50_s: float
    p95_s: float
    p99_s: float
    mean_s: float
    queries_per_s: float
    samples_per_s: float
    forward_flops: float | None = None  # one query, neutral closed form
    mode: str = ""
    grad_free: bool | None = None


def latency_outcome(times_s: Sequence[float], batch_size: int, mode: str = "",
                    grad_free: bool | None = None,
                    forward_flops: float | None = None) -> InferenceOutcome:
    """Quantiles (linear interpolation, numpy's default) of per-query latencies and the
    throughput they imply: queries/s = 1 / mean latency (queries run back to back, so the
    mean, not the median, is what a stream of them sustains)."""
    if not times_s:
        raise ValueError("no timed queries")
    s = sorted(times_s)
    mean = sum(s) / len(s)
    return InferenceOutcome(
        queries=len(s), p50_s=quantile(s, 0.50), p95_s=quantile(s, 0.95),
        p99_s=quantile(s, 0.99), mean_s=mean, queries_per_s=1.0 / mean,
        samples_per_s=batch_size / mean, forward_flops=forward_flops, mode=mode,
        grad_free=grad_free)
