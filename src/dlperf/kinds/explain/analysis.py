"""One profiled step explained: each op group's measured time beside the model's time for
it (``perfmodel.ops``, from this machine's calibration), the framework's own time outside
the ops, the whole step's prediction, and a one-line diagnosis of where the step loses
most against the calibration."""

from __future__ import annotations

from dataclasses import dataclass

from dlperf import workloads
from dlperf.core import speed_probe, units
from dlperf.core.spec import RunResult, RunSpec
from dlperf.kinds.calibrate.prediction import predict_for_spec
from dlperf.kinds.explain.options import ProfileOutcome
from dlperf.perfmodel.fit import LocalFit
from dlperf.perfmodel.machine_fits import MachineFits
from dlperf.perfmodel.ops import OpTime, data_fed_inputs, gemm_shape, op_times
from dlperf.perfmodel.result import Prediction

OP_GROUPS = ("gemm", "conv", "conv_bwd", "memory", "dispatch", "unmodelled")
KIND_NAMES = {"gemm": "matrix products", "conv": "convolutions", "conv_bwd":
              "convolution gradients", "memory": "memory-bound ops", "dispatch":
              "dispatch-only ops (wrappers, views, autograd)", "unmodelled":
              "ops whose operands were not recorded (no model time)"}
#: an op group whose time beyond the model's is at least this share of the step is named
NOTABLE = 0.10
#: Tensor cores run a product at full rate when every dimension is a multiple of 16
#: bytes: 8 half elements, 4 TF32 ones (NVIDIA's Deep Learning Performance Guide,
#: "Matrix Multiplication Background", Tensor Core Requirements)
TENSOR_ALIGN = {"bf16": 8, "fp16": 8, "tf32": 4}
#: a product is named as unaligned when it runs below this share of its calibrated rate
SLOW = 0.5
#: ops whose times add up to more than this share of the profiled step ran side by side
#: (a profiler's own gaps never push a serial step's ops above the step; JAX's ResNet-50
#: at 2 threads on the 2-vCPU AMD EPYC: 6.54 s of ops in a 4.46 s step)
OVERLAPPED = 1.05
#: a profiled step this much longer than the timed, unprofiled one was slowed by the
#: profiler: PyTorch's ResNet-50 at batch 16 on two threads of the 2-vCPU AMD EPYC ran in
#: 3.65-4.03 s timed and 4.86-4.97 s profiled (three runs), at one thread 7.65 and 7.51 s
PROFILER_SLOWED = 1.15


@dataclass(frozen=True)
class Explanation:
    result: RunResult
    profile: ProfileOutcome
    ops: list[OpTime]
    fit: LocalFit
    prediction: Prediction | None

    @property
    def measured_s(self) -> float:
        """The timed median, without the profiler."""
        assert self.result.metrics is not None
        return self.result.metrics.median_s

    @property
    def ops_s(self) -> float:
        return sum(o.measured_s for o in self.ops)

    @property
    def outside_s(self) -> float:
        """The profiled step's wall time not spent inside any op (Python, the autograd
        engine's scheduling, the allocator, the profiler itself)."""
        return max(self.profile.step_s - self.ops_s, 0.0)

    def by_kind(self) -> list[tuple[str, float, float]]:
        """(kind, measured, model) per step, for each kind of op present."""
        out = []
        for k in OP_GROUPS:
            mine = [o for o in self.ops if o.kind == k]
            if mine:
                out.append((k, sum(o.measured_s for o in mine), sum(o.model_s for o in mine)))
        return out

    @property
    def speed_move(self) -> tuple[str, float] | None:
        """How far the machine's speed probe moved between the calibration and the profiled
        run (``core.speed_probe.drift``); None where either was not probed."""
        m = self.result.metrics if self.result is not None else None
        return speed_probe.drift(m.speed_probe if m else None, self.fit.speed_probe)

    def speed_note(self) -> str | None:
        """A line when the machine ran at another speed than when it was calibrated: then
        every op's share of its calibrated rate carries that move, not the library's."""
        move = self.speed_move
        if not speed_probe.moved(move):
            return None
        assert move is not None
        return (f"the machine ran at another speed than calibrated: "
                f"{speed_probe.describe(move, 'when ' + self.fit.label + ' was calibrated')}"
                f"; every 'of calibrated' share carries that (explain again when the machine "
                f"is steady, or calibrate again: --force)")

    def overlap_note(self) -> str | None:
        """A line when the ops' times add up to more than the profiled step
        (``OVERLAPPED``): the framework ran ops side by side (XLA:CPU's independent
        instructions, TensorFlow's inter-op threads), so each op's time is on a thread that
        shared the cores with others, and its share of the calibrated rate (a kernel timed
        alone, with every thread) reads low by as much."""
        step = self.profile.step_s
        if step <= 0 or self.ops_s <= OVERLAPPED * step:
            return None
        return (f"the ops' times add up to {self.ops_s / step:.0%} of the profiled step: the "
                f"framework ran ops side by side, so each op shared the cores with others "
                f"while it ran and its share of the calibrated rate (a kernel timed alone) "
                f"reads low by as much; the per-kind totals are time on threads, not the "
                f"step's")

    def profiler_note(self) -> str | None:
        """A line when the profiled step took far longer than the timed one
        (``PROFILER_SLOWED``): the profiler slowed the ops themselves, so each op's measured
        time, and its share of the calibrated rate, is the profiled step's, and the model's
        per-op agreement says nothing of the step as it runs."""
        step = self.profile.step_s
        m = self.result.metrics if self.result is not None else None
        if m is None or step <= PROFILER_SLOWED * m.median_s:
            return None
        model = f" (the model: {units.seconds(self.prediction.time_s)})" \
            if self.prediction is not None else ""
        return (f"the profiler slowed the step: {units.seconds(step)} profiled against "
                f"{units.seconds(m.median_s)} timed without it{model}; the op groups' "
                f"times are the profiled step's, slowed with it, not the step's as it runs")

    def notes(self) -> list[str]:
        """Causes the profile shows beyond the diagnosis: a machine running at another
        speed than calibrated (``speed_note``), a profiler that slowed the step
        (``profiler_note``); on a GPU at a tensor-core precision, the
        products with a dimension tensor cores cannot tile (``TENSOR_ALIGN``) that ran well
        below their calibrated rate (the calibration's shapes are powers of two)."""
        speed = [n for n in (self.speed_note(), self.profiler_note(), self.overlap_note()) if n]
        align = TENSOR_ALIGN.get(self.fit.precision) if self.fit.device == "gpu" else None
        if align is None:
            return speed
        odd: dict[int, list[OpTime]] = {}
        for o in self.ops:
            dims = gemm_shape(o.name, o.shapes) if o.kind == "gemm" else None
            if dims and o.share_of_calibrated < SLOW:
                for d in sorted({d for d in dims[1:] if d % align}):
                    odd.setdefault(d, []).append(o)
        out = []
        for d, ops in sorted(odd.items(), key=lambda kv: -sum(o.measured_s for o in kv[1])):
            took = sum(o.measured_s for o in ops)
            low = min(o.share_of_calibrated for o in ops)
            high = max(o.share_of_calibrated for o in ops)
            calls = sum(o.calls for o in ops)
            out.append(f"{calls:g} matrix product call{'s' if calls != 1 else ''} with a "
                       f"dimension of {d} (no multiple of {align} at {self.fit.precision}) ran "
                       f"at {low:.0%}-{high:.0%} of the calibrated rate and take "
                       f"{units.seconds(took)} ({took / self.profile.step_s:.0%} of the step): "
                       f"tensor cores want every dimension a multiple of 16 bytes; padding it "
                       f"to {-(-d // align) * align} is the usual cure")
        return speed + out

    def _losing_op(self, kind: str, excess: float) -> str:
        """'; most of it in 154 calls of xla:transpose_copy_fusion (55 shapes), ...': the
        op whose groups of ``kind`` together lose more than half of ``excess``, the kind's
        time over its model, where each group alone loses too little to be named (one op
        of a compiled step runs at many shapes: XLA names its fusions after what they do);
        '' where none does."""
        by: dict[str, list[OpTime]] = {}
        for o in self.ops:
            if o.kind == kind:
                by.setdefault(o.name, []).append(o)
        name, groups = max(by.items(), key=lambda kv: sum(o.excess_s for o in kv[1]))
        lost = sum(o.excess_s for o in groups)
        if len(groups) < 2 or lost < excess / 2:
            return ""
        calls = sum(o.calls for o in groups)
        took, model = sum(o.measured_s for o in groups), sum(o.model_s for o in groups)
        return (f"; most of it in {calls:g} call{'s' if calls != 1 else ''} of {name} "
                f"({len(groups)} shapes): {units.seconds(took)} against "
                f"{units.seconds(model)} modelled")

    def diagnosis(self) -> str:
        step = self.profile.step_s
        worst = max(self.ops, key=lambda o: o.excess_s, default=None)
        if worst is not None and worst.excess_s >= NOTABLE * step:
            rate = ""
            if worst.achieved_flops and worst.calibrated_flops:
                rate = (f" ({units.flops(worst.achieved_flops, '/s')} against "
                        f"{units.flops(worst.calibrated_flops, '/s')} calibrated)")
            calls = f"{worst.calls:g}"
            shape = worst.shape_text()
            return (f"the {calls} {worst.name} call{'s' if worst.calls != 1 else ''} per step "
                    f"{f'at {shape} ' if shape else ''}run at {worst.share_of_calibrated:.0%} of this "
                    f"machine's calibrated rate for that shape{rate} and take "
                    f"{worst.measured_s / step:.0%} of the step")
        kinds = self.by_kind()
        if not kinds:
            return "the profiler recorded no ops"
        k, measured, model = max(kinds, key=lambda x: abs(x[1] - x[2]))
        if abs(measured - model) >= NOTABLE * step:
            groups = sum(1 for o in self.ops if o.kind == k)
            head = (f"{KIND_NAMES[k]} take {units.seconds(measured)} per step in all "
                    f"({measured / step:.0%} of it), {measured / max(model, 1e-12):.2g} times "
                    f"the {units.seconds(model)} their calibrated curves give")
            if measured > model:
                return (f"{head} ({groups} op group{'s' if groups != 1 else ''}, none alone "
                        f"{NOTABLE:.0%} of the step over its model)"
                        + self._losing_op(k, measured - model))
            return (f"{head}: the library runs them faster in the step than the "
                    f"calibration's kernels of the same shapes")
        if self.outside_s >= 0.2 * step:
            return (f"the framework's own time outside the ops (Python, autograd or the runtime, allocation) "
                    f"takes {self.outside_s / step:.0%} of the step; the ops themselves run "
                    f"within {NOTABLE:.0%} of a step of their calibrated times")
        k, measured, _ = max(kinds, key=lambda x: x[1])
        return (f"every op group runs within {NOTABLE:.0%} of a step of its calibrated time; "
                f"{KIND_NAMES[k]} take {measured / step:.0%} of the step")


def explain(result: RunResult, calibration: MachineFits) -> Explanation:
    """The explanation of a stored profile run (kind 'profile') from this machine's
    calibration of its framework, thread count and precision."""
    assert isinstance(result.outcome, ProfileOutcome)
    s = result.spec
    model = calibration.model(s.framework, s.threads, s.device, precision=s.precision)
    step = RunSpec.model_validate({**s.model_dump(), "kind": "step", "options": {}})
    layers = workloads.get(s.network).layers(s.size, s.params)
    return Explanation(result, result.outcome,
                       op_times(result.outcome.ops, model.fit,
                                data_fed_inputs(layers, s.batch_size)),
                       model.fit, predict_for_spec(step, calibration))

