"""The recursive net's data: random expression trees (max/min over digits), generated
offline, and their packing into level-ordered arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def random_tree(rng: np.random.Generator, leaves: int, ops: int):
    """A random expression tree with exactly ``leaves`` leaves, in post-order (children
    before parents, the root last): (tokens, left, right, value mod 10).

    Tokens 0-9 are leaf digits, 10 + o the operator o (0: max, 1: min, 2: sum mod 10, as
    in ListOps, Nangia & Bowman, 2018). The shape is drawn by splitting the leaves
    uniformly at every node, so chains and balanced trees both occur. left/right are -1
    at the leaves."""
    tokens: list[int] = []
    left: list[int] = []
    right: list[int] = []

    def build(n: int) -> tuple[int, int]:  # (node index, value)
        if n == 1:
            d = int(rng.integers(10))
            tokens.append(d)
            left.append(-1)
            right.append(-1)
            return len(tokens) - 1, d
        a = int(rng.integers(1, n))
        li, lv = build(a)
        ri, rv = build(n - a)
        op = int(rng.integers(ops))
        value = (max(lv, rv), min(lv, rv), (lv + rv) % 10)[op]
        tokens.append(10 + op)
        left.append(li)
        right.append(ri)
        return len(tokens) - 1, value

    _, value = build(leaves)
    return (np.array(tokens), np.array(left), np.array(right)), value


def expression_trees(n: int, leaves: int, ops: int, seed: int):
    """``n`` random trees (an object array of (tokens, left, right)) and their labels."""
    rng = np.random.default_rng(seed)
    trees = np.empty(n, dtype=object)
    labels = np.empty(n, dtype=np.int64)
    for i in range(n):
        trees[i], labels[i] = random_tree(rng, leaves, ops)
    return trees, labels


@dataclass(frozen=True)
class PackedTrees:
    """A batch of trees as one node array, for level-by-level evaluation.

    ``levels[j]`` holds the nodes of height j + 1 (all children already computed when a
    level is reached), so one batched composition per level serves every tree."""

    tokens: np.ndarray  # (nodes,)
    left: np.ndarray  # (nodes,) index of the left child, -1 at leaves
    right: np.ndarray
    leaves: np.ndarray  # indices of the leaves
    levels: list[np.ndarray]
    roots: np.ndarray  # (trees,)


def pack_trees(trees) -> PackedTrees:
    tok, lft, rgt, height, roots = [], [], [], [], []
    offset = 0
    for t, lc, rc in trees:
        h = np.zeros(len(t), dtype=np.int64)
        for i in range(len(t)):  # post-order: children are already done
            if lc[i] >= 0:
                h[i] = 1 + max(h[lc[i]], h[rc[i]])
        tok.append(t)
        lft.append(np.where(lc >= 0, lc + offset, -1))
        rgt.append(np.where(rc >= 0, rc + offset, -1))
        height.append(h)
        offset += len(t)
        roots.append(offset - 1)
    height_all = np.concatenate(height)
    levels = [np.flatnonzero(height_all == j) for j in range(1, int(height_all.max()) + 1)]
    return PackedTrees(
        np.concatenate(tok),
        np.concatenate(lft),
        np.concatenate(rgt),
        np.flatnonzero(height_all == 0),
        levels,
        np.array(roots),
    )
