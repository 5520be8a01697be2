"""The recursive net: composition over expression trees, level by level."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from dlperf.backends.torch_families.base import ClassifierTrainer
from dlperf.workloads import families as fam


class TorchTrees:
    """A packed tree batch on the device: per level (nodes, left, right, operator)."""

    def __init__(self, p: fam.PackedTrees, device: torch.device):
        def t(a: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(a, dtype=torch.long, device=device)

        self.nodes = len(p.tokens)
        self.leaves, self.leaf_tokens = t(p.leaves), t(p.tokens[p.leaves])
        self.levels = [
            (t(ix), t(p.left[ix]), t(p.right[ix]), t(p.tokens[ix] - 10)) for ix in p.levels
        ]
        self.roots = t(p.roots)


class TreeNet(nn.Module):
    """One composition cell applied bottom-up, one batched product per tree level."""

    def __init__(self, cfg: fam.RecursiveConfig):
        super().__init__()
        h = cfg.hidden
        self.leaf = nn.Embedding(10, h)
        self.op = nn.Embedding(cfg.ops, h)
        self.compose = nn.Linear(2 * h, h)
        self.fc = nn.Linear(h, fam.CLASSES)

    def forward(self, trees: TorchTrees) -> torch.Tensor:
        state = self.leaf.weight.new_zeros(trees.nodes, self.leaf.embedding_dim)
        state = state.index_copy(0, trees.leaves, self.leaf(trees.leaf_tokens))
        for idx, left, right, op in trees.levels:
            # (n_level, 2H) @ (2H, H): every tree's nodes of this height at once
            h = torch.tanh(self.compose(torch.cat([state[left], state[right]], 1)) + self.op(op))
            state = state.index_copy(0, idx, h)
        return self.fc(state[trees.roots])


class TreeTrainer(ClassifierTrainer):
    def synthetic(self, n: int):
        trees, labels = fam.expression_trees(n, self.cfg.leaves, self.cfg.ops, seed=n)
        return self._input(trees), torch.as_tensor(labels, device=self.device)

    def _input(self, x: Any) -> TorchTrees:
        return TorchTrees(fam.pack_trees(x), self.device)
