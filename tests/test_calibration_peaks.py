"""A calibration's kernel worker times its framework's peak kernels after its shapes, and
the runner stores them as the peak runs a study then finds instead of starting a worker
for each (``kinds.calibrate.peaks``)."""

from __future__ import annotations

import pytest

from dlperf.core import environment
from dlperf.core.spec import RunSpec
from dlperf.core.store import Store
from dlperf.engine.runner import Runner
from dlperf.kinds.calibrate import plan
from dlperf.kinds.calibrate.options import KernelOptions, KernelOutcome, KernelPart
from dlperf.kinds.peak import rates as peak


def test_a_cpu_calibration_at_fp32_times_the_peak_at_no_more_threads_than_cpus(monkeypatch):
    monkeypatch.setattr(environment, "usable_cpus", lambda: [0, 1])
    specs = plan.specs(["torch"], [1, 2, 4], allreduce=False)
    assert {s.threads: s.options.peaks for s in specs} == {1: True, 2: True, 4: False}
    # the peak is fp32's
    [half] = plan.specs(["torch"], [1], precision="bf16", allreduce=False)
    assert half.options.peaks is False
    # what the worker measures besides is not the configuration: a calibration stored by
    # a dlperf that timed no peak keeps its id, and is not run again
    for s in specs:
        without = s.model_copy(update={"options": s.options.model_copy(update={"peaks": False})})
        assert without.run_id == s.run_id


def test_the_peak_kernels_a_kernel_worker_timed_are_stored_as_peak_runs(db, monkeypatch):
    o = KernelOptions(parts=(KernelPart(op="memory", shapes=((4096,),)),), min_time_s=0.01,
                      versions={}, revision=1, peaks=True)
    spec = RunSpec(kind="kernel", network="kernels", framework="torch", batch_size=1,
                   threads=1, options=o)
    with Store(db) as st:
        runner = Runner(st, timeout_s=300)
        [kernel] = runner.run_all([spec])
        # stored apart, not inside the calibration's row
        assert kernel.ok and isinstance(kernel.outcome, KernelOutcome)
        assert kernel.outcome.peak_runs == () and kernel.outcome.samples
        [stored] = st.results(kind="kernel")
        assert stored.outcome.peak_runs == ()
        runs = st.peak_results(1, "cpu")
        assert sorted(r.spec.network for r in runs) == ["conv", "matmul"]
        assert all(r.ok and r.spec.framework == "torch" and r.metrics.achieved_flops > 0
                   for r in runs)
        # the very runs a peak worker of their own would have made: the study finds them
        found, missing = peak.lookup(runs, runner.peak_specs(1, "cpu"),
                                     environment.packages())
        assert sorted((r.spec.framework, r.spec.network) for r in found) == [
            ("torch", "conv"), ("torch", "matmul")]
        assert {s.framework for s in missing} <= {"tensorflow", "jax"}

        launched = []
        monkeypatch.setattr(Runner, "_run_and_store",
                            lambda self, s: launched.append(s) or pytest.fail("measured"))
        pk = Runner(st, timeout_s=300,
                    peak_kernels=(("torch", "matmul"), ("torch", "conv"))).ensure_peak(1)
        assert launched == [] and pk.flops
        assert {(rate.framework, rate.kernel) for rate in pk.rates} == {
            ("torch", "matmul"), ("torch", "conv")}
