"""One device's training step: the roofline time of every layer, forward, backward and
update, with its fixed launch costs."""

from __future__ import annotations

from dataclasses import dataclass

from dlperf.perfmodel.catalogue import Device
from dlperf.perfmodel.costs import LayerCost
from dlperf.perfmodel.efficiency import Efficiency
from dlperf.perfmodel.formulas import roofline_time


@dataclass(frozen=True)
class LayerTiming:
    """Seconds one layer costs in a step, split by what limits it."""

    name: str
    op: str
    compute_s: float  # forward/backward passes limited by FLOP/s
    memory_s: float  # forward/backward passes limited by memory bandwidth
    update_s: float  # the optimizer update (always memory-bound)
    overhead_s: float  # kernel launches
    flops: float
    bytes: float
    #: the forward pass's share of compute_s + memory_s (the rest is the backward's; a
    #: pipeline's schedule runs them apart, ``perfmodel.schedule``)
    forward_s: float = 0.0

    @property
    def passes_s(self) -> float:
        """Forward and backward, launches included, without the update (what a pipeline
        stage repeats per micro-batch)."""
        return self.compute_s + self.memory_s + self.overhead_s

    @property
    def time_s(self) -> float:
        return self.passes_s + self.update_s

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s + self.update_s else "memory"


def roofline_timing(cost: LayerCost, device: Device, precision: str, eff: Efficiency) -> LayerTiming:
    """Roofline time of each pass of one layer (Williams et al. 2009) at the attainable
    rates: peak FLOP/s x matmul efficiency, bandwidth x memory efficiency."""
    peak = device.peak_flops(precision) * eff.matmul
    bandwidth = device.memory_gbps * 1e9 * eff.memory
    compute = memory = 0.0
    passes = []
    for flops, nbytes in ((cost.fwd_flops, cost.fwd_bytes), (cost.bwd_flops, cost.bwd_bytes)):
        t = roofline_time(flops, nbytes, peak, bandwidth)
        passes.append(t)
        if flops and flops / peak >= nbytes / bandwidth:
            compute += t
        else:
            memory += t
    return LayerTiming(
        name=cost.name,
        op=cost.op,
        compute_s=compute,
        memory_s=memory,
        update_s=cost.update_bytes / bandwidth,
        overhead_s=cost.kernels * eff.overhead_s,
        flops=cost.flops,
        bytes=cost.bytes,
        forward_s=passes[0],
    )
