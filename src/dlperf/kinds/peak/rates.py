"""The machine's peak: the best fp32 rate any installed library reaches here, per thread count.

One library's matrix product is not the machine's limit (PyTorch's MKL matmul can stay well
under what TensorFlow reaches on the same cores), so the peak is the best of several large
kernels across the installed frameworks (``KERNELS``), each timed in its own worker like
any other run (kind 'peak'; the spec's network names the kernel, its framework the
library), or after a calibration's kernels in its worker (``kinds.calibrate.peaks``), its
timed steps taken as ``ROUNDS`` consecutive rounds, and every kernel's rate is kept so
that each library's own best can be shown. A training run that goes faster than every
kernel raises the peak to its own rate (a row of kernel ``RAISED``), so that no share of peak is ever
above 100%.

A stored kernel rate is reused while it is fresh: same machine, thread count, device and
size, same kernel shape, same versions of the library's packages. All but the machine are
part of the spec's identity (shape and versions through its options), so a stale rate has
another ``run_id`` and is simply not found (``lookup``), and the kernel is measured again;
the store keeps each row's machine. Imports no framework.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from dlperf.backends.base import conv_probe_shape
from dlperf.core import framework_table, units
from dlperf.core.spec import Measurement, RunResult, RunSpec
from dlperf.kinds.peak.options import RAISED, KernelRate, Peak, PeakOptions

#: (framework, kernel): the peak kernels, each a probe of its backend (``backends.base.probe``):
#: PyTorch's matmul (MKL) and convolution (oneDNN), TensorFlow's and JAX/XLA's matmul.
KERNELS: tuple[tuple[str, str], ...] = (
    ("torch", "matmul"), ("torch", "conv"), ("tensorflow", "matmul"), ("jax", "matmul"),
)
#: Matmul side (and conv size, ``conv_probe_shape``): large enough for every BLAS to reach
#: its steady rate on a CPU, small enough that the four kernels cost seconds per thread count.
DEFAULT_SIZE = 2048
#: Each kernel: one worker process, warmed up until two steps agree, then at least 9 steps
#: and 1 s timed.
MEASUREMENT = Measurement(min_time_s=1.0, min_steps=9, warmup_min_steps=2, warmup_max_steps=10,
                          warmup_max_time_s=5.0)
#: The timed steps of a kernel, in order, form this many rounds; the kernel's rate is the best
#: round's median. Interference from the rest of the machine only ever slows a kernel down,
#: so the fastest undisturbed round is the closest to what the machine can do (the reasoning
#: of Python's ``timeit``, which reports the best of its repeats). Rounds, not processes:
#: each process costs a framework start (seconds for TensorFlow), and the peak must stay
#: cheap enough to measure before a sweep.
ROUNDS = 3
#: The packages whose versions decide a library's kernel rates.
PACKAGES = {"torch": ("torch",), "tensorflow": ("tensorflow", "tensorflow-cpu"),
            "jax": ("jax", "jaxlib")}
#: A library whose own best kernel stays under this share of the machine's best is named as
#: (part of) the limit; closer than that is within the run-to-run spread of a busy machine.
LIBRARY_GAP = 0.9


def versions(framework: str, packages: Mapping[str, str]) -> dict[str, str]:
    """The installed versions of the packages behind ``framework``'s kernels."""
    return {p: packages[p] for p in PACKAGES.get(framework, (framework,)) if packages.get(p)}


def kernel_shape(kernel: str, size: int) -> str:
    """The operands of a kernel of this size, as stored with its rate."""
    if kernel == "conv":
        b, c, hw = conv_probe_shape(size)
        return f"{b}x{c}x{hw}x{hw} (N, C, H, W) * {c}x{c}x3x3, stride 1, pad 1"
    return f"{size}x{size} @ {size}x{size}"


def kernel_specs(threads: int, device: str, size: int, packages: Mapping[str, str],
                 measurement: Measurement = MEASUREMENT,
                 kernels: Sequence[tuple[str, str]] = KERNELS) -> list[RunSpec]:
    """One spec per kernel of an installed framework; shape and versions in its options."""
    return [
        RunSpec(kind="peak", network=kernel, framework=fw, device=device, threads=threads,
                batch_size=size, measurement=measurement,
                options=PeakOptions(shape=kernel_shape(kernel, size),
                                    versions=versions(fw, packages)))
        for fw, kernel in kernels
        if framework_table.installed(fw)
    ]


def round_rates(flops: float, steps_s: Sequence[float], rounds: int = ROUNDS) -> list[float]:
    """FLOP/s of each of ``rounds`` consecutive rounds of timed steps (each its median);
    fewer rounds when there are fewer steps."""
    n = len(steps_s)
    k = max(1, min(rounds, n))
    bounds = [round(i * n / k) for i in range(k + 1)]
    return [flops / statistics.median(steps_s[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)
            if b > a]


#: Failures that say nothing about the kernel: measured again next time.
_TRANSIENT = frozenset({"interrupted", "timeout", "oom"})


def lookup(stored: Sequence[RunResult], wanted: Sequence[RunSpec],
           packages: Mapping[str, str]) -> tuple[list[RunResult], list[RunSpec]]:
    """Split the wanted kernels into stored results still fresh and specs to measure.

    ``stored``: the peak rows of this machine, thread count and device, oldest first. A
    kernel is fresh when a stored row has its ``run_id`` (kernel, framework, size, shape,
    versions, threads, device): the newest such row counts, and so does a failure that
    will happen again (a kernel that cannot run or crashes here is not retried before its
    library changes), but not one of the moment (interrupted, timed out, out of memory).
    A raised peak stays while its framework's versions are installed.
    """
    newest: dict[str, RunResult] = {}
    for r in stored:
        if r.failure is None or r.failure.reason not in _TRANSIENT:
            newest[r.spec.run_id] = r
    found = [newest[s.run_id] for s in wanted if s.run_id in newest]
    missing = [s for s in wanted if s.run_id not in newest]
    raised = [r for r in newest.values() if r.spec.network == RAISED and r.ok
              and r.spec.options.versions == versions(r.spec.framework, packages)]
    return found + raised, missing


def _rates(r: RunResult) -> list[float]:
    m = r.metrics
    if not (r.ok and m and m.achieved_flops):
        return []
    if r.spec.network == RAISED or not (m.flops_per_step and r.step_times_s):
        return [m.achieved_flops]
    return round_rates(m.flops_per_step, r.step_times_s)


def kernel_rate(results: Sequence[RunResult]) -> KernelRate:
    """The rate of one kernel from its results (one per worker process, normally one); a
    raised peak's rate is the raising run's."""
    r = results[-1]
    o: PeakOptions = r.spec.options  # type: ignore[assignment]
    rates = tuple(rate for x in results for rate in _rates(x))
    failed = next((x.failure for x in reversed(results) if x.failure), None)
    return KernelRate(
        framework=r.spec.framework, kernel=r.spec.network,
        flops=max(rates) if rates else None,
        size=r.spec.batch_size, shape=o.shape or "", versions=dict(o.versions),
        measured_at=max((x.finished_at or 0.0 for x in results), default=None) or None,
        failure=None if rates else (f"{failed.reason}: {failed.message}" if failed else "no rate"),
        raised_by=o.by, round_flops=rates,
    )


def peak_of(results: Sequence[RunResult], threads: int, device: str,
            theoretical_flops: float | None = None, theoretical: str = "") -> Peak:
    """The peak from stored and new peak rows: one rate per kernel and one per raised peak."""
    groups: dict[str, list[RunResult]] = {}
    for r in results:
        groups.setdefault(r.spec.config_id, []).append(r)
    return Peak(threads=threads, device=device,
                rates=tuple(kernel_rate(g) for g in groups.values()),
                theoretical_flops=theoretical_flops, theoretical=theoretical)


def raised_result(run: RunResult, peak: Peak, packages: Mapping[str, str]) -> RunResult:
    """The peak row recording that ``run`` went faster than every kernel at its thread
    count: its rate becomes the peak there, with the run's label as provenance."""
    s = run.spec
    spec = RunSpec(kind="peak", network=RAISED, framework=s.framework, variant=s.variant,
                   device=s.device, threads=peak.threads, batch_size=s.batch_size,
                   options=PeakOptions(by=s.label(), run_id=s.run_id,
                                       versions=versions(s.framework, packages)))
    return RunResult(spec=spec, status="ok", metrics=run.metrics, software=run.software,
                     threads_in_force=run.threads_in_force, cpus=run.cpus,
                     started_at=run.started_at, finished_at=run.finished_at)


def raised_warning(achieved: float, before: KernelRate, peak: Peak) -> str:
    """The warning carried by a run that raised the peak."""
    return (f"achieved {units.flops(achieved, '/s')} is above the best kernel measured at "
            f"{_threads(peak.threads)} ({before.source}, {units.flops(before.flops, '/s')}): the "
            "peak there is raised to this run's rate, so its share is 100%")


def impossible_warning(achieved: float, peak: Peak, cpu_util: float | None) -> str:
    """The warning of a run faster than the CPU's theoretical peak: it does not raise it."""
    busy = f"; the CPU was busy {cpu_util:.2f} cores" if cpu_util is not None else ""
    return (f"achieved {units.flops(achieved, '/s')} is above this CPU's theoretical peak at "
            f"{_threads(peak.threads)} ({units.flops(peak.theoretical_flops, '/s')}){busy}: the "
            "FLOP count or the threads really in force are off, so the peak is not raised and "
            "the share is shown as 100%")


def _threads(n: int) -> str:
    return f"{n} thread{'s' if n != 1 else ''}"


def _pct(part: float, whole: float) -> str:
    return units.percent(min(part / whole, 1.0))


def limit_message(label: str, network: str, framework: str, achieved: float, peak: Peak,
                  others: Mapping[str, float]) -> str:
    """What limits this configuration, in a sentence or three: its share of the machine's
    best measured rate and which kernel set it; the library's own best kernel when that is
    clearly lower (then the library, not the machine, is part of the limit); and the rate
    of the same configuration on other frameworks (``others``: framework label -> FLOP/s)."""
    best = peak.best
    if best is None or not best.flops:
        return ""
    if best.kernel == RAISED and best.raised_by == label:
        text = (f"{network} on {framework} ran faster than every kernel dlperf measured at "
                f"{_threads(peak.threads)}: its {units.flops(achieved, '/s')} is this "
                "machine's best measured rate there")
    else:
        text = (f"{network} on {framework} reaches {_pct(achieved, best.flops)} of this machine's "
                f"best measured rate at {_threads(peak.threads)} ({best.source}, "
                f"{units.flops(best.flops, '/s')})")
    own = peak.library_best(framework)
    if own is None:
        text += f"; dlperf measured no {framework} kernel here"
    elif own is not best and own.flops:
        text += f"; {framework}'s own best kernel ({own.kernel}) reaches {units.flops(own.flops, '/s')} here"
        if own.flops < LIBRARY_GAP * best.flops:
            text += (f", {_pct(own.flops, best.flops)} of that: the library, not the machine, "
                     "is part of the limit")
    parts = [text]
    if others:
        parts.append("The same configuration on " + ", on ".join(
            f"{fw} reaches {_pct(rate, best.flops)}" + (" (faster than the peak used here)"
                                                        if rate > best.flops else "")
            for fw, rate in others.items()))
    return ". ".join(parts) + "."
