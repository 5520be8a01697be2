"""The analytical performance model, in the spirit of Paleo (Qi, Sparks, Talwalkar, ICLR
2017): per-layer FLOPs and bytes from the neutral workload definitions, against the
peaks of catalogued devices and links: this machine's devices timed by their calibrated
kernel curves, a catalogue GPU by one calibrated GPU's curves scaled to its datasheet, the
rest by efficiency factors from public measurements. Imports no framework.

- ``catalogue``: devices, links, storage (data files with a source for every figure)
- ``costs``: FLOPs and bytes per layer; ``compute``: the roofline time of each layer
- ``formulas``: roofline, all-reduce (ring, tree, hierarchical), parameter server,
  pipeline bubble, stragglers, speed-up
- ``calibration``: efficiency factors; ``fit``, ``local``, ``machine``: this machine's
  kernel curves; ``scaled``: another GPU's curves scaled to a catalogue GPU
- ``predict``: time per mini-batch by strategy, returning ``result.Prediction``;
  ``scaling``: data-parallel speed-up over 1..N devices
"""

from dlperf.perfmodel.catalogue import Device, Link, Storage
from dlperf.perfmodel.efficiency import Efficiencies, Efficiency
from dlperf.perfmodel.predict import predict
from dlperf.perfmodel.result import Breakdown, LayerTime, Prediction
from dlperf.perfmodel.worker_scaling import ScalingPoint, data_parallel_scaling

__all__ = [
    "Breakdown",
    "Efficiencies",
    "Device",
    "Efficiency",
    "LayerTime",
    "Link",
    "Prediction",
    "ScalingPoint",
    "Storage",
    "data_parallel_scaling",
    "predict",
]
