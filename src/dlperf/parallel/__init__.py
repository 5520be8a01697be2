"""Parallel training on torch.distributed: data and model parallelism, synchronous,
asynchronous and mixed-asynchronous updates, each run for real under torchrun and measured.

- ``sync``: DistributedDataParallel, the global batch split across workers (``sync.py``).
- ``async``: a parameter server over torch.distributed.rpc; staleness measured
  (``param_server.py``).
- ``mixed``: synchronous groups, asynchronous between groups through the server
  (``mixed.py``).
- ``pipeline``: the network cut into stages by layer cost, GPipe micro-batches over
  send/recv (``pipeline.py``).

``dlperf.launch.torchrun.run_parallel`` runs one RunSpec(kind="parallel") under torchrun with timeouts
and returns its RunResult; ``options.make_spec`` builds that spec. The launcher, the
options, the results (from the ranks' records) and the report import no framework; the strategies and the worker
(the torchrun entry point) do.
"""

from dlperf.parallel.options import STRATEGIES, Options, describe, make_spec

__all__ = ["STRATEGIES", "Options", "describe", "make_spec"]
