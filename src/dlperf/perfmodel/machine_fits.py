"""This machine's calibration as a whole: the fitted curves of every framework and thread
count calibrated here, and from them the ``Device``, ``Efficiencies`` and loopback
``Link`` that ``predict()`` takes for ``--device cpu``. Built from plain samples (the
store is read by ``dlperf.kinds.calibrate``); imports no framework."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dlperf.core.errors import UsageError
from dlperf.perfmodel.catalogue import Device, Link
from dlperf.perfmodel.efficiency import Efficiencies
from dlperf.perfmodel.fit import LocalFit, Samples, fit_local, nearest_world
from dlperf.perfmodel.local import local_device, loopback_link

#: the runtime a parallel worker of each strategy holds, the first calibrated of each
#: entry: a DistributedDataParallel's (sync and mixed all-reduce through DDP; fsdp's
#: workers wrap their network in FSDP2, which loads as much: 320 MiB against DDP's 306
#: when both were measured by hand), else gloo's process group and autograd's backward
#: (the pipeline's sends, hybrid's plain all-reduce of its stages' gradients), else
#: gloo's alone (a calibration from before dlperf measured the backward); async's and
#: mixed's with the RPC agent their pushes and pulls run on, at the calibrated world
#: nearest the run's workers (its connections grow with its peers), else without it
WORKER_RUNTIME = {"sync": ("ddp",), "mixed": ("ddp+rpc", "ddp"), "fsdp": ("ddp",),
                  "hybrid": ("backward", "gloo"), "async": ("rpc", "gloo"),
                  "pipeline": ("backward", "gloo")}


def at_world(runtime: str, world: int) -> str:
    """The key of a runtime measured among ``world`` processes: 'rpc@4'."""
    return f"{runtime}@{world}"


def _runtime_at(framework: str, device: str, runtime: str,
                workers: dict[tuple[str, str, str], float], world: int | None) -> float | None:
    """``runtime`` of ``workers`` as measured: at the world nearest ``world`` (the larger
    of two as near) for one measured per world, else its only value."""
    if (got := workers.get((framework, device, runtime))) is not None:
        return got
    worlds = {int(k[2].split("@")[1]): v for k, v in workers.items()
              if k[:2] == (framework, device) and k[2].startswith(runtime + "@")}
    if not worlds:
        return None
    want = world or max(worlds)
    return worlds[min(worlds, key=lambda w: (abs(w - want), -w))]


def runtime_baseline(framework: str, device: str, network: str | None,
                     baselines: dict[tuple[str, ...], float]) -> float | None:
    """The runtime memory of a process of ``framework`` on ``device`` that trains
    ``network``, from the calibration's ``baselines``: measured training that network's
    tiny size (key (framework, device, network)) where it was; else the least any
    network's training took (every process that trains holds at least that); else the
    framework's libraries alone, its kernel workers' before any kernel (key (framework,
    device): a calibration made before dlperf measured training runtimes)."""
    if network is not None and (got := baselines.get((framework, device, network))) is not None:
        return got
    trained = _trained(framework, device, baselines)
    return min(trained) if trained else baselines.get((framework, device))


def trains_measured(framework: str, device: str,
                    baselines: dict[tuple[str, ...], float]) -> bool:
    """Whether the calibration measured ``framework``'s runtime when training any network
    on ``device`` (``runtime_baseline``'s first two choices)."""
    return bool(_trained(framework, device, baselines))


def _trained(framework: str, device: str,
             baselines: dict[tuple[str, ...], float]) -> list[float]:
    """The runtimes measured of ``framework`` training each network on ``device``."""
    return [b for k, b in baselines.items() if len(k) == 3 and k[:2] == (framework, device)]


def worker_baseline(framework: str, device: str, strategy: str | None,
                    baselines: dict[tuple[str, ...], float],
                    workers: dict[tuple[str, str, str], float],
                    network: str | None = None, world: int | None = None) -> float | None:
    """The runtime baseline of a process of ``framework`` on ``device``: under a parallel
    ``strategy`` of ``world`` workers its worker's (``workers``: ``WORKER_RUNTIME``'s,
    measured in the collectives' processes), where measured; else the framework's when it
    trains ``network`` (``runtime_baseline``)."""
    if strategy not in (None, "single"):
        for runtime in WORKER_RUNTIME.get(strategy, ("gloo",)):
            if (got := _runtime_at(framework, device, runtime, workers, world)) is not None:
                return got
    return runtime_baseline(framework, device, network, baselines)


def beyond_cores_text(threads: int, calibrated: int) -> str:
    """What a prediction at more threads than the cores stands on, and what it leaves out:
    the time-sharing of the cores and the threads' waits for one another at each parallel
    region's end (in one main job on a 2-vCPU Xeon, PyTorch's 4-thread DLBench steps took
    12% to 46% longer than its 2-thread ones), which ``dlperf calibrate --threads`` times
    in the kernels instead."""
    return (f"{threads} threads are predicted with the {calibrated}-thread calibration (a "
            f"thread beyond the {calibrated} cores adds no arithmetic); what sharing the "
            f"cores costs on top is not modelled ('dlperf calibrate --threads {threads}' "
            f"times the kernels at {threads} threads)")


@dataclass(frozen=True)
class LocalModel:
    """What predict() needs for one framework and thread count here."""

    device: Device
    efficiencies: Efficiencies
    link: Link | None  # gloo on loopback among the workers, where calibrated
    fit: LocalFit
    #: the framework's runtime memory per process on a CPU (its calibration's kernel
    #: workers before any kernel); None where not measured, 0 for a GPU's own memory
    baseline_bytes: float | None = None


@dataclass(frozen=True)
class MachineFits:
    """Every fitted (framework, thread count, device, precision) of this machine."""

    fits: tuple[LocalFit, ...]
    memory_gb: float
    cores: int
    #: the framework's runtime memory per process, as calibrated: (framework, device) ->
    #: its libraries', (framework, device, network) -> when it trains that network
    #: (``runtime_baseline``)
    baselines: dict[tuple[str, ...], float] = field(default_factory=dict)
    #: (framework, device, runtime) -> a parallel worker's (``worker_baseline``)
    workers: dict[tuple[str, str, str], float] = field(default_factory=dict)

    @classmethod
    def of(cls, samples: Sequence[tuple[str, int, str, Samples, str]], memory_gb: float,
           cores: int, baselines: dict[tuple[str, ...], float] | None = None,
           measured: dict[tuple[str, int, str, str], dict[str, Any]] | None = None,
           workers: dict[tuple[str, str, str], float] | None = None) -> MachineFits:
        """Fit each (framework, threads, device, samples, precision); ``measured``: per
        the same key, what the calibration recorded beside its samples, as ``LocalFit``
        fields (``other_cpu_share``: what other processes took of the CPUs while each op
        was timed; ``scope``: the networks whose shapes were timed; ``speed_probe``: the
        machine's speed meanwhile)."""
        measured = measured or {}
        return cls(tuple(fit_local(s, fw, t, dev, prec).model_copy(
            update=dict(measured.get((fw, t, dev, prec), {})))
            for fw, t, dev, s, prec in samples), memory_gb, cores, dict(baselines or {}),
            dict(workers or {}))

    def find(self, framework: str, threads: int, device: str = "cpu",
             precision: str = "fp32") -> LocalFit | None:
        """The fit of ``framework`` at ``threads`` on ``device`` at ``precision``. On a
        CPU, more threads than its physical cores take the fit at the cores, unless
        calibrated themselves: a thread beyond the cores adds no FMA units
        (``environment.cores_for``), so the model gives it no speed-up, and what
        oversubscription costs on top (DLBench saw steps slow down past the cores) shows
        as the prediction's error."""
        def at(t: int) -> LocalFit | None:
            return next((f for f in self.fits if (f.framework, f.threads, f.device, f.precision)
                         == (framework, t, device, precision)), None)

        fit = at(threads)
        if fit is None and device == "cpu" and threads > self.cores:
            fit = at(self.cores)
        return fit

    def beyond_cores(self, framework: str, threads: int, device: str = "cpu",
                     precision: str = "fp32") -> int | None:
        """The thread count of the fit that stands in for ``threads`` past the cores
        (``find``), or None where ``threads`` is calibrated itself or not calibrated."""
        fit = self.find(framework, threads, device, precision)
        return fit.threads if fit is not None and fit.threads < threads else None

    def model(self, framework: str, threads: int, device: str = "cpu", *,
              workers: int = 1, precision: str = "fp32",
              strategy: str | None = None, network: str | None = None) -> LocalModel:
        """The model of ``workers`` processes of ``framework`` at ``threads`` each on this
        machine: compute slowed by max(1, workers x threads / cores) when they share
        cores, and the all-reduce link measured among that many processes (else the
        nearest count measured); the runtime baseline a worker of ``strategy`` holds
        (``worker_baseline``), training ``network``. One-line UsageError when not
        calibrated."""
        fit = self.find(framework, threads, device, precision)
        if not self.fits:
            how = ("calibrate --device gpu' first (minutes on the GPU; --dry-run lists its "
                   "kernel runs)" if device == "gpu" else "calibrate' first (about 17 minutes "
                   "on 2 cores)")
            raise UsageError(f"this machine has no calibration in the store; run 'dlperf {how}")
        if fit is None:
            have = ", ".join(f.label for f in self.fits if f.device == device) or "none"
            at = "" if precision == "fp32" else f" at {precision}"
            flag = "" if precision == "fp32" else f" --precision {precision}"
            raise UsageError(f"no calibration of {framework} at {threads} thread(s) on this "
                             f"{device}{at} (calibrated: {have}); run 'dlperf calibrate "
                             f"--frameworks {framework} --threads {threads}"
                             f"{' --device gpu' if device == 'gpu' else ''}{flag}'")
        # CPU workers share the cores; a GPU's workers would each have their own device
        slowdown = max(1.0, workers * fit.threads / self.cores) if device == "cpu" else 1.0
        if slowdown > 1:
            fit = fit.model_copy(update={"slowdown": slowdown})
        dev = local_device(fit, self.memory_gb)
        link = None
        if fit.allreduce:
            link = loopback_link(fit.allreduce[nearest_world(fit.allreduce, workers)])
        baseline = 0.0 if device == "gpu" else worker_baseline(
            framework, device, strategy, self.baselines, self.workers, network, workers)
        return LocalModel(dev, Efficiencies(kernels={dev.name: fit}), link, fit, baseline)
