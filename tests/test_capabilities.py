"""The backends' capabilities (``dlperf.backends.base``): each backend class declares
exactly the capabilities whose methods it defines, and a caller that asks a backend for
one it lacks gets UnsupportedError naming the backend and the capability.

A backend module is imported only where its framework is installed; every backend's
source (MXNet's, which lives in an environment of its own, included) is also read with
``ast``, which needs no framework."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from dlperf import backends
from dlperf.backends.base import (
    CAPABILITIES,
    Backend,
    Capability,
    ForwardOnly,
    PeakConv,
    PeakMatmul,
    PipelineTrainer,
    Timed,
    Trainer,
    UnsupportedError,
    capability,
    fp32_only,
    pipeline_trainer,
    probe,
)

#: what each backend implements: the list a reader finds on its class line
EXPECTED = {
    "torch": {"Inference", "InputPipelines", "PeakMatmul", "PeakConv", "CalibrationKernels",
              "Profiling", "AllReduce"},
    "tensorflow": {"Inference", "InputPipelines", "PeakMatmul", "CalibrationKernels",
                   "Profiling"},
    "jax": {"Inference", "InputPipelines", "PeakMatmul", "CalibrationKernels", "Profiling"},
    "keras": {"Inference", "PeakMatmul"},
    "mxnet": set(),
}


def _methods(cap: type[Capability]) -> set[str]:
    return set(cap.__abstractmethods__)


def test_every_capability_has_methods_a_label_and_a_message():
    assert len({c.__name__ for c in CAPABILITIES}) == len(CAPABILITIES)
    seen: set[str] = set()
    for cap in CAPABILITIES:
        assert _methods(cap), cap
        assert not _methods(cap) & seen, f"{cap.__name__} repeats another's method"
        seen |= _methods(cap)
        assert cap.label in cap.missing and "{name}" in cap.missing
    # the core has no method of a capability, and nothing of it has a default that raises
    assert not seen & set(dir(Backend))
    assert Backend.__abstractmethods__ == {"set_threads", "set_precision", "software",
                                           "has_gpu", "build"}


def test_the_registry_and_the_expectations_name_the_same_backends():
    assert set(EXPECTED) == set(backends.BACKENDS)


# ----------------------------------------------------------------------------- from the source
def _class_in_source(name: str) -> ast.ClassDef:
    """The class ``BACKEND_CLASS`` names, in the backend module's source."""
    spec = importlib.util.find_spec(backends.info(name).module)
    assert spec is not None and spec.origin
    tree = ast.parse(Path(spec.origin).read_text())
    assigned = next(n.value.id for n in tree.body if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "BACKEND_CLASS" for t in n.targets))
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == assigned)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_source_declares_the_capabilities_whose_methods_it_defines(name):
    cls = _class_in_source(name)
    bases = {b.id for b in cls.bases if isinstance(b, ast.Name)}
    defined = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert "Backend" in bases
    assert bases - {"Backend"} == EXPECTED[name]
    for cap in CAPABILITIES:
        declared = cap.__name__ in bases
        assert declared == (_methods(cap) <= defined), (
            f"{cls.name}: {cap.__name__} {'declared' if declared else 'not declared'}, "
            f"methods {sorted(_methods(cap) & defined)} of {sorted(_methods(cap))} defined")
        if not declared:
            assert not _methods(cap) & defined, f"{cls.name} defines {cap.__name__}'s methods"
    assert Backend.__abstractmethods__ <= defined


# ----------------------------------------------------------------------------- imported
def _backend_class(name: str) -> type[Backend]:
    if not backends.installed(name) or backends.info(name).python is not None:
        pytest.skip(f"{name} is not installed in this environment")
    return importlib.import_module(backends.info(name).module).BACKEND_CLASS


@pytest.mark.parametrize("name", ["torch", "tensorflow", "jax", "keras"])
def test_the_class_implements_exactly_what_it_declares(name):
    cls = _backend_class(name)
    assert not inspect.isabstract(cls), cls.__abstractmethods__
    assert {c.__name__ for c in CAPABILITIES if issubclass(cls, c)} == EXPECTED[name]
    for cap in CAPABILITIES:
        if not issubclass(cls, cap):
            assert not any(hasattr(cls, m) for m in _methods(cap)), (cls, cap)


def _backend(name: str) -> Backend:
    return _backend_class(name)()


@pytest.mark.parametrize("name", ["torch", "tensorflow", "jax", "keras"])
def test_a_missing_capability_is_unsupported_and_says_which(name):
    backend = _backend(name)
    for cap in CAPABILITIES:
        if isinstance(backend, cap):
            assert capability(backend, cap) is backend
            continue
        with pytest.raises(UnsupportedError) as e:
            capability(backend, cap)
        assert name in str(e.value) and cap.label in str(e.value)


def test_the_messages_are_the_ones_the_failures_recorded_before():
    class Bare(Backend):  # the core alone, as MXNet's backend
        name = "bare"

        def set_threads(self, threads):
            return threads

        def set_precision(self, precision, device):
            return fp32_only(self, precision)

        def software(self):
            return {}

        def has_gpu(self):
            return False

        def build(self, *a):
            raise AssertionError

    bare = Bare()
    expected = {
        "Inference": "the bare backend has no inference mode",
        "InputPipelines": "the bare backend has no input pipeline",
        "PeakMatmul": "bare has no matmul probe",
        "PeakConv": "bare has no conv probe",
        "CalibrationKernels": "bare has no calibration kernels",
        "Profiling": "dlperf explain cannot profile bare steps yet (the profilers of torch, "
                     "tensorflow and jax are wired)",
        "AllReduce": "bare has no all-reduce kernel (torch's gloo has)",
    }
    for cap in CAPABILITIES:
        with pytest.raises(UnsupportedError) as e:
            capability(bare, cap)
        assert str(e.value) == expected[cap.__name__]
    with pytest.raises(UnsupportedError, match="^the bare backend runs fp32 only$"):
        bare.set_precision("bf16", "cpu")
    assert bare.set_precision("fp32", "cpu") == {} and bare.precision == "fp32"
    # a peak kernel: the name first, then the capability that runs it
    with pytest.raises(UnsupportedError, match=r"^no peak kernel 'fft' \(known: matmul, conv\)$"):
        probe(bare, "fft", 64, "cpu")
    with pytest.raises(UnsupportedError, match="^bare has no conv probe$"):
        probe(bare, "conv", 64, "cpu")


def test_peak_kernels_go_to_the_capability_that_runs_them():
    calls = []

    class Probe(Timed):
        def step(self):
            pass

        def sync(self):
            pass

    class Matmul(PeakMatmul):
        name = "mm"

        def matmul(self, n, device):
            calls.append(("matmul", n, device))
            return Probe()

    assert isinstance(probe(Matmul(), "matmul", 8, "cpu"), Probe)  # type: ignore[arg-type]
    assert calls == [("matmul", 8, "cpu")]
    with pytest.raises(UnsupportedError, match="^mm has no conv probe$"):
        probe(Matmul(), "conv", 8, "cpu")  # type: ignore[arg-type]
    assert not issubclass(Matmul, PeakConv)


# ----------------------------------------------------------------------------- timed things
def test_what_does_not_train_is_timed_but_not_a_trainer():
    assert not issubclass(ForwardOnly, Trainer) and issubclass(ForwardOnly, Timed)
    assert issubclass(Trainer, Timed) and issubclass(PipelineTrainer, Trainer)
    assert Timed.__abstractmethods__ == {"step", "sync"}

    class Step(Trainer):
        def step(self):
            pass

        def sync(self):
            pass

    with pytest.raises(UnsupportedError, match="^Step cannot train on an input pipeline$"):
        pipeline_trainer(Step())


def test_the_torch_backend_builds_timed_things_of_the_right_kind():
    if not backends.installed("torch"):
        pytest.skip("torch is not installed")
    from dlperf import workloads
    from dlperf.backends import torch_backend as tb
    from dlperf.backends import torch_kernels

    be = tb.TorchBackend()
    cfg = workloads.get("fcn5").config("tiny")
    assert isinstance(be.build("fcn5", cfg, 2, "eager", "cpu", 0), PipelineTrainer)
    inf = be.build_inference("fcn5", cfg, 2, "eager", "cpu", 0)
    assert isinstance(inf, ForwardOnly) and not isinstance(inf, Trainer)
    for kernel in ("matmul", "conv"):
        p = probe(be, kernel, 64, "cpu")
        assert isinstance(p, Timed) and not isinstance(p, Trainer)
    k = be.kernel("memory", (1024,), "cpu")
    assert isinstance(k, torch_kernels.Kernel) and not isinstance(k, Trainer)
