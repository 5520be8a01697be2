"""dlperf: measure, explain and predict how fast neural networks train.

The Python API mirrors the command line:

    >>> import dlperf
    >>> result = dlperf.run(network="fcn5", threads=1, batch_size=64)   # doctest: +SKIP
    >>> result.metrics.median_s                                         # doctest: +SKIP

Every measurement runs in a fresh worker process; see ``dlperf.api``.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "networks", "report", "run", "sweep"]


def __getattr__(name: str):
    # Lazy, so that a worker process starts without loading the reporting stack.
    if name in ("networks", "report", "run", "sweep"):
        from dlperf import api

        return getattr(api, name)
    raise AttributeError(name)
