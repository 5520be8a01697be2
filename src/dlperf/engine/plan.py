"""Expand a sweep into RunSpecs and drop what the store already has. Imports no framework."""

from __future__ import annotations

import itertools

from dlperf import workloads
from dlperf.core.spec import RunSpec
from dlperf.core.store import Store
from dlperf.engine.config import SweepConfig


def expand(cfg: SweepConfig) -> list[RunSpec]:
    """Every (network, framework, variant, device, precision, threads, batch, repeat) of
    the sweep: training steps, or inference queries with ``mode = "inference"``; under the
    sweep's memory limit, which is part of each one's identity (``RunSpec.memory_limit``).

    The order runs all repetition 0s first, so an interrupted sweep already has one number
    for every configuration before it spends time on the second.
    """
    specs: list[RunSpec] = []
    for repeat in range(cfg.repeat):
        for network in cfg.networks:
            wl, size, _ = workloads.resolve(network, cfg.size, cfg.params)
            for framework in cfg.frameworks:
                for variant, device, precision, threads, batch in itertools.product(
                    cfg.variants_for(framework), cfg.devices, cfg.precisions, cfg.threads,
                    cfg.batches_for(network),
                ):
                    specs.append(
                        RunSpec(
                            kind="inference" if cfg.mode == "inference" else "step",
                            network=wl.name,
                            size=size,
                            framework=framework,
                            variant=variant,
                            device=device,
                            threads=threads,
                            batch_size=batch,
                            params=dict(cfg.params),
                            seed=cfg.seed,
                            precision=precision,
                            repeat=repeat,
                            measurement=cfg.measurement,
                            env=cfg.env_for(framework),
                            memory_limit=cfg.memory_limit,
                        )
                    )
    return specs


def pending(
    specs: list[RunSpec], store: Store, *, force: bool = False, retry_failed: bool = False
) -> list[RunSpec]:
    """The specs still to run: all with ``force``; else those with no stored result (and,
    with ``retry_failed``, those whose stored result is a failure)."""
    if force:
        return list(specs)
    done = store.done((s.run_id for s in specs), include_failed=not retry_failed)
    return [s for s in specs if s.run_id not in done]
