"""The model's formulas, one short function each, with its source.

Units: seconds, bytes, FLOP, bytes/s, FLOP/s. ``latency`` is the cost of one message
step (alpha), ``bandwidth`` the rate in one direction (1/beta), the alpha-beta model of
Hockney (1994), "The communication challenge for MPP: Intel Paragon and Meiko CS-2".
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def roofline_time(
    flops: float, nbytes: float, peak_flops: float, bandwidth: float, overhead: float = 0.0
) -> float:
    """max(flops / peak, bytes / bandwidth) + a fixed per-kernel overhead.

    Williams, Waterman, Patterson (2009), "Roofline: an insightful visual performance
    model for multicore architectures", CACM 52(4): a kernel runs at the lower of the
    compute roof and bandwidth x arithmetic intensity. ``peak_flops`` and ``bandwidth``
    are the attainable rates (datasheet peak x efficiency); the overhead is the fixed
    cost of launching a kernel through a framework, which the roofline leaves out."""
    return max(flops / peak_flops, nbytes / bandwidth) + overhead


def stream_time(ops: Sequence[tuple[float, float]]) -> float:
    """Seconds until a GPU has run ``ops``, each (host's launch time, device's time), in
    order: the host launches one op after another without waiting, the device runs them
    in order, each once it is launched and the one before it is done.

    Kernel launches are asynchronous: the host queues the next kernels while the device
    runs earlier ones (PyTorch documentation, 'CUDA semantics', 'Asynchronous execution',
    https://pytorch.org/docs/stable/notes/cuda.html). A step is the slower of the two where
    one side dominates throughout, and more where they take turns: slack the host gains
    over large kernels carries over to small ones, but the device's idle time while the
    host launches cannot be won back. Daydream (Zhu et al., USENIX ATC 2020) simulates a
    training step from the same two in-order timelines, host and GPU stream."""
    host = device = 0.0
    for launch, work in ops:
        host += launch
        device = max(device, host) + work
    return device


#: DDP's default bucket size, bucket_cap_mb=25 (PyTorch documentation,
#: torch.nn.parallel.DistributedDataParallel)
DDP_BUCKET_BYTES = 25 * 2**20


#: DDP's first bucket when ``bucket_cap_mb`` is left at its default: 1 MiB, so that the
#: first gradients ready (the last layers') start their all-reduce early
#: (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``, used by DistributedDataParallel's
#: ``_BucketCapacityConfig`` in torch 2.x)
DDP_FIRST_BUCKET_BYTES = 2**20


def ddp_buckets(tensor_bytes: Sequence[float], cap: float = DDP_BUCKET_BYTES,
                first_cap: float = DDP_FIRST_BUCKET_BYTES) -> list[tuple[float, int]]:
    """DDP's gradient buckets: ``tensor_bytes`` in the order their gradients become ready
    (the reverse of the forward's), each added to the open bucket, which closes once it
    holds at least its cap (``first_cap`` for the first, ``cap`` after): a tensor larger
    than the cap is a bucket of its own. Returns (bytes, index of its last tensor) per
    bucket, in launch order.

    PyTorch's reducer, ``compute_bucket_assignment_by_size`` (torch/csrc/distributed/c10d/
    reducer.cpp), with the bucket limits DDP rebuilds after its first step in the order
    the gradients were ready; Li et al. (2020), "PyTorch Distributed: experiences on
    accelerating data parallel training", VLDB 13(12), sec. 3.2.3."""
    out: list[tuple[float, int]] = []
    size = 0.0
    for i, nbytes in enumerate(tensor_bytes):
        size += nbytes
        if size >= (first_cap if not out else cap):
            out.append((size, i))
            size = 0.0
    if size > 0 or not out:
        out.append((size, len(tensor_bytes) - 1))
    return out


def overlapped_comm_time(ready: Sequence[float], comm: Sequence[float], end: float) -> float:
    """The communication left after compute ends at ``end``: bucket b's all-reduce
    (``comm[b]`` seconds) starts once its last gradient is ready (``ready[b]`` seconds into
    the backward pass) and the bucket before it is done, since one process group runs its
    collectives in order; only what runs past ``end`` delays the step.

    Li et al. (2020), "PyTorch Distributed", VLDB 13(12), sec. 3.2.3 (overlapping
    computation with communication: each bucket's all-reduce is launched when its
    gradients are ready, while the backward pass goes on)."""
    done = 0.0
    for r, c in zip(ready, comm, strict=True):
        done = max(done, r) + c
    return max(0.0, done - end)


#: Memory passes over each gradient bucket per step: DDP copies every gradient into its
#: bucket and, after the all-reduce, back ('gradient_as_bucket_view' is off by default:
#: 'it avoids the overhead of copying between gradients and allreduce communication
#: buckets' when on; PyTorch documentation, torch.nn.parallel.DistributedDataParallel),
#: and the averaging divides the bucket in place (DDP's default hook, allreduce_hook).
DDP_BUCKET_PASSES = 3


def p2p_time(nbytes: float, bandwidth: float, latency: float) -> float:
    """One message: latency + bytes / bandwidth (Hockney 1994)."""
    return latency + nbytes / bandwidth


def ring_allreduce_time(nbytes: float, p: int, bandwidth: float, latency: float) -> float:
    """2(p-1)/p x bytes / bandwidth + 2(p-1) x latency.

    A reduce-scatter then an all-gather around a ring, each p-1 steps of bytes/p:
    Patarasuk & Yuan (2009), "Bandwidth optimal all-reduce algorithms for clusters of
    workstations", JPDC 69(2); Thakur, Rabenseifner, Gropp (2005), "Optimization of
    collective communication operations in MPICH", IJHPCA 19(1)."""
    if p <= 1:
        return 0.0
    return 2 * (p - 1) / p * nbytes / bandwidth + 2 * (p - 1) * latency


def tree_allreduce_time(nbytes: float, p: int, bandwidth: float, latency: float) -> float:
    """2 ceil(log2 p) x (latency + bytes / bandwidth).

    A binomial-tree reduce to one root, then a binomial-tree broadcast, each ceil(log2 p)
    steps carrying the whole message: Thakur et al. (2005), sec. 4; Paleo's
    TreeAllReduce (Qi et al. 2017). Fewer latency terms than a ring, more bytes."""
    if p <= 1:
        return 0.0
    return 2 * math.ceil(math.log2(p)) * (latency + nbytes / bandwidth)


def hierarchical_allreduce_time(
    nbytes: float,
    per_node: int,
    nodes: int,
    intra_bandwidth: float,
    intra_latency: float,
    inter_bandwidth: float,
    inter_latency: float,
) -> float:
    """Reduce-scatter inside each node, ring all-reduce between nodes, all-gather inside.

    The three phases of Goyal et al. (2017), "Accurate, large minibatch SGD: training
    ImageNet in 1 hour", sec. 4 (intra-server reduce, inter-server all-reduce,
    intra-server broadcast), with ring phases (Patarasuk & Yuan 2009). Each node's
    devices send their 1/per_node shards through the node's one network link, so the
    inter-node phase moves the whole message over ``inter_bandwidth`` (the node's)."""
    k = per_node
    intra = (k - 1) / k * nbytes / intra_bandwidth + (k - 1) * intra_latency if k > 1 else 0.0
    inter = ring_allreduce_time(nbytes, nodes, inter_bandwidth, inter_latency)
    return 2 * intra + inter


def parameter_server_time(
    nbytes: float,
    workers: int,
    bandwidth: float,
    latency: float,
    server_bandwidth: float,
    apply_s: float = 0.0,
) -> float:
    """Each worker pushes its gradient and pulls the weights (2 messages of ``nbytes``),
    and the server applies the push (``apply_s`` of its own work per push and pull); the
    server's link and the server itself serve every worker in turn, so a round needs
    workers x (2 x bytes / server_bandwidth + apply_s). The slower of the two bounds a
    round.

    Li et al. (2014), "Scaling distributed machine learning with the parameter server",
    OSDI (the server nodes aggregate the pushes and apply the updates); the shared-link
    bound as in Paleo's OneToAll scheme (Qi et al. 2017)."""
    own = 2 * p2p_time(nbytes, bandwidth, latency) + apply_s
    shared = workers * (2 * nbytes / server_bandwidth + apply_s)
    return max(own, shared)


def pipeline_bubble_fraction(stages: int, micro_batches: int) -> float:
    """(p-1) / (m+p-1): the idle share of a GPipe schedule with p equal stages and m
    micro-batches. Huang et al. (2019), "GPipe: efficient training of giant neural
    networks using pipeline parallelism", NeurIPS, sec. 2.2."""
    return (stages - 1) / (micro_batches + stages - 1)


def pipeline_time(stage_time: float, stages: int, micro_batches: int) -> float:
    """(m+p-1) x the slowest stage's time per micro-batch: every micro-batch passes every
    stage, and the last leaves p-1 slots after the first could (Huang et al. 2019)."""
    return (micro_batches + stages - 1) * stage_time


def default_micro_batches(batch: int, stages: int) -> int:
    """A pipeline's micro-batches when none are given: four per stage (GPipe's
    observation that the bubble is negligible from about four times as many micro-batches
    as stages, Huang et al. 2019, sec. 2.2), at most one per sample; ``dlperf parallel``
    takes the same (``kinds.parallel.make``)."""
    return min(batch, 4 * stages)


def accumulation_time(update_s: float, micro_batches: int) -> float:
    """Gradient accumulation over ``micro_batches``: each one after the first adds its
    weight gradients into the sum (read both, write the sum: the 3 x P bytes of a plain
    SGD update, so an update's time each). GPipe (Huang et al. 2019, sec. 2.2)
    accumulates the micro-batches' gradients and applies them once per mini-batch."""
    return max(micro_batches - 1, 0) * update_s


def sync_step_time(worker_times: Sequence[float]) -> float:
    """A synchronous step waits for the slowest worker: max over workers.

    Chen, Pan, Monga, Bengio, Jozefowicz (2016), "Revisiting distributed synchronous
    SGD", sec. 2: stragglers set the pace of synchronous training."""
    return max(worker_times)


def async_step_time(worker_times: Sequence[float]) -> float:
    """Asynchronous workers never wait: together they make sum(1/t_i) steps per second,
    so one step of each (one global mini-batch) takes n / sum(1/t_i), the harmonic mean.
    Dean et al. (2012), "Large scale distributed deep networks" (Downpour SGD), NeurIPS."""
    return len(worker_times) / sum(1 / t for t in worker_times)


def speedup(time_one: float, time_n: float) -> float:
    """T(1) / T(n) for the same global mini-batch (strong scaling)."""
    return time_one / time_n


def efficiency(time_one: float, time_n: float, n: int) -> float:
    """Speed-up per device: T(1) / (n x T(n)); 1 is perfect scaling."""
    return speedup(time_one, time_n) / n
