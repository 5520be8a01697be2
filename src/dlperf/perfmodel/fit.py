"""Fitted kernel curves: from the calibration samples of one framework and thread count
(plain ``KernelSample`` values; reading the store happens outside this package) to the
times the model adds up.

- ``Dispatch``: a chain of n dependent tiny ops costs call + n x op (least squares); the
  call is paid once per training step, the op once per kernel a layer launches. Every
  other sample is one op in one call, so the call minus one op is taken off its time.
- ``GemmCurve``: t(m, n, k) = t0 + 2mnk / (R phi(m) phi(n) phi(k)) + 4(mk + kn + mn) / W,
  phi(x) = x / (x + h): a rate that saturates as each side grows past the blocking a
  BLAS uses (the shape of the efficiency curves of Yu et al., Habitat, USENIX ATC 2021,
  and of NeuSight's tile model, ASPLOS 2025, reduced to one saturation per side), plus
  the operands' traffic at a bandwidth W (the roofline's memory side, added rather than
  maxed so that the curve stays smooth), fitted in log time. What the
  form misses near the measured shapes is kept as residuals and added back by a kernel
  smoother in log-shape space (Nadaraya 1964, Watson 1964), shrunk to zero far from
  every sample, so nothing is extrapolated from a single point.
- ``ConvCurve``: a convolution's FLOPs as its implicit GEMM's (M = output pixels x
  batch, N = output channels, K = window^2 x input channels) at a rate that saturates in
  M, in the output channels and in the input channels (not in K: a convolution library
  vectorises over channels, so three input channels under a 7x7 window are as thin as
  under a 3x3 one; on this machine's calibration samples this form leaves a median
  residual of 8-16% where the GEMM's saturations on K left 10-46%, JAX's backward
  excepted: 32-42%), plus a fixed cost, plus a fitted number of memory passes over its
  input, weights and output at the bandwidth the memory curve gives a working set of
  that size (the layout copies and fresh pages of a large map: XLA:CPU transposes both
  operands of every weight gradient, and its 1x1 backward over a 56x56 map at batch 16
  took six times what its FLOPs take at a 3x3 window's rate on this machine), forward
  and backward fitted apart, and its residuals. A kernel's results beyond glibc's mmap
  threshold are new pages at every call, PyTorch's and JAX's: taken off the samples of
  PyTorch's products and convolutions and of JAX's products (``without_new_pages``) and
  added by the step model, PyTorch's per result, its traffic priced by the in-place
  update's curve, without them (``traffic_curve``), JAX's in its step's temporaries
  block (``local.fresh_block_s``).
- ``MemoryCurve``: time against bytes moved, interpolated in log-log over the sizes
  measured (caches, then DRAM), the op's fixed cost taken off; the same form serves the
  in-place update, the softmax cross-entropy (against its logits' bytes), batch
  normalisation, the max pool with its gradient and an LSTM layer's training step
  (against their layer's bytes; batch normalisation per channel count, the LSTM per
  hidden size).
- ``AlphaBeta``: an all-reduce of n bytes among p processes, t = alpha + n / beta (Hockney
  1994), per p.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dlperf.core.disturbance import DISTURBED
from dlperf.perfmodel import steadiness
from dlperf.perfmodel.kernels import (
    CONVS,
    PRODUCTS,
    REVISION,
    TRAIN_KERNELS,
    KernelSample,
    changes_since,
    conv_gemm,
    conv_out,
    element_bytes,
    flops,
    nbytes,
    whole_grids,
)

#: bandwidth of the kernel smoother, in octaves of each shape dimension
SMOOTH_OCTAVES = 1.0
#: weight of "no correction" in the smoother: far from every sample the correction fades
SMOOTH_PRIOR = 0.25
#: a shape this close to a timed one (in octaves) is that shape
EXACT_OCTAVES = 1e-6
#: at most this many memory passes per pass over a convolution's traffic (``fit_conv``)
MAX_TRAFFIC_PASSES = 32.0


@dataclass(frozen=True)
class Samples:
    """The calibration samples of one framework, thread count and device."""

    items: tuple[KernelSample, ...]

    @classmethod
    def of(cls, items: Sequence[KernelSample]) -> Samples:
        return cls(tuple(items))

    def of_op(self, op: str, world: int | None = None) -> list[KernelSample]:
        return [s for s in self.items if s.op == op and (world is None or s.world == world)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Dispatch(_Frozen):
    call_s: float  # once per call into the framework
    op_s: float  # once per op (kernel) inside it
    #: the same in a training step (the trained chain: autograd's bookkeeping included);
    #: None where it was not calibrated (the plain chain stands in)
    train_call_s: float | None = None
    train_op_s: float | None = None

    @property
    def step_op_s(self) -> float:
        """Per kernel of a training step."""
        return self.op_s if self.train_op_s is None else self.train_op_s

    @property
    def step_call_s(self) -> float:
        """Per training step call."""
        return self.call_s if self.train_call_s is None else self.train_call_s


def _line(samples: Sequence[KernelSample]) -> tuple[float, float]:
    """(intercept, slope) of t over the chain lengths, both >= 0 (least squares)."""
    n = np.array([s.shape[0] for s in samples], float)
    t = np.array([s.median_s for s in samples], float)
    if len(set(n)) < 2:
        return 0.0, float(t.min() / max(n.min(), 1))
    slope, icpt = np.polyfit(n, t, 1)
    return max(float(icpt), 0.0), max(float(slope), 0.0)


def fit_dispatch(samples: Sequence[KernelSample],
                 trained: Sequence[KernelSample] = ()) -> Dispatch:
    """t = call + n x op over the plain chain; over the trained chain (products and the
    optimizer's update), per layer of ``TRAIN_KERNELS`` kernels, the same for a training
    step."""
    call, op = _line(samples)
    if not trained:
        return Dispatch(call_s=call, op_s=op)
    t_call, per_layer = _line(trained)
    return Dispatch(call_s=call, op_s=op, train_call_s=t_call,
                    train_op_s=per_layer / TRAIN_KERNELS)


def net_time(s: KernelSample, d: Dispatch) -> float:
    """A one-op call's time without the call's own cost (one op's cost stays). Never below
    half the measured time: noise must not make a kernel free. A kernel timed on the
    device's own clock has no host cost in it: its time as measured."""
    if s.clock == "device":
        return s.median_s
    return max(s.median_s - d.call_s, 0.5 * s.median_s)


def _phi(x: np.ndarray | float, h: float) -> np.ndarray | float:
    return x / (x + h)


def _smooth(point: Sequence[float], points: Sequence[Sequence[float]],
            residuals: Sequence[float]) -> float:
    """Nadaraya-Watson average of the residuals near ``point`` (log2 coordinates), with a
    prior weight on zero so that a lone or distant sample moves the curve little; at a
    shape that was timed itself (``EXACT_OCTAVES``), that timing's residual (the mean of
    its repetitions'): a shape timed is read as timed, the whole of what the curve misses
    there. With the prior's shrinkage, PyTorch's one-thread convolutions at a pipeline's
    micro-batches of one and two samples (AlexNet's and ResNet-50's, 68 shapes) read
    between 31% under and 45% over their own timings (1.94 ms timed, 1.39 read, for 256
    to 1024 channels over 14 x 14 at two samples), on a 2-vCPU AMD EPYC."""
    if not points:
        return 0.0
    p = np.asarray(points, float)
    d2 = ((p - np.asarray(point, float)) ** 2).sum(axis=1) / SMOOTH_OCTAVES**2
    r = np.asarray(residuals, float)
    if (exact := d2 < EXACT_OCTAVES**2).any():
        return float(r[exact].mean())
    w = np.exp(-0.5 * d2)
    return float((w * r).sum() / (w.sum() + SMOOTH_PRIOR))


class GemmCurve(_Frozen):
    rate: float  # FLOP/s as every side grows without bound
    h: tuple[float, float, float]  # the side at which phi is 1/2, for m, n, k
    t0: float  # the fixed cost of one product (one op)
    bandwidth: float = float("inf")  # bytes/s of the operands' traffic
    points: tuple[tuple[float, float, float], ...] = ()  # log2 (m, n, k) of the samples
    residuals: tuple[float, ...] = ()  # log(measured / curve) at each
    #: FLOP/s no product exceeds (a datasheet peak, where known: ``perfmodel.scaled``; None:
    #: no bound); the fitted saturation can pass it far beyond the largest shape timed
    peak: float | None = None

    def curve(self, m: float, n: float, k: float) -> float:
        hm, hn, hk = self.h
        return (self.t0 + 2 * m * n * k / (self.rate * _phi(m, hm) * _phi(n, hn) * _phi(k, hk))
                + 4 * (m * k + k * n + m * n) / self.bandwidth)

    def time(self, m: float, n: float, k: float) -> float:
        """Seconds of one (m x k) @ (k x n) product."""
        pt = (math.log2(m), math.log2(n), math.log2(k))
        t = self.curve(m, n, k) * math.exp(_smooth(pt, self.points, self.residuals))
        return max(t, 2 * m * n * k / self.peak) if self.peak else t


class MemoryCurve(_Frozen):
    nbytes: tuple[float, ...]  # bytes moved, ascending
    seconds: tuple[float, ...]  # the op's time less its fixed cost

    def time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes``: log-log interpolation; beyond the ends, the end's
        bandwidth."""
        if nbytes <= 0:
            return 0.0
        x, y = np.log(self.nbytes), np.log(self.seconds)
        lx = math.log(nbytes)
        if lx <= x[0]:
            return nbytes * self.seconds[0] / self.nbytes[0]
        if lx >= x[-1]:
            return nbytes * self.seconds[-1] / self.nbytes[-1]
        return float(math.exp(np.interp(lx, x, y)))

    @property
    def dram_bytes_per_s(self) -> float:
        """The bandwidth of the largest working set measured (out of every cache)."""
        return self.nbytes[-1] / self.seconds[-1]


class ConvCurve(_Frozen):
    rate: float
    t0: float
    #: the sides at which phi is 1/2: output pixels x batch (M), output channels (N),
    #: input channels
    h: tuple[float, float, float]
    #: log2 (M, N, K, window, stride) of the samples (without the stride in a curve fitted
    #: before it was a coordinate)
    points: tuple[tuple[float, ...], ...] = ()
    residuals: tuple[float, ...] = ()
    peak: float | None = None  # as ``GemmCurve.peak``
    #: the memory pass's curve, and how many of its passes the convolution's traffic
    #: (``conv_traffic``) costs: the layout copies a library makes of a large map, at the
    #: bandwidth a working set of that size gets (caches, then DRAM); None, 0: a curve
    #: fitted before the term existed
    memory: MemoryCurve | None = None
    traffic_factor: float = 0.0
    #: passes over the traffic: 1 forward, 2 backward (``kernels.nbytes``)
    traffic_passes: float = 1.0
    #: bytes of an activation's element at the curve's precision (``kernels.element_bytes``)
    elem_bytes: int = 4

    def curve(self, m: float, n: float, k: float, window: int, passes: float = 1.0,
              stride: int = 1) -> float:
        hm, hn, hc = self.h
        c_in = k / (window * window)
        return (self.t0 + passes * 2 * m * n * k / (
            self.rate * _phi(m, hm) * _phi(n, hn) * _phi(c_in, hc))
            + self._traffic_time(self.traffic_passes * conv_traffic(m, n, k, window, stride,
                                                                    self.elem_bytes)))

    def _traffic_time(self, nbytes: float) -> float:
        if self.memory is None or not self.traffic_factor:
            return 0.0
        return self.traffic_factor * self.memory.time(nbytes)

    def time(self, m: float, n: float, k: float, window: int, stride: int = 1) -> float:
        """Seconds of the convolution whose implicit GEMM is (m, n, k)."""
        pt = (math.log2(m), math.log2(n), math.log2(k), math.log2(window), math.log2(stride))
        if self.points:
            pt = pt[:len(self.points[0])]
        t = self.curve(m, n, k, window, stride=stride) * math.exp(
            _smooth(pt, self.points, self.residuals))
        return max(t, 2 * m * n * k / self.peak) if self.peak else t


class WeightGradCurve(_Frozen):
    """A first layer's backward, its weights' gradient alone (``kernels``' conv_wgrad: the
    data has no gradient): the pair's curve (``LocalFit.conv_bwd``, both gradients) times
    ``scale``, the median of its samples' ratios to that curve, and their residuals near
    their own shapes (``_smooth``). Its grid is the few three-channel layers of the
    convolutions' (``kernels.FIRST_CONV_LAYERS``), too few to fit a form of their own;
    the pair's form holds the window, stride and sizes, and the scale what the input's
    gradient costs at three channels (most of the pair: PyTorch's AlexNet first layer at
    batch 16 and one thread on this project's 2-vCPU AMD EPYC, 38 ms of 220)."""

    scale: float
    #: log2 (M, N, K, window, stride) of the samples, as ``ConvCurve.points``
    points: tuple[tuple[float, ...], ...] = ()
    residuals: tuple[float, ...] = ()

    def time(self, pair: ConvCurve, m: float, n: float, k: float, window: int,
             stride: int = 1) -> float:
        """Seconds of the weights' gradient of the convolution whose implicit GEMM is
        (m, n, k), from the pair's curve ``pair``."""
        pt = (math.log2(m), math.log2(n), math.log2(k), math.log2(window), math.log2(stride))
        return self.scale * pair.curve(m, n, k, window, stride=stride) * math.exp(
            _smooth(pt, self.points, self.residuals))


def fit_conv_wgrad(samples: Sequence[KernelSample], d: Dispatch, pair: ConvCurve,
                   anchor: Sequence[bool] | None = None) -> WeightGradCurve | None:
    """``WeightGradCurve`` from the samples (None without any), its scale on the
    ``anchor`` samples (``grid_anchor``; None: all), its residuals on all."""
    if not samples:
        return None
    ratios = np.log([net_time(s, d) / pair.curve(*conv_gemm(s.shape), s.shape[4],
                                                  stride=s.shape[5]) for s in samples])
    use = np.ones(len(ratios), bool) if anchor is None else np.asarray(anchor, bool)
    log_scale = float(np.median(ratios[use] if use.any() else ratios))
    return WeightGradCurve(
        scale=math.exp(log_scale),
        points=tuple((*(math.log2(v) for v in conv_gemm(s.shape)), math.log2(s.shape[4]),
                      math.log2(s.shape[5])) for s in samples),
        residuals=tuple(float(r - log_scale) for r in ratios))


def grid_misses_convolutions(framework: str, device: str, threads: int) -> bool:
    """Whether a whole grid's convolution curves miss a network's own layers at
    ``threads``, so that its shapes must be timed themselves: JAX's on a CPU past one
    thread. Its convolutions run as YNNPACK fusions that give each thread whole tiles of 64
    channels (2026-12-01, jax 0.10.2 on a 2-vCPU AMD EPYC, docs/prediction.md): at two
    threads most of the grid's shapes (64 output channels or fewer, and pointwise ones) ran
    on one thread, AlexNet's on two, and the grid put AlexNet at two threads 71-75% too
    slow; with its own shapes timed, the main job's read +13%."""
    return framework == "jax" and device == "cpu" and threads > 1


def grid_misses_products(framework: str, device: str, threads: int) -> bool:
    """Whether a whole grid's product curves miss a network's own layers at ``threads``, so
    that its shapes must be timed themselves: TensorFlow's on a CPU past one thread. Its
    products of few rows take longer or shorter at two threads by their shape, not their
    size (2026-12-01, tensorflow-cpu 2.21 on a 2-vCPU AMD EPYC, docs/prediction.md): Keras'
    Dense input gradient at 64 x 2048 x 26752 ran in 140 ms at one thread and 72 at two,
    at 64 x 4096 x 8192 in 73 and 78, alike as a calibration kernel and in a graph. The
    grid's shapes around FCN-5's are of the second kind, and put FCN-5 at two threads
    33-38% too slow; with its own shapes timed, +3 to +5%."""
    return framework == "tensorflow" and device == "cpu" and threads > 1


#: what each rule above finds missed, and the layer op that has it
_GRID_MISSES = (("convolutions", grid_misses_convolutions, "conv"),
                ("products", grid_misses_products, "dense"))


def grid_misses(framework: str, device: str, threads: int, layer_ops: Iterable[str]
                ) -> list[str]:
    """The kinds of a network's layers ('convolutions', 'products') whose own shapes a whole
    grid's curves miss at ``threads``, given the ops of its layers; empty where the grid
    stands for them."""
    ops = set(layer_ops)
    return [kind for kind, misses, op in _GRID_MISSES
            if op in ops and misses(framework, device, threads)]


def conv_traffic(m: float, n: float, k: float, window: int, stride: int = 1,
                 elem: int = 4) -> float:
    """Bytes of one pass over a convolution's input, weights and output (``elem`` bytes an
    element) from its implicit GEMM: the output m x n, the weights k x n, the input m x stride^2
    pixels of k / window^2 channels ('same' padding). A convolution of few FLOPs per byte
    (a 1x1 window over a large map) is held by this traffic, and by the layout copies a
    library makes of it, not by its FLOPs: the roofline's memory side, added to the
    compute time as in ``GemmCurve``."""
    return float(elem) * (m * n + k * n + m * stride * stride * k / (window * window))


class AlphaBeta(_Frozen):
    world: int
    alpha_s: float
    beta_bytes_per_s: float

    def time(self, nbytes: float) -> float:
        return self.alpha_s + nbytes / self.beta_bytes_per_s


def _least_squares(fun: Callable[[np.ndarray], np.ndarray], x0: Sequence[float],
                   lower: Sequence[float], upper: Sequence[float]) -> np.ndarray:
    from scipy.optimize import least_squares

    return least_squares(fun, np.asarray(x0, float), bounds=(lower, upper), loss="soft_l1",
                         f_scale=0.1).x


def grid_anchor(op: str, shapes: Sequence[Sequence[int]], device: str = "cpu") -> list[bool] | None:
    """Which samples a curve's form is fitted on. Where the whole grid of ``op`` was timed
    (the standard or the fine one), its shapes: what a scoped run adds beside it (a
    network's layers, a pipeline's micro-batch of a few samples) enters as residuals near
    its own shapes only, and does not move the curve every other shape is read from
    (timing PyTorch's pipeline micro-batches at 1 and 2 samples beside the whole grid
    moved ResNet-50's one-thread steps at 16 and 32 from +21% and +4% to +37% and +18%,
    docs/prediction.md). None (every sample) where the grid was not timed whole: a scoped
    calibration's form rests on its skeleton and its networks' shapes together."""
    have = {tuple(x) for x in shapes}
    grids = whole_grids(op, device)
    if not any(g <= have for g in grids):
        return None
    return [any(tuple(x) in g for g in grids) for x in shapes]


def fit_gemm(samples: Sequence[KernelSample], d: Dispatch,
             anchor: Sequence[bool] | None = None) -> GemmCurve:
    """The GEMM curve of the module docstring, fitted on log time (robust loss), its form
    on the ``anchor`` samples (``grid_anchor``; None: all), its residuals on all."""
    shp = np.array([s.shape for s in samples], float)
    t = np.array([net_time(s, d) for s in samples])
    f = 2 * shp.prod(axis=1)
    m, n, k = shp[:, 0], shp[:, 1], shp[:, 2]
    traffic = 4 * (m * k + k * n + m * n)
    best = float((f / t).max())
    stream = float((traffic / t).max())

    def model(p: np.ndarray) -> np.ndarray:
        rate, hm, hn, hk, t0, bw = math.exp(p[0]), *np.exp(p[1:4]), math.exp(p[4]), math.exp(p[5])
        return t0 + f / (rate * _phi(m, hm) * _phi(n, hn) * _phi(k, hk)) + traffic / bw

    x0 = [math.log(best * 1.2), math.log(16), math.log(16), math.log(16),
          math.log(max(d.op_s, 1e-7)), math.log(stream * 2)]
    lo = [math.log(best * 0.5), math.log(0.1), math.log(0.1), math.log(0.1), math.log(1e-8),
          math.log(stream * 0.5)]
    hi = [math.log(best * 20), math.log(1e5), math.log(1e5), math.log(1e5), math.log(1e-2),
          math.log(stream * 1e4)]
    use = np.ones(len(t), bool) if anchor is None else np.asarray(anchor, bool)
    p = _least_squares(lambda p: (np.log(model(p)) - np.log(t))[use], x0, lo, hi)
    res = np.log(t) - np.log(model(p))
    return GemmCurve(rate=math.exp(p[0]), h=tuple(float(v) for v in np.exp(p[1:4])),
                     t0=math.exp(p[4]), bandwidth=math.exp(p[5]),
                     points=tuple(tuple(math.log2(v) for v in s) for s in shp),
                     residuals=tuple(float(r) for r in res))


def fit_conv(samples: Sequence[KernelSample], d: Dispatch,
             memory: MemoryCurve | None = None, elem: int = 4,
             anchor: Sequence[bool] | None = None) -> ConvCurve:
    """A rate, its saturations in M, output and input channels, a fixed cost, and the
    memory passes its traffic costs (``conv_traffic`` at ``memory``'s bandwidth for that
    many bytes), fitted on log time (robust loss), on the ``anchor`` samples as
    ``fit_gemm``."""
    geo = [conv_gemm(s.shape) for s in samples]
    mnk = np.array(geo, float)
    m, n = mnk[:, 0], mnk[:, 1]
    c_in = np.array([s.shape[1] for s in samples], float)
    passes = 2.0 if samples and samples[0].op == "conv_bwd" else 1.0
    traffic = [passes * conv_traffic(*g, s.shape[4], s.shape[5], elem)
               for g, s in zip(geo, samples, strict=True)]
    mem_t = np.array([memory.time(b) for b in traffic]) if memory else np.zeros(len(samples))
    t = np.array([net_time(s, d) for s in samples])
    f = passes * 2 * mnk.prod(axis=1)
    best = float((f / t).max())

    def model(p: np.ndarray) -> np.ndarray:
        rate, hm, hn, hc, t0 = math.exp(p[0]), *np.exp(p[1:4]), math.exp(p[4])
        return t0 + f / (rate * _phi(m, hm) * _phi(n, hn) * _phi(c_in, hc)) + p[5] * mem_t

    x0 = [math.log(best * 1.2), math.log(16), math.log(16), math.log(16),
          math.log(max(d.op_s, 1e-7)), 1.0]
    lo = [math.log(best * 0.5), math.log(0.1), math.log(0.1), math.log(0.1), math.log(1e-8), 0.0]
    hi = [math.log(best * 20), math.log(1e5), math.log(1e5), math.log(1e5), math.log(1e-2),
          MAX_TRAFFIC_PASSES]
    use = np.ones(len(t), bool) if anchor is None else np.asarray(anchor, bool)
    p = _least_squares(lambda p: (np.log(model(p)) - np.log(t))[use], x0, lo, hi)
    res = np.log(t) - np.log(model(p))
    pts = tuple((*(math.log2(v) for v in g), math.log2(s.shape[4]), math.log2(s.shape[5]))
                for g, s in zip(geo, samples, strict=True))
    return ConvCurve(rate=math.exp(p[0]) / passes, t0=math.exp(p[4]),
                     h=tuple(float(v) for v in np.exp(p[1:4])), points=pts,
                     residuals=tuple(float(r) for r in res), memory=memory,
                     traffic_factor=float(p[5]) if memory else 0.0, traffic_passes=passes,
                     elem_bytes=elem)



def fit_memory(samples: Sequence[KernelSample], d: Dispatch) -> MemoryCurve:
    """Per size measured (the median where a size repeats): seconds less the op's fixed
    cost, made non-decreasing in size (moving more bytes never takes less time)."""
    by: dict[float, list[float]] = {}
    for s in samples:
        host = 0.0 if s.clock == "device" else d.op_s  # the device's clock timed no launch
        by.setdefault(s.bytes, []).append(max(net_time(s, d) - host, 0.1 * s.median_s))
    xs = sorted(by)
    ys = [statistics.median(by[x]) for x in xs]
    for i in range(1, len(ys)):
        ys[i] = max(ys[i], ys[i - 1])
    return MemoryCurve(nbytes=tuple(xs), seconds=tuple(ys))


def steady(samples: Sequence[KernelSample], threads: int) -> list[KernelSample]:
    """A memory pass's samples less those still unsteady after the calibration timed them
    again (``steadiness.unsteady``) and those far from the other sizes mapped afresh
    (``far_from_fresh_sizes``), where two or more remain: its curve interpolates between
    the sizes left, while one size timed in a slow spell would slow every result near it.
    On this project's 2-vCPU AMD EPYC a PyTorch calibration kept a 256 MiB pass of two
    calls 1.50 and 0.16 s apart (830 ms; 79 ms at 128 MiB): a product is never modelled
    below the pass that writes its result fresh, so FCN-5's 219 MB weight gradients read
    417 ms each against 190 and 237 ms timed. The unsteadiness is still said
    (``LocalFit.unsteady``, read from every sample), and the far passes
    (``LocalFit.far_passes``)."""
    far = {s.shape for s, _ in far_from_fresh_sizes(samples)}
    kept = [s for s in samples if not steadiness.unsteady(s, threads) and s.shape not in far]
    return kept if len(kept) >= 2 else list(samples)


#: a pass into a fresh result this many times slower per byte than the median of the
#: sizes mapped afresh is far from them (``far_from_fresh_sizes``)
FAR_FROM_FRESH = 3.0
#: the fewest sizes mapped afresh whose median a pass is set against
FAR_FRESH_SIZES = 3


def far_from_fresh_sizes(samples: Sequence[KernelSample]
                         ) -> list[tuple[KernelSample, float]]:
    """The samples of one pass (memory or update) whose result is ``MMAP_THRESHOLD_MAX``
    or more and that took more than ``FAR_FROM_FRESH`` times the median seconds per byte
    of those sizes (at least ``FAR_FRESH_SIZES`` of them), each with how many times the
    median. Past that size every pass streams from DRAM (a memory pass into pages mapped
    afresh), and nothing in the machine makes a byte of one size dearer than of another.
    In three stores of this project's 2-vCPU AMD EPYC (Zen 5, 2026-12-02; 36 curves of
    memory and update passes) no size that large took more than 1.42 times the median
    per byte of its curve's, but TensorFlow's 256 MiB memory pass in both workers of one
    main job: 773 ms at one thread, in two calls that agreed (steady by
    ``steadiness.unsteady``), against 2.4 to 7.7 ms at 32-128 MiB (44 times the median per
    byte; 29 at two threads). A calibration of TensorFlow alone minutes later timed it at
    15 ms. Kept, it priced the pass into a large fresh result at 1.4 ns a byte moved
    (0.03 at the other sizes), below which a product is never modelled, and FCN-5 in
    TensorFlow came out 113-129% too slow; left out, +3%, -6% and +1%."""
    fresh = [s for s in samples if s.bytes / 2 >= MMAP_THRESHOLD_MAX and s.median_s > 0]
    if len(fresh) < FAR_FRESH_SIZES:
        return []
    per_byte = statistics.median(s.median_s / s.bytes for s in fresh)
    return [(s, ratio) for s in fresh
            if (ratio := s.median_s / s.bytes / per_byte) > FAR_FROM_FRESH]


def far_passes_said(far: dict[str, float]) -> str:
    """'; 1 pass left out of its curve ... (memory 256 MiB 44x their median)' for the
    passes ``far_from_fresh_sizes`` found, by name; '' for none."""
    if not far:
        return ""
    n = len(far)
    which = ", ".join(f"{k} {v:.0f}x" for k, v in sorted(far.items(), key=lambda x: -x[1]))
    return (f"; {n} pass{'es' if n != 1 else ''} left out of {'their' if n != 1 else 'its'} "
            f"curve{'s' if n != 1 else ''} for taking far longer per byte than the other "
            f"sizes past 32 MiB ({which} their median)")


def _between(curves: dict[int, MemoryCurve], side: float, nbytes: float) -> float:
    """The time of ``nbytes`` between the two calibrated sides around ``side`` (channels),
    interpolated in log time and log side; outside them, the nearest one's curve."""
    return _log_between(sorted(curves), side, lambda k: curves[k].time(nbytes))


def _log_between(keys: Sequence[int], side: float, value: Callable[[int], float]) -> float:
    """``value`` at ``side`` from the two of ``keys`` around it, interpolated in log value
    and log side; outside them, the nearest one's."""
    lo = max((k for k in keys if k <= side), default=keys[0])
    hi = min((k for k in keys if k >= side), default=keys[-1])
    v_lo, v_hi = value(lo), value(hi)
    if lo == hi or v_lo <= 0 or v_hi <= 0:
        return v_lo
    w = math.log(side / lo) / math.log(hi / lo)
    return math.exp((1 - w) * math.log(v_lo) + w * math.log(v_hi))


def fit_by_side(samples: Sequence[KernelSample], d: Dispatch, axis: int,
                least: int = 1) -> dict[int, MemoryCurve]:
    """One memory curve per value of the shape's ``axis`` that has at least ``least``
    samples. An LSTM's (per hidden size) may have one: a layer's own shape, timed by a
    calibration scoped to its network, is its curve's one point."""
    by: dict[int, list[KernelSample]] = {}
    for s in samples:
        by.setdefault(s.shape[axis], []).append(s)
    return {k: fit_memory(v, d) for k, v in sorted(by.items()) if len(v) >= least}


def fit_by_channels(samples: Sequence[KernelSample], d: Dispatch) -> dict[int, MemoryCurve]:
    """One memory curve per channel count of the batch-norm samples (shape (batch,
    channels, side)). A batch normalisation reduces each channel over batch x height x
    width, and its kernels spread the channels over the cores or thread blocks, so at
    equal bytes a layer of few channels runs slower: on an H200 the calibration's 16
    channels over 16 M elements ran at 165 GB/s, 1024 channels at 1934."""
    return fit_by_side(samples, d, axis=1, least=2)


def fit_allreduce(samples: Sequence[KernelSample]) -> dict[int, AlphaBeta]:
    """A collective's time per process count (all-reduce, all-gather, reduce-scatter or
    broadcast):
    alpha and beta by least squares on relative error."""
    out = {}
    for world in sorted({s.world for s in samples}):
        pts = [s for s in samples if s.world == world]
        n = np.array([s.bytes for s in pts], float)
        t = np.array([s.median_s for s in pts], float)
        # minimise sum((alpha + n/beta)/t - 1)^2: linear in (alpha, 1/beta)
        a = np.stack([1 / t, n / t], axis=1)
        (alpha, inv_beta), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
        if alpha < 0 or inv_beta <= 0:  # noise: fall back to the largest and smallest sizes
            alpha = float(t[n.argmin()])
            inv_beta = float(max(t[n.argmax()] - alpha, 1e-9) / n.max())
        out[world] = AlphaBeta(world=world, alpha_s=float(alpha), beta_bytes_per_s=1 / float(inv_beta))
    return out


def nearest_world(curves: dict[int, AlphaBeta], processes: int) -> int:
    """The calibrated process count closest to ``processes`` among ``curves``' (the
    larger where two are as close)."""
    return min(curves, key=lambda w: (abs(w - processes), -w))


class LocalFit(_Frozen):
    """The fitted curves of one framework at one thread count and precision on this
    machine."""

    framework: str
    threads: int
    device: str = "cpu"
    #: the precision its kernels ran at (``RunSpec.precision``)
    precision: str = "fp32"
    dispatch: Dispatch
    gemm: GemmCurve
    #: the weight gradient's transposed product (None: calibrated before it was timed; the
    #: plain product's curve stands in)
    gemm_tn: GemmCurve | None = None
    #: a dense layer's product that reads its weights transposed (``kernels``' gemm_nt;
    #: None: calibrated before it was timed; the plain product's curve stands in)
    gemm_nt: GemmCurve | None = None
    #: the same over a sequence (time and batch contracted), on (m, n, time x batch)
    #: (None: calibrated before it was timed; ``gemm_tn`` stands in)
    gemm_tn_seq: GemmCurve | None = None
    conv: ConvCurve
    conv_bwd: ConvCurve
    #: a first layer's weight gradient alone (None: calibrated before it was timed; half
    #: the pair stands in, ``local.product_times``)
    conv_wgrad: WeightGradCurve | None = None
    memory: MemoryCurve
    #: the in-place update (None: calibrated before it was timed; ``memory`` stands in)
    update: MemoryCurve | None = None
    #: the softmax cross-entropy and its gradient, against the bytes of its logits and
    #: their gradient (None: calibrated before it was timed; ``memory`` stands in)
    xent: MemoryCurve | None = None
    #: batch normalisation forward and backward, against the bytes of ``costs``' rule
    #: (None: calibrated before it was timed; ``memory`` stands in)
    bn: MemoryCurve | None = None
    #: the same per channel count of the calibrated layers (``fit_by_channels``)
    bn_channels: dict[int, MemoryCurve] = Field(default_factory=dict)
    #: a max pool forward and its input's gradient, against the bytes of ``costs``' rule
    #: (None: calibrated before it was timed; ``memory`` stands in)
    pool: MemoryCurve | None = None
    #: an LSTM layer forward and both its gradients, against the bytes of ``costs``'
    #: rule, per hidden size (``fit_by_side``; empty: calibrated before it was timed, the
    #: layer's products stand in)
    lstm: dict[int, MemoryCurve] = Field(default_factory=dict)
    allreduce: dict[int, AlphaBeta] = Field(default_factory=dict)
    #: gloo's all-gather and reduce-scatter per process count, the bytes their whole
    #: tensor's (empty: calibrated before they were timed)
    allgather: dict[int, AlphaBeta] = Field(default_factory=dict)
    reducescatter: dict[int, AlphaBeta] = Field(default_factory=dict)
    #: gloo's broadcast per process count (empty: calibrated before it was timed)
    broadcast: dict[int, AlphaBeta] = Field(default_factory=dict)
    #: what two processes busy on one core lose beyond processor sharing, measured here
    #: (``fit_sharing``; None: not calibrated, ``sharing.CORE_SHARING_COST`` stands in)
    sharing_cost: float | None = None
    #: the same per step length: (a step's seconds alone, its cost), shortest first, for
    #: the short and the long core-sharing step (``fit_sharing_by_step``; empty: only the
    #: short one was timed)
    sharing: tuple[tuple[float, float], ...] = ()
    samples: int = 0
    #: compute slows by this factor when workers share cores (parallel runs)
    slowdown: float = Field(1.0, ge=1.0)
    #: where the curves come from when not from this machine's calibration (another GPU's,
    #: scaled: ``perfmodel.scaled``)
    origin: str | None = None
    #: per op, the share of the workers' CPUs other processes took while its kernels were
    #: timed (``core.disturbance``; empty: not measured, a calibration of an older dlperf)
    other_cpu_share: dict[str, float] = Field(default_factory=dict)
    #: the networks whose layers' shapes its products and convolutions were timed at
    #: ('alexnet@16'), beside a skeleton of the grid (``network_kernels``); None: the
    #: whole grid was timed
    scope: tuple[str, ...] | None = None
    #: whether its products and convolutions hold the skeleton of the grid (a whole grid
    #: does; a scoped calibration where it was timed at its thread count and framework,
    #: ``calibrate --skeleton``): without it, only the scope's networks are predicted
    skeleton: bool = True
    #: the machine's speed while it was calibrated: its kernel workers' speed probes
    #: (``core.speed_probe``; empty: not measured, a calibration of an older dlperf)
    speed_probe: dict[str, float] = Field(default_factory=dict)
    #: every network and batch whose layers' shapes a scoped run timed ('fcn5@8'), beside
    #: the whole grid too: the shapes no curve stands in for
    timed_at: tuple[str, ...] = ()
    #: the revision of dlperf's kernels its samples were timed with (``kernels.REVISION``;
    #: None: not known, curves not from this machine's calibration)
    revision: int | None = None
    #: per op, the share of its samples timed while the machine's own speed moved
    #: (``perfmodel.steadiness``; empty: not read, curves not from this machine)
    unsteady: dict[str, float] = Field(default_factory=dict)
    #: samples its kernel runs timed again for that, and those the second timing replaced
    retimed: tuple[int, int] = (0, 0)
    #: per op, how much slower (above 1) or faster one of its kernel runs timed the shapes
    #: it shares with another than that one did, where they disagree by more than
    #: ``run_speed.DISAGREE`` (``perfmodel.run_speed``; empty: they agree, or one run)
    run_speeds: dict[str, float] = Field(default_factory=dict)
    #: per op, the most times as long as at fewer threads one of its shapes took, where a
    #: second timing did not reproduce the first (``perfmodel.thread_consistency``; empty:
    #: none, or one thread count)
    slower_threads: dict[str, float] = Field(default_factory=dict)
    #: shapes timed again for taking far longer than at fewer threads (whether or not the
    #: second timing reproduced the first)
    threads_retimed: int = 0
    #: shapes timed again in one run, every shape of an op its kernel runs had timed at
    #: other speeds (``run_speeds`` before it; ``kinds.calibrate.retime``)
    runs_retimed: int = 0
    #: memory and update passes left out of their curves for taking far longer per byte
    #: than the other sizes mapped afresh (``far_from_fresh_sizes``): 'memory 256 MiB' to
    #: how many times their median
    far_passes: dict[str, float] = Field(default_factory=dict)

    def covers(self, network: str, batch: int) -> bool:
        """Whether its kernels were timed at the shapes of ``network`` at ``batch`` (or
        at the whole grid)."""
        return self.scope is None or f"{network}@{batch}" in self.scope

    def timed_exactly(self, network: str, batch: int) -> bool:
        """Whether a run timed the products and convolutions of ``network`` at ``batch``
        themselves, not only a grid whose curve stands in for them: at a pipeline's
        micro-batch of a few samples the whole grid's curve can miss by a fifth
        (docs/prediction.md, the pipelines on the AMD EPYC)."""
        return f"{network}@{batch}" in (*(self.scope or ()), *self.timed_at)

    def bn_time(self, nbytes: float, channels: float) -> float:
        """Seconds of a batch normalisation moving ``nbytes`` over ``channels`` channels:
        between the two calibrated channel counts around it, interpolated in log time
        and log channels; outside them, the nearest one's curve."""
        if not self.bn_channels:
            return (self.bn or self.memory).time(nbytes)
        return _between(self.bn_channels, channels, nbytes)

    def lstm_time(self, shape: tuple[float, float, float, float]) -> float | None:
        """Seconds of an LSTM layer's training step of ``shape`` (batch, steps, inputs,
        hidden units); None where no LSTM was timed. Its products set its time (the four
        gates' input and recurrent products, forward and both gradients: ``kernels.flops``'
        op 'lstm'), so it is read as a FLOP rate: on each calibrated hidden size around the
        layer's, the rate its curve gives for a layer of that width at the same batch and
        steps (at that layer's bytes, ``kernels.nbytes``), interpolated in log rate and log
        width. A width's curve read at the layer's own bytes instead stands for another
        batch at another width (at equal bytes a wider layer does more FLOPs): DLBench's
        LSTM, 256 units at batch 128, took 57 ms a layer from JAX's curves at 128 and 512
        units, whose rates at batch 128 (112 and 118 GFLOP/s) give 111 ms."""
        if not self.lstm:
            return None
        batch, steps, inputs, hidden = shape
        elem = element_bytes(self.precision)

        def rate(width: int) -> float:
            at = (batch, steps, width, width)
            return flops("lstm", at) / self.lstm[width].time(nbytes("lstm", at, elem))

        return flops("lstm", shape) / _log_between(sorted(self.lstm), hidden, rate)

    @property
    def in_place(self) -> MemoryCurve:
        """The curve of a pass that writes over what it reads (an update, a gradient's
        accumulation): the in-place update's, else the memory pass's."""
        return self.update or self.memory

    @property
    def label(self) -> str:
        """'torch x2', 'torch x1 bf16'."""
        prec = "" if self.precision == "fp32" else f" {self.precision}"
        return f"{self.framework} x{self.threads}{prec}"

    @property
    def disturbed(self) -> dict[str, float]:
        """The ops timed while other processes took more than ``DISTURBED`` of the CPUs."""
        return {op: v for op, v in self.other_cpu_share.items() if v > DISTURBED}

    @property
    def unsteady_ops(self) -> dict[str, float]:
        """The ops with more than ``steadiness.UNSTEADY_OP`` of their samples timed while
        the machine's own speed moved, even after they were timed again."""
        return {op: v for op, v in self.unsteady.items() if v > steadiness.UNSTEADY_OP}

    @property
    def doubtful(self) -> bool:
        """Whether its predictions should say how it was timed (``quality``)."""
        return bool(self.disturbed or self.unsteady_ops or self.run_speeds
                    or self.slower_threads)

    def quality(self) -> str:
        """One line: whether other processes disturbed this calibration or the machine's
        own speed moved under it, and the fix."""
        bad = self.disturbed
        moved = ", ".join(f"{op} {v:.0%}" for op, v in
                          sorted(self.unsteady_ops.items(), key=lambda x: -x[1]))
        others = max(self.other_cpu_share.values(), default=0.0)
        apart = ", ".join(f"{op} x{r:.2f}" for op, r in
                          sorted(self.run_speeds.items(), key=lambda x: -abs(x[1] - 1)))
        runs = (f"RUNS DISAGREE: its kernel runs timed the shapes they share at other "
                f"speeds ({apart}, one run's time over the other's at the median): one ran "
                f"on a disturbed machine")
        slow = ", ".join(f"{op} x{r:.2f}" for op, r in
                         sorted(self.slower_threads.items(), key=lambda x: -x[1]))
        slower = (f"SLOWER WITH MORE THREADS: a shape took longer than at fewer threads "
                  f"({slow} as long), and timing it again did not reproduce it: the "
                  f"machine's speed moved under one of the timings")
        if not bad and not moved and not apart and not slow:
            if not self.other_cpu_share:
                return "disturbance not measured (calibrated by an older dlperf, or no /proc/stat)"
            again, kept = self.retimed
            timed_again = (f"; {again} sample{'s' if again != 1 else ''} timed again where "
                           f"the machine's own speed moved ({kept} replaced by a steadier "
                           f"timing)" if again else "")
            n = self.threads_retimed
            timed_again += (f"; {n} shape{'s' if n != 1 else ''} timed again for taking far "
                            f"longer than at fewer threads" if n else "")
            n = self.runs_retimed
            timed_again += (f"; {n} shape{'s' if n != 1 else ''} timed again in one run, its "
                            f"kernel runs having timed their ops at other speeds" if n else "")
            return (f"undisturbed (other processes took at most {others:.0%} of the CPUs "
                    f"while it was timed{timed_again}{self.far_said()})")
        unsteady = (f"UNSTEADY: the machine's own speed moved while these kernels were timed "
                    f"({moved} of their samples had calls spread by more "
                    f"than {steadiness.UNSTEADY - 1:.0%} with the threads busy)")
        if bad:
            worst = ", ".join(f"{op} {v:.0%}"
                              for op, v in sorted(bad.items(), key=lambda x: -x[1]))
            said = (f"DISTURBED: other processes took {worst} of the CPUs while those "
                    f"kernels were timed" + (f"; {unsteady}" if moved else ""))
            where = "on a quiet machine"
        elif moved and self.other_cpu_share:
            said = f"{unsteady}; other processes took at most {others:.0%} of the CPUs"
            where = "when the machine is steadier, or with --repeat 3"
        elif moved:
            said, where = unsteady, "on a steadier machine"
        else:  # the runs or the thread counts disagree: the scoped runs are timed again
            # by their networks
            said, where = "", ("on a steadier machine, and again with the --networks and "
                               f"--batch-size it was scoped to ({', '.join(self.timed_at)})"
                               if self.timed_at else "on a steadier machine")
        said = "; ".join(x for x in (said, runs if apart else "", slower if slow else "")
                         if x) + self.far_said()
        return (f"{said}; its predictions may be off: run 'dlperf calibrate --frameworks "
                f"{self.framework} --threads {self.threads} --force' {where}")

    def far_said(self) -> str:
        """``far_passes_said`` of its own passes."""
        return far_passes_said(self.far_passes)

    def describe(self) -> str:
        g = self.gemm
        prec = "" if self.precision == "fp32" else f", {self.precision}"
        where = self.origin or "calibrated on this machine"
        side = 4096  # a large product: the curve's asymptote can lie beyond any real one
        rate = 2 * side**3 / g.time(side, side, side)
        return (f"{where} ({self.framework}, {self.threads} thread"
                f"{'s' if self.threads != 1 else ''}{prec}, {self.samples} kernel samples): GEMM "
                f"{rate / 1e9:.3g} GFLOP/s at {side}^3, DRAM "
                f"{self.memory.dram_bytes_per_s / 1e9:.3g} GB/s, "
                f"{self.dispatch.step_op_s * 1e6:.3g} us per op, "
                f"{self.dispatch.step_call_s * 1e6:.3g} us per step call"
                + (f"; products and convolutions timed at the shapes of "
                   f"{', '.join(self.scope)} and a skeleton of the grid" if self.scope else "")
                + (f"; {self.quality()}" if self.doubtful else "")
                + (f"; {note}" if (note := self.older_kernels()) else ""))

    def older_kernels(self) -> str | None:
        """What a calibration timed with an older revision of dlperf's kernels lacks, and
        the command that times them again; None where its kernels are the current ones."""
        if self.revision is None or self.revision >= REVISION:
            return None
        where = (("" if self.device == "cpu" else f" --device {self.device}")
                 + ("" if self.precision == "fp32" else f" --precision {self.precision}")
                 + _scope_flags(self.scope))
        return (f"timed with dlperf's kernels of revision {self.revision} (now {REVISION}: "
                f"{'; '.join(changes_since(self.revision))}); 'dlperf calibrate "
                f"--frameworks {self.framework} --threads {self.threads}{where}' times them "
                f"again")


def _scope_flags(scope: Sequence[str] | None) -> str:
    """The ``dlperf calibrate`` flags that time a scope's networks again: '--networks', and
    '--batch-size' where a batch is not its network's default (every network is then
    timed at every batch named); none for the whole grid (None)."""
    from dlperf.workloads import WORKLOADS

    if not scope:
        return ""
    pairs = [(name, int(batch)) for name, batch in (x.rsplit("@", 1) for x in scope)]
    networks = ",".join(dict.fromkeys(name for name, _ in pairs))
    if all(name in WORKLOADS and WORKLOADS[name].default_batch == batch
           for name, batch in pairs):
        return f" --networks {networks}"
    batches = ",".join(dict.fromkeys(str(b) for _, b in pairs))
    return f" --networks {networks} --batch-size {batches}"


#: Frameworks whose CPU tensors are allocated and freed one by one with glibc's malloc
#: (PyTorch's CPU allocator: posix_memalign and free, no pool of its own)
MALLOC_PER_TENSOR = ("torch",)
#: glibc's largest dynamic mmap threshold on 64-bit systems (DEFAULT_MMAP_THRESHOLD_MAX,
#: 4 * 1024 * 1024 * sizeof(long); mallopt(3)): a block of that size or more is always
#: mapped anew (PyTorch's 64-byte aligned allocation of exactly 32 MiB asks malloc for a
#: little more: 5,300-8,200 minor faults per 32 MiB result, none below 31.98 MiB)
MMAP_THRESHOLD_MAX = 32 * 2**20


def new_page_byte_s(memory: MemoryCurve, update: MemoryCurve | None) -> float:
    """Seconds per byte that a new page costs: the memory pass into a fresh result less
    the in-place update of as many bytes (both read and write each element once), over
    the result's bytes (half of those moved). The median over the sizes the memory pass
    was timed at whose result is mapped afresh (``MMAP_THRESHOLD_MAX`` or more), up to
    the largest both were timed at (that size alone where none is): a first touch costs
    what the host makes it cost at the moment, and one size timed in a slow spell must
    not price every large result. On this project's 2-vCPU AMD EPYC a PyTorch
    calibration's 256 MiB pass gave 3.05 ns a byte of new pages against 0.49-0.68 at the
    sizes below it (830 ms, where other calibrations took 173-182); read at that size
    alone, FCN-5's weight gradients gained 530 ms of new pages each, and its step at one
    thread was predicted 126% too slow."""
    if update is None:
        return 0.0
    top = min(memory.nbytes[-1], update.nbytes[-1])
    fresh = [n for n in memory.nbytes if MMAP_THRESHOLD_MAX <= n / 2 and n <= top]
    return statistics.median(max(memory.time(n) - update.time(n), 0.0) / (n / 2)
                             for n in fresh or [top])


#: Frameworks whose compiled training step allocates its temporaries as one block per
#: call. XLA:CPU's buffer assignment packs a step's intermediate results into one
#: temporary allocation (2.2 GB for ResNet-50 at batch 16: ``Compiled.memory_analysis``),
#: made at every call, far beyond the 32 MB at which glibc's malloc maps an allocation
#: of its own; so the activations' pages are new at every step: 856,000 minor page faults
#: (3.5 GB) and 1.27 s of system time in a 7.9 s step at one thread on this machine
#: (``getrusage``; with glibc's mappings off, GLIBC_TUNABLES=glibc.malloc.mmap_max=0,
#: 544,000 faults and 7.3 s). PyTorch frees and allocates tensor by tensor (only a
#: result beyond that size gets new pages, as the memory pass times it); TensorFlow
#: pools its memory (its fresh and in-place passes take the same time).
FRESH_BLOCK = ("jax",)


def in_step_block(framework: str, device: str) -> bool:
    """Whether the framework's step keeps its temporaries in one block made per call
    (``FRESH_BLOCK``, on a CPU): there a product's result lies in pages the step pays
    once (``local.fresh_block_s``), not at each product. XLA's jitted product alone
    returns its result in a buffer of its own: JAX at one thread on this project's
    2-vCPU AMD EPYC, a (64 x 2048)^T (64 x 26752) product, results of 4 to 23 MiB took
    no fault, of 32, 64 and 209 MiB one per page, 209 MiB in 126 ms alone against 30 ms
    as FCN-5's weight gradient in its step. A convolution's samples keep theirs: XLA's
    convolutions map scratch buffers of their own at every call, in a step as alone (its
    ResNet-50 step at batch 16 faults 3.5 GB, its temporaries block 2.2 GB)."""
    return framework in FRESH_BLOCK and device == "cpu"


def kernel_results_afresh(framework: str, device: str, op: str) -> bool:
    """Whether the framework's calibration kernel ``op`` makes a large result in new
    pages at every call that the step model adds on its own: PyTorch's every product and
    convolution (``allocates_per_tensor``: per result, ``local.new_pages_s``), JAX's
    matrix products (``in_step_block``: in its temporaries block)."""
    return allocates_per_tensor(framework, device) or (
        in_step_block(framework, device) and op in PRODUCTS)


def alone_afresh_s(framework: str, device: str, op: str, nbytes: float,
                   byte_s: float) -> float:
    """Seconds of the new pages of an ``nbytes`` result that the calibration kernel
    ``op`` makes on its own (``kernel_results_afresh``), at ``byte_s`` a byte: a block of
    at least ``MMAP_THRESHOLD_MAX``."""
    if not kernel_results_afresh(framework, device, op) or nbytes < MMAP_THRESHOLD_MAX:
        return 0.0
    return nbytes * byte_s


def allocates_per_tensor(framework: str, device: str) -> bool:
    """Whether the framework's results come from glibc's malloc one by one
    (``MALLOC_PER_TENSOR``, on a CPU): only there is a large result new pages at every
    call."""
    return framework in MALLOC_PER_TENSOR and device == "cpu"


def mapped_afresh_s(framework: str, device: str, nbytes: float, byte_s: float) -> float:
    """Seconds of the new pages of an ``nbytes`` result at ``byte_s`` a byte: only where
    the framework allocates tensor by tensor (``allocates_per_tensor``) and the block is
    at least ``MMAP_THRESHOLD_MAX`` (``local.new_pages_s`` says why)."""
    if not allocates_per_tensor(framework, device) or nbytes < MMAP_THRESHOLD_MAX:
        return 0.0
    return nbytes * byte_s


def conv_results(op: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Elements of each result one calibration call of a convolution makes: forward its
    output; backward its input's gradient and its weights' (a first layer's: the
    weights' alone)."""
    batch, c_in, c_out, side, window, stride = shape
    if op == "conv":
        return (batch * c_out * conv_out(side, window, stride) ** 2,)
    if op == "conv_wgrad":
        return (window * window * c_in * c_out,)
    return batch * c_in * side * side, window * window * c_in * c_out


def results(sample: KernelSample) -> tuple[int, ...]:
    """Elements of each result one call of a product (m x n) or a convolution
    (``conv_results``) makes."""
    if sample.op in CONVS:
        return conv_results(sample.op, sample.shape)
    return (sample.shape[0] * sample.shape[1],)


def without_new_pages(samples: Sequence[KernelSample], framework: str, device: str,
                      byte_s: float, elem: int, kept: MemoryCurve) -> list[KernelSample]:
    """The products' and convolutions' samples less their results' new pages
    (``alone_afresh_s``, per result: ``results``): the calibration's kernel makes fresh
    results at each call, so such a sample carries them, and the step model adds them on
    its own (PyTorch's result by result, ``local.new_pages_s``; XLA's once, in its step's
    temporaries block, ``local.fresh_block_s``); left in, a kernel timed at a network's
    own shape would count them twice, and a convolution's fitted traffic would charge every large
    working set the fault rate (the 65 MB a 1x1 backward over 512 x 28 x 28 at batch 16
    moves, its 24.5 MiB input and 6 MiB output gradient twice, at the rate of one fresh
    32 MiB result: 66 ms modelled, 29 ms in PyTorch's step; its traffic is priced without
    new pages instead, ``traffic_curve``). Never below writing its results into pages
    already mapped, a copy's traffic at the ``kept`` curve (noise in the pages' price must
    not make a kernel free), nor above the sample itself. That floor and no higher one: a
    weight gradient at a micro-batch of one sample is an outer product, little more than
    its result's pages (PyTorch at one thread on this project's 2-vCPU AMD EPYC: 4096 x
    9216 from one row 59 ms into fresh pages, 5 ms into kept ones; a floor of half the
    sample had kept 45 of AlexNet's 90 ms at 12544 x 4096 beside the pages, its 4-stage
    pipeline's last stage 36% too slow)."""
    out = []
    for s in samples:
        made = results(s)
        if pages := sum(alone_afresh_s(framework, device, s.op, e * elem, byte_s)
                        for e in made):
            floor = kept.time(2 * elem * sum(made))
            s = s.model_copy(update={"median_s": max(s.median_s - pages,
                                                     min(floor, s.median_s))})
        out.append(s)
    return out


def traffic_curve(memory: MemoryCurve, update: MemoryCurve | None, framework: str,
                  device: str) -> MemoryCurve:
    """The bandwidth a convolution's layout copies get. Where the samples' new pages are
    taken off and charged per result (``allocates_per_tensor``: PyTorch on a CPU), the
    in-place update's: the working set's caches, then DRAM, without new pages (the
    memory pass makes a fresh result at each call, and beyond 32 MiB that is a page
    fault per page, ten times slower here: a cost of the result, not of the bytes
    moved). Elsewhere the memory pass's, fresh pages and all, as the samples carry
    them: XLA's step makes its temporaries afresh too (``FRESH_BLOCK``), and
    TensorFlow's pool makes both passes alike."""
    if allocates_per_tensor(framework, device) and update is not None:
        return update
    return memory


def fit_sharing(samples: Sequence[KernelSample]) -> float | None:
    """How much less two processes on one core do together than one alone does (processor
    sharing's even split: 1), at least 1, for the short step (shapes (1,) and (2,)); None
    without both samples (``_sharing_of``)."""
    got = _sharing_of([s for s in samples if len(s.shape) == 1])
    return got[1] if got else None


def fit_sharing_by_step(samples: Sequence[KernelSample]) -> tuple[tuple[float, float], ...]:
    """(a step's seconds alone, its cost of sharing a core) for each step timed, shortest
    first: empty unless two steps of different lengths were (a calibration before the
    long step)."""
    by: dict[tuple[int, ...], list[KernelSample]] = {}
    for s in samples:
        by.setdefault(tuple(s.shape[1:]), []).append(s)
    out = sorted(got for same in by.values() if (got := _sharing_of(same)))
    return tuple(out) if len(out) > 1 else ()


def _sharing_of(samples: Sequence[KernelSample]) -> tuple[float, float] | None:
    """(the step's seconds alone, its cost) of one step's samples, shape[0] the processes:
    alone, the faster of its rounds (other work only ever slows one); together, the two
    processes' steps per second summed (the scheduler need not split the core evenly)."""
    by = {s.shape[0]: s.times_s or (s.median_s,) for s in samples}
    if 1 not in by or 2 not in by or min(by[1]) <= 0 or min(by[2]) <= 0:
        return None
    return min(by[1]), max(1.0, sharing_cost(by[1], by[2]))


def sharing_cost(alone: Sequence[float], two: Sequence[float]) -> float:
    """How much less two processes on one core did together (their steps per second
    summed: the scheduler need not split the core evenly) than one alone (its faster
    round: other work only ever slows one), from their seconds per step."""
    return (1 / min(alone)) / sum(1 / t for t in two)


#: the product's variants (its transposed forms, over a sequence) and the fewest samples
#: each is fitted on: with fewer, its curve is left out (``fit_local``) and a plainer
#: product's stands in for it (``local.product_times``), reading another layout's time
PRODUCT_VARIANTS = tuple(op for op in PRODUCTS if op != "gemm")
MIN_VARIANT_SAMPLES = 6


def fit_local(samples: Samples, framework: str, threads: int, device: str = "cpu",
              precision: str = "fp32") -> LocalFit:
    """Every curve from the samples of one framework at one thread count and precision."""
    d = fit_dispatch(samples.of_op("dispatch"), samples.of_op("dispatch_train"))
    far = {f"{op} {x.bytes / 2 / 2**20:.0f} MiB": ratio for op in ("memory", "update")
           for x, ratio in far_from_fresh_sizes(samples.of_op(op))}
    memory = fit_memory(steady(samples.of_op("memory"), threads), d)
    update = fit_memory(steady(up, threads), d) if (up := samples.of_op("update")) else None
    elem = element_bytes(precision)
    byte_s = new_page_byte_s(memory, update)

    traffic = traffic_curve(memory, update, framework, device)

    def products(op: str) -> list[KernelSample]:  # and convolutions
        # a result whose new pages are taken off is written, at least, into kept pages
        kept = update if update is not None and kernel_results_afresh(
            framework, device, op) else traffic
        return without_new_pages(samples.of_op(op), framework, device, byte_s, elem, kept)

    def anchor(op: str) -> list[bool] | None:
        return grid_anchor(op, [x.shape for x in samples.of_op(op)], device)

    gemm = fit_gemm(products("gemm"), d, anchor("gemm"))
    tn, nt = products("gemm_tn"), products("gemm_nt")
    # the sequence's product on (m, n, time x batch), the GEMM curve's three sides
    seq = [s.model_copy(update={"shape": (s.shape[0], s.shape[1], s.shape[2] * s.shape[3])})
           for s in products("gemm_tn_seq")]
    conv_bwd = fit_conv(products("conv_bwd"), d, traffic, elem, anchor("conv_bwd"))

    def variant(got: list[KernelSample], op: str) -> GemmCurve | None:
        return fit_gemm(got, d, anchor(op)) if len(got) >= MIN_VARIANT_SAMPLES else None

    return LocalFit(framework=framework, threads=threads, device=device, precision=precision,
                    dispatch=d, gemm=gemm, gemm_tn=variant(tn, "gemm_tn"),
                    gemm_nt=variant(nt, "gemm_nt"), gemm_tn_seq=variant(seq, "gemm_tn_seq"),
                    conv=fit_conv(products("conv"), d, traffic, elem, anchor("conv")),
                    conv_bwd=conv_bwd,
                    conv_wgrad=fit_conv_wgrad(products("conv_wgrad"), d, conv_bwd,
                                              anchor("conv_wgrad")),
                    memory=memory,
                    update=update,
                    xent=fit_memory(xe, d) if (xe := samples.of_op("xent")) else None,
                    bn=fit_memory(bn, d) if (bn := samples.of_op("bn")) else None,
                    bn_channels=fit_by_channels(bn, d),
                    pool=fit_memory(pool, d) if (pool := samples.of_op("pool")) else None,
                    lstm=fit_by_side(samples.of_op("lstm"), d, axis=3),
                    allreduce=fit_allreduce(samples.of_op("allreduce")),
                    allgather=fit_allreduce(samples.of_op("allgather")),
                    reducescatter=fit_allreduce(samples.of_op("reducescatter")),
                    broadcast=fit_allreduce(samples.of_op("broadcast")),
                    sharing_cost=fit_sharing(samples.of_op("share")),
                    sharing=fit_sharing_by_step(samples.of_op("share")),
                    samples=len(samples.items), far_passes=far)
