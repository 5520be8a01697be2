"""dlperf: measure, explain and predict how fast neural networks train.

The Python API mirrors the command line:

    >>> import dlperf
    >>> result = dlperf.run(network="fcn5", threads=1, batch_size=64)   # doctest: +SKIP
    >>> result.metrics.median_s                                         # doctest: +SKIP

Every measurement runs in a fresh worker process; see ``dlperf.api``.
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
