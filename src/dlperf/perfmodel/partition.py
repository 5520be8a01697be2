"""Split a layer sequence into pipeline stages by cost. Framework-free.

A layer's cost is its training-step FLOPs from the neutral workload definition
(``Layer.train_flops``: forward, weight gradient and input gradient). Layers without
matrix products (activations, pooling, normalisation) cost no FLOPs but are not free: they
read and write every element of their output, forward and backward, so they count as
``ELEMENTWISE_COST`` operations per output element. This keeps them from piling up on one
stage and decides ties between cuts that are otherwise equal.
"""

from __future__ import annotations

from collections.abc import Sequence

from dlperf.workloads.base import Layer

ELEMENTWISE_COST = 3.0  # forward 1 + backward 2 operations per output element


def layer_cost(layer: Layer) -> float:
    flops = layer.train_flops()
    return float(flops) if flops else ELEMENTWISE_COST * layer.out_elems


def units(layers: Sequence[Layer]) -> list[list[int]]:
    """The positions of ``layers`` in the units a pipeline cuts between: the consecutive
    layers of one block (``Layer.block``: a residual block, whose skip connection a cut
    would have to carry across) together, every other layer alone. These are the
    top-level modules ``dlperf parallel`` splits a network's ``nn.Sequential`` into."""
    out: list[list[int]] = []
    for i, layer in enumerate(layers):
        if out and layer.block and layers[out[-1][-1]].block == layer.block:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def split_layers(layers: Sequence[Layer], stages: int) -> list[list[int]]:
    """``layers`` cut into ``stages`` contiguous stages (positions in ``layers``) between
    their units (``units``), by cost (``split_by_cost``)."""
    groups = units(layers)
    parts = split_by_cost([sum(layer_cost(layers[i]) for i in g) for g in groups], stages)
    return [[i for k in part for i in groups[k]] for part in parts]


def pipeline_stages(layers: Sequence[Layer], stages: int) -> list[list[int]]:
    """The positions of ``layers`` in each of ``stages`` pipeline stages as ``dlperf
    parallel`` runs them: all but the loss cut by ``split_layers``, the loss computed on
    the last stage."""
    body = [i for i, layer in enumerate(layers) if layer.op != "loss"]
    out = [[body[j] for j in part]
           for part in split_layers([layers[i] for i in body], stages)]
    out[-1] += [i for i, layer in enumerate(layers) if layer.op == "loss"]
    return out


def owner(layer_name: str, children: Sequence[str]) -> str | None:
    """The top-level module that holds a neutral layer: the same name, or the longest
    child name that prefixes it followed by '_' (ResNet's 's1b1_c2' is in block 's1b1')."""
    if layer_name in children:
        return layer_name
    best = None
    for c in children:
        if layer_name.startswith(c + "_") and (best is None or len(c) > len(best)):
            best = c
    return best


def child_costs(children: Sequence[str], layers: Sequence[Layer]) -> list[float] | None:
    """Per-sample cost of each top-level child module, or None when some neutral layer
    has no module of that name (then the caller measures the costs another way)."""
    costs = dict.fromkeys(children, 0.0)
    for layer in layers:
        if layer.op == "loss":
            continue  # computed on the last stage, after the split
        name = owner(layer.name, children)
        if name is None:
            return None
        costs[name] += layer_cost(layer)
    return [costs[c] for c in children]


def split_by_cost(costs: Sequence[float], stages: int) -> list[list[int]]:
    """Contiguous, non-empty stages minimising the cost of the most expensive stage (the
    pipeline runs at the pace of its slowest stage); among equal splits, the one whose
    stages are most even (smallest sum of squared stage costs).

    Dynamic programming over (stages, prefix), O(stages x n^2): n is a network's top-level
    module count, at most a few dozen.
    """
    n = len(costs)
    if stages < 1:
        raise ValueError("at least one stage")
    if n < stages:
        raise ValueError(f"{n} layers cannot fill {stages} stages")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + float(c))

    def seg(i: int, j: int) -> float:
        return prefix[j] - prefix[i]

    inf = (float("inf"), float("inf"))
    # best[k][j]: (max stage cost, sum of squares) splitting the first j layers in k stages
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = (0.0, 0.0)
    for k in range(1, stages + 1):
        for j in range(k, n - (stages - k) + 1):
            for i in range(k - 1, j):
                prev = best[k - 1][i]
                if prev == inf:
                    continue
                s = seg(i, j)
                cand = (max(prev[0], s), prev[1] + s * s)
                if cand < best[k][j]:
                    best[k][j], cut[k][j] = cand, i
    bounds, j = [], n
    for k in range(stages, 0, -1):
        i = cut[k][j]
        bounds.append(list(range(i, j)))
        j = i
    return bounds[::-1]


def shard_layout(sizes: Sequence[int], servers: int) -> list[tuple[int, int]]:
    """(offset, length) in the flat parameter vector of each parameter server's shard:
    whole parameter tensors, in order, cut so that the largest shard is as small as
    possible (``split_by_cost`` with each tensor's element count as its cost: a server's
    work and traffic per exchange are proportional to the elements it holds). ``servers``
    0 (the server beside rank 0) or 1: one shard of everything."""
    total = int(sum(sizes))
    if servers <= 1:
        return [(0, total)]
    if len(sizes) < servers:
        raise ValueError(f"{len(sizes)} parameter tensors cannot be sharded over {servers} "
                         "servers")
    out, offset = [], 0
    for part in split_by_cost([float(n) for n in sizes], servers):
        n = int(sum(sizes[j] for j in part))
        out.append((offset, n))
        offset += n
    return out
