"""A calibration made by the tests: the kernel samples a made-up machine with known curves
would give (no timing), stored as the kernel runs ``dlperf calibrate`` plans, so that the
fits, predict --device cpu and validate can be checked against numbers known exactly."""

from __future__ import annotations

import time

from dlperf.core.spec import RunResult
from dlperf.kinds.calibrate import plan as calibration
from dlperf.kinds.calibrate.options import KernelOutcome, KernelSample
from dlperf.perfmodel.fit import alone_afresh_s, conv_traffic
from dlperf.perfmodel.kernels import ELEM, conv_gemm, element_bytes, flops, nbytes

# the made-up machine
CALL_S, OP_S = 4e-6, 2e-6  # per call, per op
TRAIN_CALL_S, TRAIN_OP_S = 30e-6, 5e-6  # the same in a training step (autograd included)
GEMM_RATE, H = 60e9, (32.0, 32.0, 16.0)  # FLOP/s, half-rate sides
TRAFFIC_BPS = 20e9
CONV_RATE, CONV_BWD_RATE = 40e9, 30e9
H_CONV = (64.0, 8.0, 12.0)  # half-rate output pixels, output and input channels
CONV_TRAFFIC = 2.0  # memory passes over a convolution's input, weights and output
DRAM_BPS = 15e9
UPDATE_BPS = 25e9
XENT_BPS = 2e9  # the loss: exponentials make it slower than a memory pass
BN_BPS = 2e9  # batch normalisation: several passes over its activation
POOL_BPS = 1e9  # the max pool's gradient scatters its maxima back
LSTM_RATE = 20e9  # FLOP/s of an LSTM layer whole: small products in a loop, and the gates
TN_SLOWER = 1.5
#: the product with its second operand stored transposed (gemm_nt), against the plain one
NT_SLOWER = 4 / 3
SHARE_STEP_S, SHARE_COST = 8e-3, 1.25  # two processes on one core: x1.25 beyond sharing
SHARE_LONG_S = 12 * SHARE_STEP_S
SEQ_SLOWER = 3.0
#: a first layer's weight gradient alone (conv_wgrad), against the pair (conv_bwd)
WGRAD_SHARE = 0.25


def alpha_beta(world: int) -> tuple[float, float]:
    return 1e-4 * world, 1e9 / world


#: the made-up gloo's all-gather and reduce-scatter, against its all-reduce of the same
#: whole tensor (gloo's are no bandwidth-optimal rings: slower than an all-reduce), and its
#: broadcast (one transfer, no sum: faster)
COLLECTIVE_FACTOR = {"allreduce": 1.0, "allgather": 1.3, "reducescatter": 1.7,
                     "broadcast": 0.4}


def _phi(x: float, h: float) -> float:
    return x / (x + h)


def gemm_s(m: float, n: float, k: float) -> float:
    """The made-up machine's GEMM, without the step call."""
    return (OP_S + 2 * m * n * k / (GEMM_RATE * _phi(m, H[0]) * _phi(n, H[1]) * _phi(k, H[2]))
            + 4 * (m * k + k * n + m * n) / TRAFFIC_BPS)


def true_s(op: str, shape: tuple[int, ...], world: int = 1, elem: int = ELEM) -> float:
    """The made-up machine's time of one call; ``elem``: the bytes of an activation's
    element (the same bandwidth moves half the bytes of a half-precision pass in half the
    time)."""
    if op == "dispatch":
        return CALL_S + shape[0] * OP_S
    if op == "dispatch_train":  # four kernels per layer: three products and the update
        return TRAIN_CALL_S + 4 * shape[0] * TRAIN_OP_S
    if op == "gemm":
        return CALL_S + gemm_s(*shape)
    if op == "gemm_tn":  # the transposed form, half again as slow
        return CALL_S + TN_SLOWER * gemm_s(*shape)
    if op == "gemm_nt":  # the weights read transposed: a third slower
        return CALL_S + NT_SLOWER * gemm_s(*shape)
    if op == "gemm_tn_seq":  # over a sequence: time x batch contracted, slower still
        m, n, t, b = shape
        return CALL_S + SEQ_SLOWER * gemm_s(m, n, t * b)
    if op == "conv_wgrad":  # a share of the pair, less the call
        return CALL_S + WGRAD_SHARE * (true_s("conv_bwd", shape, world, elem) - CALL_S)
    if op in ("conv", "conv_bwd"):  # saturating in M and in the output and input channels
        m, n, k = conv_gemm(shape)
        rate = CONV_RATE if op == "conv" else CONV_BWD_RATE
        passes = 1 if op == "conv" else 2
        traffic = passes * conv_traffic(m, n, k, shape[4], shape[5], elem)
        return CALL_S + OP_S + passes * 2 * m * n * k / (
            rate * _phi(m, H_CONV[0]) * _phi(n, H_CONV[1]) * _phi(shape[1], H_CONV[2])
        ) + CONV_TRAFFIC * traffic / DRAM_BPS
    if op == "memory":
        return CALL_S + OP_S + nbytes(op, shape, elem) / DRAM_BPS
    if op == "update":  # in place: faster than a fresh result
        return CALL_S + OP_S + nbytes(op, shape) / UPDATE_BPS
    if op == "xent":
        return CALL_S + OP_S + nbytes(op, shape) / XENT_BPS
    if op == "bn":
        return CALL_S + OP_S + nbytes(op, shape, elem) / BN_BPS
    if op == "pool":
        return CALL_S + OP_S + nbytes(op, shape, elem) / POOL_BPS
    if op == "lstm":
        return CALL_S + OP_S + flops(op, shape) / LSTM_RATE
    if op in COLLECTIVE_FACTOR:
        a, b = alpha_beta(world)
        return COLLECTIVE_FACTOR[op] * (a + shape[0] / b)
    if op == "share":  # a step alone, or each of shape[0] on one core; the long step
        # (shape (procs, batch)) 12 times as long, at no cost beyond processor sharing
        if len(shape) > 1:
            return SHARE_LONG_S * shape[0]
        return SHARE_STEP_S * shape[0] * (SHARE_COST if shape[0] > 1 else 1.0)
    raise ValueError(op)


def sample(op: str, shape: tuple[int, ...], world: int = 1, elem: int = ELEM) -> KernelSample:
    t = true_s(op, shape, world, elem)
    # the core-sharing op keeps one time per round alone (two) or per process (two)
    times = (t, t) if op == "share" else (t, t, t)
    return KernelSample(op=op, shape=shape, median_s=t, times_s=times, flops=flops(op, shape),
                        bytes=nbytes(op, shape, elem), world=world)


def _allocated(s: KernelSample, spec, elem: int) -> KernelSample:
    """A product's sample as PyTorch's and JAX's calibrations on a CPU measure it: a result
    beyond glibc's mmap threshold is new pages at every call, at what a fresh result costs
    over an in-place one on the made-up machine (``fit.without_new_pages`` takes them
    out)."""
    if not s.op.startswith("gemm") or not (extra := alone_afresh_s(
            spec.framework, spec.device, s.op, elem * s.shape[0] * s.shape[1],
            2 / DRAM_BPS - 2 / UPDATE_BPS)):
        return s
    return s.model_copy(update={"median_s": s.median_s + extra,
                                "times_s": tuple(t + extra for t in s.times_s)})


def kernel_results(frameworks: tuple[str, ...] = ("torch",), threads: tuple[int, ...] = (1,),
                   allreduce: bool = True, precision: str = "fp32",
                   device: str = "cpu", scope: tuple[tuple[str, int], ...] = (),
                   skeleton: str = "all") -> list[RunResult]:
    """One ok result per kernel run of the plan (``scope``: a calibration scoped to those
    networks, its skeleton where ``skeleton`` says), its samples from the made-up machine."""
    out = []
    for spec in calibration.specs(list(frameworks), list(threads), allreduce=allreduce,
                                  precision=precision, device=device, scope=scope,
                                  skeleton=skeleton):
        o = spec.options
        elem = element_bytes(precision)
        samples = tuple(_allocated(sample(part.op, tuple(shape), o.world, elem), spec, elem)
                        for part in o.parts for shape in part.shapes)
        now = time.time()
        out.append(RunResult(spec=spec, status="ok", outcome=KernelOutcome(samples=samples),
                             started_at=now, finished_at=now))
    return out


def calibrated(store, **kw) -> None:
    for r in kernel_results(**kw):
        store.add(r)
