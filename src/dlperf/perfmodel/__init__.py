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

import importlib
import sys
import types

#: the names this package exports, each from its module, imported on first use: a worker
#: process reads the kernels' and parallel runs' types from the model's modules, and
#: importing ``predict`` and the fits with them took a quarter of a second of every
#: worker's start (``python -X importtime -c 'import dlperf.engine.worker'``)
_FROM = {"Device": "catalogue", "Link": "catalogue", "Storage": "catalogue",
         "Efficiencies": "efficiency", "Efficiency": "efficiency",
         "Breakdown": "result", "LayerTime": "result", "Prediction": "result",
         "ScalingPoint": "worker_scaling", "data_parallel_scaling": "worker_scaling"}


def __getattr__(name: str):
    if name in _FROM:
        return getattr(importlib.import_module(f"{__name__}.{_FROM[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Package(types.ModuleType):
    """``predict`` names both the function this package exports and the module that
    defines it. Importing the module binds its name on the package to the module, so a
    module-level ``__getattr__`` (only asked for names the package lacks) would give
    ``from dlperf.perfmodel import predict`` the module once anything had imported it:
    here the name is always the function, as it was when this package imported it
    eagerly."""

    @property
    def predict(self):
        return importlib.import_module(f"{__name__}.predict").predict

    @predict.setter
    def predict(self, module) -> None:
        pass  # the import system binding the module: the name stays the function's


sys.modules[__name__].__class__ = _Package

__all__ = [*_FROM, "predict"]
