"""Inside a worker: a run of kind 'kernel' times every shape of one calibration op
(``dlperf.perfmodel.kernels``) with the framework's own kernel, one after another in
this one process, and returns their times as the run's ``KernelOutcome``.

Each shape is warmed up and timed by the harness's rules (``measure.timing``), briefly: a
calibration grid has hundreds of shapes and must finish in minutes. On a CPU a shape's
sample is the first window of calls that agree (``measure_window``), which takes two calls
fewer than a training step's settling pair and sample after it. A shape that fails (out
of memory, a missing kernel) is recorded by name and the others go on.

A machine shared with other work slows a kernel by taking its cores away, which shows as
CPU time below the wall time. A shape whose timed calls kept its threads less than
``BUSY`` busy is timed again (``ATTEMPTS`` in all) and the attempt that kept them busiest
is kept: the choice is by the measurement's own CPU accounting, never by its time. An
attempt the machine's counters saw undisturbed (below) ends it at once, and two
attempts that agree (``ALIKE``: their CPU use within a tenth of a thread's, their times
within a tenth) show a kernel that keeps fewer threads busy of its own accord, as XLA
runs many ops on one thread; a third would find the same, and is not run.

That accounting sees only the worker's own threads. The machine's counters see the rest
(``core.disturbance``): while an op's shapes are timed, the share of the worker's CPUs
that other processes took. An op timed while others took more than
``disturbance.DISTURBED`` is timed once more and the less disturbed timing kept; the
share stays in the outcome (``KernelOutcome.other_cpu_share``), so that the calibration
says it was disturbed, and every prediction made from it.

Neither sees the machine itself slow down, in spells of seconds that leave no trace in
its counters; a sample's own calls do (``perfmodel.steadiness``: busy, and spread). Each
unsteady sample is timed once more after every op has been, seconds to minutes later, when
such a spell has likely passed, and the steadier of the two is kept (by its spread, never
by its time). What stays unsteady is read off the stored samples when the calibration is
fitted, and said like a disturbance.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from dlperf.backends.base import (
    AllReduce,
    Backend,
    CalibrationKernels,
    Timed,
    UnsupportedError,
    WorkerRuntime,
    capability,
)
from dlperf.core import disturbance, environment, speed_probe
from dlperf.core.errors import is_out_of_memory
from dlperf.core.spec import Measurement, RunResult, RunSpec
from dlperf.core.timing import Timing, measure, measure_window
from dlperf.kinds.calibrate import peaks
from dlperf.kinds.calibrate import runtime as train_runtime
from dlperf.perfmodel import steadiness
from dlperf.perfmodel.kernels import (
    COLLECTIVES,
    MACHINE_OPS,
    KernelOptions,
    KernelOutcome,
    KernelPart,
    KernelSample,
    element_bytes,
    flops,
    label,
    nbytes,
)
from dlperf.perfmodel.steadiness import BUSY

ATTEMPTS = 3
#: two attempts this close in CPU use (share of one thread) and in time are alike
ALIKE = 0.1
#: calls of a kernel queued on a GPU between two synchronisations (``Queued``)
GPU_CALLS = 10


class Queued:
    """A kernel called ``calls`` times per timed step, then synchronised once: on a GPU
    ``GPU_CALLS``, on a CPU one. In a training step the host queues the next kernels
    while the device runs the current one (CUDA launches are asynchronous: PyTorch's
    'CUDA semantics', 'Asynchronous execution'); a kernel timed with a synchronisation
    after every call would add the launch and the round trip (about 14 us on an H200) to
    every kernel, more than the whole run of a small one. ``per_call`` turns a step's
    time back into one call's.

    Where the framework's kernel offers the device's own clock (``device_clock()``:
    PyTorch on a GPU), a step's time is the device's work alone: the model adds the
    host's launches from the dispatch kernel (``predict._Context.exposed``), so a
    kernel timed with its host side would count them twice."""

    def __init__(self, trainer: Timed, calls: int):
        self.trainer, self.calls = trainer, calls
        self.clock = trainer.device_clock()

    def step(self) -> None:
        if self.clock is not None:
            self.clock.start()
        for _ in range(self.calls):
            self.trainer.step()
        if self.clock is not None:
            self.clock.stop()

    def elapsed(self) -> Callable[[], float] | None:
        """The step's time from the device's clock, or None for the wall clock."""
        return self.clock.elapsed if self.clock is not None else None

    def sync(self) -> None:
        self.trainer.sync()

    def per_call(self, times: list[float]) -> list[float]:
        return [t / self.calls for t in times]


def _timing(o: KernelOptions) -> Measurement:
    return Measurement(min_time_s=o.min_time_s, min_steps=o.min_steps,
                       warmup_min_steps=max(1, o.warmup), warmup_max_steps=max(1, o.warmup) + 3,
                       warmup_max_time_s=max(1.0, 10 * o.min_time_s), settle_tolerance=0.1)


def _sample(op: str, shape: tuple[int, ...], times: list[float], world: int = 1,
            cpu_util: float | None = None, precision: str = "fp32",
            device_clock: bool = False) -> KernelSample:
    return KernelSample(op=op, shape=shape, median_s=statistics.median(times),  # type: ignore[arg-type]
                        times_s=tuple(times), flops=flops(op, shape),
                        bytes=nbytes(op, shape, element_bytes(precision)), world=world,
                        cpu_util=cpu_util, clock="device" if device_clock else "wall")


def _timed(trainer: Queued, o: KernelOptions, threads: int, device: str) -> Timing:
    """The least disturbed of up to ``ATTEMPTS`` timings (module docstring). Calls shorter
    than a millisecond are left to the median of their many repetitions: the CPU clock
    cannot tell a short call's disturbance from the framework's idle threads. A GPU kernel
    is timed once, by ``measure`` on the device's clock: the host's threads wait on the
    device, so their CPU time says nothing of the kernel's."""
    best: Timing | None = None
    last: Timing | None = None
    for attempt in range(ATTEMPTS if device == "cpu" else 1):
        if device == "cpu":  # a later attempt's kernel is warm: it discards no call
            t = measure_window(trainer.step, trainer.sync, _timing(o),
                               discard=None if attempt == 0 else 0)
        else:
            t = measure(trainer.step, trainer.sync, _timing(o), clock=trainer.elapsed())
        if best is None or t.cpu_util > best.cpu_util:
            best = t
        if statistics.median(t.steps_s) < 1e-3 or t.cpu_util >= BUSY * threads \
                or _quiet(t) or (last is not None and _alike(last, t)):
            break
        last = t
    assert best is not None
    return best


def _quiet(t: Timing) -> bool:
    """The machine's counters saw no other process take the kernel's CPUs while it was
    timed (``core.disturbance``, over a window long enough for them to tell): threads it
    kept idle were idle of its own accord, and another attempt would find the same. On
    2 cores XLA's kernels at two threads were timed twice for this, a fifth of JAX's
    calibration."""
    return t.disturbance is not None and not t.disturbance.disturbed


def _alike(a: Timing, b: Timing) -> bool:
    """Two attempts at one shape that kept the same share of the threads busy and took
    the same time (module docstring)."""
    ta, tb = statistics.median(a.steps_s), statistics.median(b.steps_s)
    return abs(a.cpu_util - b.cpu_util) <= ALIKE and abs(ta - tb) <= ALIKE * min(ta, tb)


def _runtime_fields(runtimes: list[WorkerRuntime]) -> dict[str, int | None]:
    """``KernelOutcome``'s runtime fields: each the largest its processes measured (None
    where none did)."""
    return {f"{name}_runtime_bytes": max((b for r in runtimes
                                          if (b := getattr(r, f"{name}_bytes"))), default=None)
            for name in KernelOutcome.RUNTIMES}


def _collectives(o: KernelOptions, parts: list[KernelPart], backend: Backend,
                 emit: Callable[[dict], None]) -> tuple[list[KernelSample], WorkerRuntime | None]:
    """The collectives' samples, every part timed among one set of processes, and the
    runtime those processes measured (a parallel worker's resident memory before its
    network)."""
    wanted = [(part.op, [s[0] for s in part.shapes]) for part in parts]
    series, runtime = capability(backend, AllReduce).collectives(
        wanted, o.world, max(o.min_steps, 5), max(o.warmup, 2))
    samples = [_sample(op, (n,), times, o.world)
               for (op, sizes), got in zip(wanted, series, strict=True)
               for n, times in zip(sizes, got, strict=True)]
    for s in samples:
        _emit(emit, s)
    return samples, runtime


def _share(o: KernelOptions, part: KernelPart, backend: Backend,
           emit: Callable[[dict], None]) -> list[KernelSample]:
    """The core-sharing op: a step's seconds in one process alone on a CPU (shape (1,), or
    (1, batch)) and in each of two on it at once ((2,), (2, batch)), each timed for
    ``min_time_s``, per batch its shapes name."""
    samples = []
    for batch in dict.fromkeys(s[1] if len(s) > 1 else None for s in part.shapes):
        alone, two = capability(backend, AllReduce).core_sharing(max(o.min_time_s, 1.0),
                                                                 batch)
        tail = () if batch is None else (batch,)
        got = [_sample(part.op, (1, *tail), alone, 1), _sample(part.op, (2, *tail), two, 1)]
        for s in got:
            _emit(emit, s)
        samples += got
    return samples


def _emit(emit: Callable[[dict], None], s: KernelSample) -> None:
    """Announce a timed shape with its whole sample: a run killed later keeps it
    (``dlperf.kinds.calibrate.resume.salvage``)."""
    emit({"phase": "kernel", "op": s.op, "shape": list(s.shape), "s": s.median_s,
          "sample": s.model_dump(mode="json")})


def _shapes(o: KernelOptions, part: KernelPart, spec: RunSpec, backend: CalibrationKernels,
            emit: Callable[[dict], None], failures: dict[str, str],
            done: dict[tuple, KernelSample] | None = None) -> list[KernelSample]:
    """Each shape of ``part`` timed, or taken from ``done`` (an interrupted run's)."""
    samples = []
    for shape in part.shapes:
        if (kept := (done or {}).get((part.op, tuple(shape)))) is not None:
            samples.append(kept)
            _emit(emit, kept)
            continue
        try:
            samples.append(_time_shape(o, spec, backend, part.op, tuple(shape)))
        except UnsupportedError as e:
            failures[f"{part.op} {label(shape)}"] = f"unsupported: {e}"
            continue
        except Exception as e:
            reason = "oom" if is_out_of_memory(e) else "error"
            failures[f"{part.op} {label(shape)}"] = f"{reason}: {type(e).__name__}: {e}"[:300]
            continue
        _emit(emit, samples[-1])
    return samples


def _time_shape(o: KernelOptions, spec: RunSpec, backend: CalibrationKernels, op: str,
                shape: tuple[int, ...]) -> KernelSample:
    """One shape of ``op`` timed (``_timed``) as its sample; raises where its kernel
    fails."""
    trainer = Queued(backend.kernel(op, shape, spec.device),
                     GPU_CALLS if spec.device != "cpu" else 1)
    timing = _timed(trainer, o, spec.threads, spec.device)
    return _sample(op, shape, trainer.per_call(timing.steps_s), cpu_util=timing.cpu_util,
                   precision=spec.precision, device_clock=trainer.clock is not None)


def _watched_shapes(o: KernelOptions, part: KernelPart, spec: RunSpec,
                    backend: CalibrationKernels, emit: Callable[[dict], None],
                    failures: dict[str, str], done: dict[tuple, KernelSample] | None
                    ) -> tuple[list[KernelSample], float | None]:
    """``part``'s shapes with the share of the CPUs others took meanwhile; timed once more
    where others took more than ``disturbance.DISTURBED``, the less disturbed kept. Shapes
    resumed from an interrupted run are not watched (their time is not now)."""
    if done and all((part.op, tuple(s)) in done for s in part.shapes):
        return _shapes(o, part, spec, backend, emit, failures, done), None
    before = disturbance.read()
    samples = _shapes(o, part, spec, backend, emit, failures, done)
    d = disturbance.between(before, disturbance.read())
    if d is None or not d.disturbed or spec.device != "cpu":
        return samples, d.other_share + d.steal_share if d else None
    before = disturbance.read()
    # the resumed shapes kept as they were timed then: only this run's are timed again
    again = _shapes(o, part, spec, backend, emit, {}, done)
    d2 = disturbance.between(before, disturbance.read())
    share, share2 = d.other_share + d.steal_share, (
        d2.other_share + d2.steal_share if d2 else 1.0)
    # the second timing only where it is less disturbed and timed every shape the first did
    better = share2 < share and len(again) >= len(samples)
    return (again, share2) if better else (samples, share)


def _steadier(o: KernelOptions, spec: RunSpec, backend: CalibrationKernels,
              emit: Callable[[dict], None], samples: list[KernelSample],
              resumed: set[tuple]) -> tuple[list[KernelSample], int, int]:
    """``samples`` with each one timed unsteadily (``perfmodel.steadiness``) timed once
    more, the steadier of the two kept where the second kept its threads busy (module
    docstring), and how many were timed again and replaced. On a GPU the device's clock
    times a kernel, whatever the host does; resumed samples are kept as they were."""
    if spec.device != "cpu":
        return samples, 0, 0
    out, retimed, replaced = [], 0, 0
    for s in samples:
        if s.op in MACHINE_OPS or (s.op, s.shape) in resumed \
                or not steadiness.unsteady(s, spec.threads):
            out.append(s)
            continue
        retimed += 1
        try:
            again = _time_shape(o, spec, backend, s.op, s.shape)
        except Exception:  # it ran once: keep that sample rather than lose the shape
            out.append(s)
            continue
        # steadier, and flat out: a timing that another process slowed keeps a thread idle
        if steadiness.spread(again) < steadiness.spread(s) \
                and (again.cpu_util or 0.0) >= BUSY * spec.threads:
            _emit(emit, again)  # a run killed later keeps the later sample of the shape
            s, replaced = again, replaced + 1
        out.append(s)
    return out, retimed, replaced


def run_kernels(spec: RunSpec, backend: Backend, emit: Callable[[dict[str, Any]], None],
                base: dict[str, Any], resume: KernelOutcome | None = None) -> RunResult:
    """Time every shape of every op of ``spec``'s kernel options; a failing shape is
    recorded and the others go on. Fails only when no shape ran. The shapes ``resume``
    holds (an interrupted run of this spec, ``runner``) are kept as they were timed; the
    outcome counts them (``resumed``). The all-reduce is always timed whole."""
    o = spec.options
    assert isinstance(o, KernelOptions)
    baseline = environment.resident_bytes()  # the framework loaded, nothing built yet
    failures: dict[str, str] = {}
    # the framework's runtime when it trains, per network: before the kernels, whose
    # buffers would count in its peak
    train_peaks, trained = (train_runtime.train_runtimes(o, backend, failures)
                            if train_runtime.measures(spec) else ({}, {}))
    # the libraries' files' pages as training left them mapped (the code a step runs): the
    # state the runtime baseline was read in, which a step's own after its steps compares to
    baseline_files = environment.file_resident_bytes()
    # the machine's speed as these kernels ran, probed through their run (a step measured
    # at another speed is flagged beside its prediction); a GPU's kernels are the device's,
    # and the machine's ops (collectives, core sharing) make no curve a step is predicted by
    probed = spec.device == "cpu" and any(p.op not in MACHINE_OPS for p in o.parts)
    spread = speed_probe.Spread() if probed else None
    if spread:
        spread.probe()
    samples: list[KernelSample] = []
    others: dict[str, float] = {}
    done = {(s.op, s.shape): s for s in (resume.samples if resume else ())
            if s.op not in MACHINE_OPS}
    runtimes: list[WorkerRuntime] = []
    kernels, missing = None, ""
    try:
        kernels = capability(backend, CalibrationKernels)
    except UnsupportedError as e:  # a backend without kernels: every shape fails with why
        missing = f"unsupported: {e}"
    if collective := [p for p in o.parts if p.op in COLLECTIVES]:  # in one process group
        try:
            got, runtime = _collectives(o, collective, backend, emit)
            samples += got
            runtimes += [runtime] if runtime else []
        except Exception as e:
            failures.update({p.op: f"{type(e).__name__}: {e}"[:300] for p in collective})
    for part in o.parts:
        if part.op in COLLECTIVES:
            continue
        if part.op in MACHINE_OPS:
            try:
                samples += _share(o, part, backend, emit)
            except Exception as e:
                failures[part.op] = f"{type(e).__name__}: {e}"[:300]
        elif kernels is None:
            failures.update({f"{part.op} {label(shape)}": missing for shape in part.shapes})
        else:
            got, share = _watched_shapes(o, part, spec, kernels, emit, failures, done)
            samples += got
            if share is not None:
                others[part.op] = round(share, 4)
            if spread:  # between two ops: outside their watched windows
                spread.after_part()
    retimed = replaced = 0
    if kernels is not None:
        samples, retimed, replaced = _steadier(o, spec, kernels, emit, samples, set(done))
    resumed = sum(1 for s in samples if done.get((s.op, s.shape)) is s)
    probe = spread.finish() if spread and samples else {}
    # after the last probe: nothing the calibration measured runs beside them
    peak_runs = peaks.peak_runs(spec, backend, base) if o.peaks and samples \
        and spec.repeat == 0 else ()
    outcome = KernelOutcome(samples=tuple(samples), failures=failures, resumed=resumed,
                            retimed=retimed, steadier=replaced,
                            baseline_rss_bytes=baseline, baseline_file_rss_bytes=baseline_files,
                            other_cpu_share=others,
                            **_runtime_fields(runtimes), speed_probe=probe, train_peak_bytes=train_peaks,
                            train_runtime_bytes=trained, peak_runs=peak_runs)
    if not samples:
        why = "; ".join(f"{k}: {v}" for k, v in list(failures.items())[:3]) or "no shapes"
        unsupported = all(v.startswith("unsupported") or "Unsupported" in v
                          for v in failures.values())
        return RunResult.failed(spec, "unsupported" if failures and unsupported else "error",
                                f"no kernel ran: {why}", outcome=outcome,
                                finished_at=time.time(), **base)
    return RunResult(spec=spec, status="ok", outcome=outcome, finished_at=time.time(),
                     warnings=[f"{len(failures)} kernel shapes failed"] if failures else [],
                     **base)
