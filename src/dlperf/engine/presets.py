"""Ready-made sweeps: the DLBench study, in full and quick form."""

from __future__ import annotations

from dlperf.core import environment, framework_table
from dlperf.core.settings import FULL_MEASUREMENT, QUICK_MEASUREMENT  # noqa: F401
from dlperf.engine import config
from dlperf.engine.config import SweepConfig

DLBENCH_NETWORKS = ("fcn5", "fcn8", "alexnet", "resnet50", "lstm32", "lstm64")
#: Brief: one network of each kind DLBench measured (fully connected, convolutional,
#: recurrent), the cheapest of each: on two cores ResNet-50 and LSTM-64 alone took half of
#: the quick study's 17 minutes, and FCN-8 repeats FCN-5's shape with more layers.
BRIEF_NETWORKS = ("fcn5", "alexnet", "lstm32")

def resolve_frameworks(names: list[str]) -> list[str]:
    """The frameworks a study runs: ``all`` stands for every registered framework that is
    installed here, in the registry's order."""
    if "all" not in names:
        return names
    return [b for b in framework_table.BACKENDS if framework_table.installed(b)]


#: Brief: the network measured past the physical cores, the one the guide's thread
#: findings read (``kinds.step.guide_section.NETWORK``) and the cheapest; the others at 2P
#: threads checked no finding and took a seventh of the main job (85 s of 680 on 2 cores)
BRIEF_PAST_CORES = "fcn5"


def brief_threads(cores: int | None = None) -> list[int]:
    """1 thread, the physical cores, and twice the physical cores: DLBench's 1, 4 and 8
    threads on its 4-core desktop, where 8 threads ran slower for Caffe."""
    cores = cores or environment.physical_cores()
    return sorted({1, cores, 2 * cores})


def _brief(common: dict, threads: list[int] | None,
           timeout: float | None) -> list[tuple[str, SweepConfig]]:
    """The brief study's sweeps: every network at 1 and P threads, and ``BRIEF_PAST_CORES``
    at 2P too; thread counts given by the user apply to every network."""
    settings = dict(batch_sizes="default", repeat=1, timeout=timeout or 300.0,
                    measurement=QUICK_MEASUREMENT)
    if threads:
        return [("dlbench table (brief)", config.build(
            **{**common, "networks": list(BRIEF_NETWORKS)}, threads=threads, **settings))]
    cores = environment.physical_cores()
    within = [t for t in brief_threads(cores) if t <= cores]
    past = [t for t in brief_threads(cores) if t > cores]
    return [("dlbench table (brief)", config.build(
                **{**common, "networks": list(BRIEF_NETWORKS)}, threads=within, **settings)),
            (f"dlbench table (brief): {BRIEF_PAST_CORES} past the physical cores",
             config.build(**{**common, "networks": [BRIEF_PAST_CORES]}, threads=past,
                          **settings))]


def dlbench(
    *,
    quick: bool,
    brief: bool = False,
    frameworks: list[str],
    variants: list[str] | None = None,
    threads: list[int] | None = None,
    size: str | None = None,
    timeout: float | None = None,
    memory_limit: str | int | None = None,
) -> list[tuple[str, SweepConfig]]:
    """The DLBench table (every network x framework x thread count at DLBench's default
    batch sizes; ``brief``: fcn5, alexnet and lstm32 at 1 and P threads, P the
    physical cores, and fcn5 at 2P, with the quick settings) and, in full mode, DLBench's batch-size sweep at as many threads as the
    machine has physical cores (the curves of its Fig. 1)."""
    common = dict(networks=list(DLBENCH_NETWORKS), frameworks=resolve_frameworks(frameworks),
                  variants=variants or ["default"], size=size, memory_limit=memory_limit)
    if brief:  # the quick settings, so a later --quick run resumes from these results
        return _brief(common, threads, timeout)
    if quick:
        return [("dlbench table (quick)", config.build(
            **common, threads=threads or [1, 2, 4], batch_sizes="default", repeat=1,
            timeout=timeout or 300.0, measurement=QUICK_MEASUREMENT))]
    cores = environment.physical_cores()
    return [
        ("dlbench table", config.build(
            **common, threads=threads or [1, 2, 4, 8], batch_sizes="default", repeat=3,
            timeout=timeout or 1800.0, measurement=FULL_MEASUREMENT)),
        ("dlbench batch-size sweep", config.build(
            **common, threads=[max(threads or [cores])] if threads else [cores],
            batch_sizes="sweep", repeat=1, timeout=timeout or 3600.0,
            measurement=FULL_MEASUREMENT)),
    ]
