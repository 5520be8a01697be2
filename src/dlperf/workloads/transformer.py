"""A GPT-2-style decoder-only transformer (Radford et al., 2019), framework-neutral.

Pre-norm blocks: LayerNorm -> causal self-attention (one fused QKV projection, ``heads``
heads, the scores scaled and masked to the past before their softmax, an output
projection) -> residual add -> LayerNorm -> MLP (width -> 4 width,
GELU, -> width) -> residual add; learned position embeddings; a final LayerNorm; the
language-model head tied to the token embedding (as GPT-2 ties them); softmax
cross-entropy over the vocabulary at every position.

Parameters, with L blocks of width d, context T, vocabulary V (tied):
N = V d + T d + L (12 d^2 + 13 d) + 2 d, since a block holds QKV (3d^2 + 3d), the
attention projection (d^2 + d), the MLP (8d^2 + 5d) and two LayerNorms (4d). GPT-2 small
(L=12, d=768, T=1024, V=50257): 124,439,808.

FLOPs follow ``dlperf.workloads.base`` (matmuls only, 2 per multiply-add). Per sequence,
forward: each block 24 T d^2 (projections and MLP) + 4 T^2 d (the QK^T and AV products,
over all heads, the full T x T square as PyTorch's counter counts it even when causal);
the head 2 T d V. The attention products have two activation inputs and no weights, so
their backward is two products of the forward's size (``dgrad_flops``). Every matmul's
input needs a gradient (the first block's input is the trained embedding), so a training
step costs exactly 3 x forward: per token 72 L d^2 + 12 L T d + 6 d V.

Against 6N + 12 L d T (Kaplan et al. 2020, "Scaling laws for neural language models",
sec. 2.1, with the attention term written as in Chowdhery et al. 2022, PaLM, app. B)
this count is smaller by 6 T d + 78 L d + 12 d per token: the position embedding, the
biases and the LayerNorm parameters cost no matmul. About 0.6% for GPT-2 small.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dlperf.workloads.base import Gemm, Layer, Workload, dense


@dataclass(frozen=True)
class TransformerConfig:
    """A GPT-2-style language model: ``depth`` blocks of ``width`` with ``heads`` heads,
    ``seq_len`` positions, ``vocab`` tokens; ``tied`` shares the embedding and the head."""

    depth: int = 12
    width: int = 768
    heads: int = 12
    seq_len: int = 1024
    vocab: int = 50257
    tied: bool = True
    #: activation checkpointing: each block's activations are recomputed in the backward
    #: pass from its input (Chen et al., "Training Deep Nets with Sublinear Memory Cost",
    #: 2016): only the blocks' inputs are kept, at the cost of a second forward per block
    checkpoint: bool = False

    def _check(self) -> None:
        for name in ("depth", "width", "heads", "seq_len", "vocab"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not divisible by heads {self.heads}")
        for name in ("tied", "checkpoint"):  # --param NAME=1 arrives as 1
            if getattr(self, name) not in (True, False, 0, 1):
                raise ValueError(f"{name} must be true or false (1 or 0), got "
                                 f"{getattr(self, name)!r}")

    def block(self, i: int) -> list[Layer]:
        t, d, h = self.seq_len, self.width, self.heads
        attn = 2 * t * t * d  # QK^T (or AV) over all heads: h x (T x d/h) x (d/h x T)
        layers = [
            Layer(f"b{i}_ln1", "ln", params=2 * d, out_elems=t * d),
            _per_token(dense(f"b{i}_qkv", d, 3 * d), t),
            # two activation inputs (Q and K, or P and V), no weights: the backward is
            # one product for each input, each the forward's size
            Layer(f"b{i}_scores", "attention", fwd_flops=attn, out_elems=h * t * t,
                  dgrad_flops=2 * attn, gemms=(Gemm(t, t, d // h, count=h, batch_rows=False),)),
            # the scores' scaling by 1/sqrt(d/h) and the causal mask (masked_fill): each
            # one elementwise pass over the scores each way
            Layer(f"b{i}_scale", "scale", out_elems=h * t * t),
            Layer(f"b{i}_mask", "mask", out_elems=h * t * t),
            Layer(f"b{i}_softmax", "softmax", out_elems=h * t * t),
            Layer(f"b{i}_values", "attention", fwd_flops=attn, out_elems=t * d,
                  dgrad_flops=2 * attn, gemms=(Gemm(t, d // h, t, count=h, batch_rows=False),)),
            _per_token(dense(f"b{i}_proj", d, d), t),
            Layer(f"b{i}_residual1", "add", out_elems=t * d),
            Layer(f"b{i}_ln2", "ln", params=2 * d, out_elems=t * d),
            _per_token(dense(f"b{i}_fc", d, 4 * d), t),
            Layer(f"b{i}_gelu", "act", out_elems=4 * t * d),
            _per_token(dense(f"b{i}_fc_proj", 4 * d, d), t),
            Layer(f"b{i}_residual2", "add", out_elems=t * d),
        ]
        return [replace(x, block=f"b{i}") for x in layers]

    def layers(self) -> list[Layer]:
        self._check()
        t, d, v = self.seq_len, self.width, self.vocab
        head = _per_token(dense("lm_head", d, v, bias=False), t)
        out = [
            # tied: the embedding matrix is counted once, on the head, where its gradient
            # is a matmul (the embedding's own is a scatter of the gathered rows)
            Layer("wte", "embedding", params=0 if self.tied else v * d, out_elems=t * d,
                  input_grad=False, block="embed"),
            Layer("wpe", "embedding", params=t * d, out_elems=t * d, input_grad=False,
                  block="embed"),
            Layer("embed_add", "add", out_elems=t * d, block="embed"),
        ]
        for i in range(self.depth):
            block = self.block(i + 1)
            out += [replace(x, segment=f"b{i + 1}") for x in block] if self.checkpoint \
                else block
        out += [
            Layer("ln_f", "ln", params=2 * d, out_elems=t * d),
            head,
            Layer("softmax_xent", "loss", out_elems=t * v),
        ]
        return out

    def input_shape(self) -> tuple[int, ...]:
        return (self.seq_len,)


def _per_token(layer: Layer, t: int) -> Layer:
    """A dense layer applied at each of ``t`` positions: the same weights, t times the
    products and the output."""
    return Layer(layer.name, layer.op, params=layer.params, fwd_flops=t * layer.fwd_flops,
                 out_elems=t * layer.out_elems,
                 gemms=tuple(replace(g, m=g.m * t) for g in layer.gemms))


MODERN: dict[str, Workload] = {
    "gpt2": Workload(
        name="gpt2",
        family="transformer",
        description="GPT-2-style transformer (small: 12 blocks of 768, 12 heads, 1024 tokens)",
        sizes={
            "tiny": TransformerConfig(depth=2, width=32, heads=2, seq_len=16, vocab=64),
            "small": TransformerConfig(),
            "medium": TransformerConfig(depth=24, width=1024, heads=16),
            "large": TransformerConfig(depth=36, width=1280, heads=20),
            "xl": TransformerConfig(depth=48, width=1600, heads=25),
        },
        default_size="small",
        default_batch=8,
        batch_sweep=(1, 2, 4, 8, 16, 32),
        task="language-model",
        group="modern",
        tunable=("depth", "width", "heads", "seq_len", "vocab", "tied", "checkpoint"),
    )
}
