"""The GPT-2-style transformer (``dlperf.workloads.transformer``) in PyTorch.

Attention is written out as its two products and a softmax (``q @ k^T``, masked softmax,
``p @ v``), not as ``F.scaled_dot_product_attention``: the neutral definition, and the
prediction model built on it, has the scores, their scaling, the causal mask, the
softmax and the values as five ops over a T x T matrix, so the measured network runs what
is predicted. A fused kernel is
another algorithm (flash attention recomputes the scores in the backward, a fifth product
that PyTorch's counter adds), and on the CPU the counter does not see it at all.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint as recompute

from dlperf.workloads.transformer import TransformerConfig


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.width, 3 * cfg.width)
        self.proj = nn.Linear(cfg.width, cfg.width)

    def forward(self, x: torch.Tensor, future: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        p = F.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        return self.proj((p @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-norm: x + attn(ln1(x)), then + mlp(ln2(.))."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        d = cfg.width
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_proj = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor, future: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), future)
        # GPT-2's GELU is the tanh approximation
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    """Token and position embeddings, ``depth`` blocks, a final LayerNorm, and logits
    over the vocabulary at every position.

    Tied, the head is ``F.linear`` with the token embedding's matrix rather than a
    Linear module sharing it: a shared Parameter would come apart when the network built
    on the meta device is materialised (``build_model`` makes one tensor per module).
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab, cfg.width)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.width)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.checkpoint = bool(cfg.checkpoint)
        self.ln_f = nn.LayerNorm(cfg.width)
        self.lm_head = None if cfg.tied else nn.Linear(cfg.width, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        pos = torch.arange(t, device=tokens.device)
        # True above the diagonal: the positions each query may not see; made per step,
        # since a buffer would be left unset by the meta-device build
        future = torch.ones(t, t, dtype=torch.bool, device=tokens.device).triu(1)
        x = self.wte(tokens) + self.wpe(pos)
        for block in self.blocks:
            if self.checkpoint and self.training:  # recomputed in the backward pass
                x = recompute(block, x, future, use_reentrant=False)
            else:
                x = block(x, future)
        x = self.ln_f(x)
        head = self.wte.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x, head)  # (B, T, V)
