"""Parallel training on torch.distributed: data and model parallelism, synchronous,
asynchronous and mixed-asynchronous updates, each run for real under torchrun and measured.

- ``sync``: DistributedDataParallel, the global batch split across workers (``sync.py``).
- ``async``: a parameter server over torch.distributed.rpc; staleness measured
  (``param_server.py``).
- ``mixed``: synchronous groups, asynchronous between groups through the server
  (``mixed.py``).
- ``pipeline``: the network cut into stages by layer cost, GPipe micro-batches over
  send/recv (``pipeline.py``).

``dlperf.engine.launch.torchrun.run_parallel`` runs one RunSpec(kind="parallel") under torchrun with timeouts
and returns its RunResult; ``options.make_spec`` builds that spec. The launcher, the
options, the results (from the ranks' records) and the report import no framework; the strategies and the worker
(the torchrun entry point) do.
"""

from __future__ import annotations

from dlperf.kinds.kind import Kind
from dlperf.kinds.parallel.options import ParallelOptions, ParallelOutcome, check_batch


def _share_threads(spec):
    # all the workers on its one machine; across machines no one machine's peak bounds it
    return spec.threads * spec.options.workers if spec.options.nodes == 1 else None


def _sections(predictor):
    from dlperf.kinds.parallel.section import parallel_section

    return [parallel_section]


#: launched by torchrun (``dlperf.engine.launch.torchrun``): its ranks run
#: ``dlperf.kinds.parallel.run``
KIND = Kind(options=ParallelOptions, outcome=ParallelOutcome,
            label=lambda spec, label: spec.options.label(spec.network, spec.size,
                                                         spec.batch_size, spec.threads),
            check=check_batch, launcher="torchrun", sections=_sections,
            share_threads=_share_threads)
