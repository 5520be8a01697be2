"""dlperf: measure, explain and predict how fast neural networks train.

The Python API mirrors the command line. One configuration, measured in a fresh worker
process and stored (here in a store of its own; by default ``~/.local/share/dlperf``):

    >>> import dlperf, tempfile
    >>> db = tempfile.mkdtemp() + "/results.db"
    >>> result = dlperf.run("fcn5", size="tiny", threads=1, batch_size=8, db=db)
    >>> result.spec.label()
    'fcn5[tiny] torch/eager cpu x1 b8'
    >>> result.median_s > 0 and result.samples_per_s == 8 / result.median_s
    True
    >>> 0 < result.peak_share <= 1      # of the best fp32 rate measured at 1 thread here
    True

``result`` is a ``dlperf.core.aggregate.ConfigResult``: the configuration's repetitions
and their statistics. See ``dlperf.api`` for sweeps, reports and predictions.
"""

__version__ = "0.1.0"

# The composition root: core reads each kind's options and outcome types from the table
# of kinds, which it cannot import (the kinds import core). Python runs this module
# before any other module of dlperf, so every spec read anywhere finds its kind.
from dlperf.core import kind_table as _kind_table  # noqa: E402
from dlperf.kinds import KINDS as _KINDS  # noqa: E402

_kind_table.install(_KINDS)

__all__ = ["__version__", "networks", "report", "run", "sweep"]


def __getattr__(name: str):
    # Lazy, so that a worker process starts without loading the reporting stack.
    if name in ("networks", "report", "run", "sweep"):
        from dlperf import api

        return getattr(api, name)
    raise AttributeError(name)
