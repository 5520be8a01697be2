"""The DLBench networks (Shi, Wang, Xu, Chu, 2016), as the benchmark's own code defines them.

Where the paper and the code disagree, the code wins (see docs/workloads.md):
- FCN-5/8: 26752 inputs and outputs (the code's synthetic data), sigmoid hidden layers.
- AlexNet: 224x224x3 input with 'SAME' padding throughout, so the last pooling layer is
  7x7x256 and the first fully connected layer has 12544 inputs; no LRN, no groups. The
  code also applies ReLU to the logits; dlperf does not, since it changes no cost and
  makes the loss degenerate.
- LSTM: word-level language model, vocabulary 10000, embedding 256, two layers of 256.

Every definition has a ``tiny`` size with the same structure and small shapes, for tests
and for a quick check that a framework is set up (``--size tiny``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dlperf.workloads.base import Gemm, Layer, Workload, conv, conv_out, dense, max_pool


@dataclass(frozen=True)
class FCNConfig:
    """Fully connected classifier: inputs -> hidden... -> classes, softmax cross-entropy."""

    inputs: int
    hidden: tuple[int, ...]
    classes: int
    activation: str = "sigmoid"

    def layers(self) -> list[Layer]:
        widths = (self.inputs, *self.hidden, self.classes)
        out: list[Layer] = []
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
            out.append(dense(f"fc{i + 1}", a, b, first=(i == 0)))
            if i < len(widths) - 2:
                out.append(Layer(f"{self.activation}{i + 1}", "act", out_elems=b))
        out.append(Layer("softmax_xent", "loss", out_elems=self.classes))
        return out

    def input_shape(self) -> tuple[int, ...]:
        return (self.inputs,)


@dataclass(frozen=True)
class ConvSpec:
    out: int
    kernel: int
    stride: int
    pad: int
    pool_after: bool  # max-pool 3x3, stride 2, pad 1 after the ReLU


@dataclass(frozen=True)
class AlexNetConfig:
    """Convolutions with ReLU and optional 3x3/2 max-pooling, then ReLU dense layers."""

    image: int
    channels_in: int
    convs: tuple[ConvSpec, ...]
    fc: tuple[int, ...]
    classes: int

    def feature_side(self) -> int:
        side = self.image
        for c in self.convs:
            side = conv_out(side, c.kernel, c.stride, c.pad)
            if c.pool_after:
                side = conv_out(side, 3, 2, 1)
        return side

    def layers(self) -> list[Layer]:
        out: list[Layer] = []
        side, c_in = self.image, self.channels_in
        for i, c in enumerate(self.convs):
            in_hw, side = side, conv_out(side, c.kernel, c.stride, c.pad)
            out.append(conv(f"conv{i + 1}", c_in, c.out, c.kernel, side, first=(i == 0),
                            stride=c.stride, pad=c.pad, in_hw=in_hw))
            out.append(Layer(f"relu{i + 1}", "act", out_elems=c.out * side * side))
            if c.pool_after:
                out.append(max_pool(f"pool{i + 1}", c.out, side))
                side = conv_out(side, 3, 2, 1)
            c_in = c.out
        flat = c_in * side * side
        widths = (flat, *self.fc, self.classes)
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
            out.append(dense(f"fc{i + 1}", a, b))
            if i < len(widths) - 2:
                out.append(Layer(f"fc_relu{i + 1}", "act", out_elems=b))
        out.append(Layer("softmax_xent", "loss", out_elems=self.classes))
        return out

    def input_shape(self) -> tuple[int, ...]:
        return (self.channels_in, self.image, self.image)


@dataclass(frozen=True)
class ResNetConfig:
    """Bottleneck ResNet (He et al., 2016), torchvision's v1.5 layout: the stride sits on
    the 3x3 convolution, convolutions have no bias, every convolution is followed by batch
    normalisation, and by a ReLU except the block's last, whose ReLU follows the sum with
    the shortcut; a 1x1 projection (with batch norm) where the shape changes."""

    image: int
    stem: int  # channels of the 7x7/2 stem convolution
    stages: tuple[tuple[int, int, int], ...]  # (width, blocks, stride)
    classes: int
    expansion: int = 4
    channels_in: int = 3

    def layers(self) -> list[Layer]:
        out: list[Layer] = []
        side = conv_out(self.image, 7, 2, 3)
        out.append(conv("stem", self.channels_in, self.stem, 7, side, bias=False, first=True,
                        stride=2, pad=3, in_hw=self.image))
        out.append(bn("stem_bn", self.stem, side))
        out.append(Layer("stem_relu", "act", out_elems=self.stem * side * side))
        out.append(max_pool("stem_pool", self.stem, side))
        side = conv_out(side, 3, 2, 1)
        c_in = self.stem
        for s, (width, blocks, stride) in enumerate(self.stages):
            for b in range(blocks):
                st = stride if b == 0 else 1
                name = f"s{s + 1}b{b + 1}"
                c_out = width * self.expansion
                first = len(out)
                out.append(conv(f"{name}_c1", c_in, width, 1, side, bias=False))
                out.append(bn(f"{name}_bn1", width, side))
                out.append(Layer(f"{name}_relu1", "act", out_elems=width * side * side))
                new_side = conv_out(side, 3, st, 1)
                pixels = new_side * new_side
                out.append(conv(f"{name}_c2", width, width, 3, new_side, bias=False, stride=st,
                                pad=1, in_hw=side))
                out.append(bn(f"{name}_bn2", width, new_side))
                out.append(Layer(f"{name}_relu2", "act", out_elems=width * pixels))
                out.append(conv(f"{name}_c3", width, c_out, 1, new_side, bias=False))
                out.append(bn(f"{name}_bn3", c_out, new_side))
                if st != 1 or c_in != c_out:
                    out.append(replace(conv(f"{name}_proj", c_in, c_out, 1, new_side,
                                            bias=False, stride=st), shortcut=True))
                    out.append(replace(bn(f"{name}_proj_bn", c_out, new_side), shortcut=True))
                # the shortcut's sum and the block's last ReLU (no FLOPs, but two passes)
                out.append(Layer(f"{name}_add", "add", out_elems=c_out * pixels))
                out.append(Layer(f"{name}_relu3", "act", out_elems=c_out * pixels))
                out[first:] = [replace(x, block=name) for x in out[first:]]
                side, c_in = new_side, c_out
        out.append(Layer("avgpool", "pool", out_elems=c_in))
        out.append(dense("fc", c_in, self.classes))
        out.append(Layer("softmax_xent", "loss", out_elems=self.classes))
        return out

    def input_shape(self) -> tuple[int, ...]:
        return (self.channels_in, self.image, self.image)


def bn(name: str, channels: int, side: int) -> Layer:
    # gamma and beta are trained; the running statistics are state, not parameters
    return Layer(name, "bn", params=2 * channels, out_elems=channels * side * side)


@dataclass(frozen=True)
class LSTMLMConfig:
    """Word-level LSTM language model: embedding, stacked LSTMs, softmax over the vocabulary
    at every step. Each LSTM gate has one bias vector (as Keras and Flax define it)."""

    vocab: int
    embed: int
    hidden: int
    layers_n: int
    seq_len: int

    def layers(self) -> list[Layer]:
        t = self.seq_len
        out = [
            Layer("embedding", "embedding", params=self.vocab * self.embed, out_elems=t * self.embed)
        ]
        n_in = self.embed
        for i in range(self.layers_n):
            gates = 4 * self.hidden
            out.append(
                Layer(
                    f"lstm{i + 1}",
                    "lstm",
                    params=gates * (n_in + self.hidden) + gates,
                    fwd_flops=t * 2 * gates * (n_in + self.hidden),
                    out_elems=t * self.hidden,
                    # no gradient flows into the zero initial state h0
                    dgrad_flops=t * 2 * gates * (n_in + self.hidden) - 2 * gates * self.hidden,
                    # the input projection of all t steps at once, then t recurrent steps
                    gemms=(Gemm(t, gates, n_in), Gemm(1, gates, self.hidden, count=t)),
                )
            )
            n_in = self.hidden
        proj = dense("softmax_proj", self.hidden, self.vocab)
        out.append(
            Layer(
                proj.name,
                "dense",
                params=proj.params,
                fwd_flops=t * proj.fwd_flops,
                out_elems=t * self.vocab,
                gemms=(Gemm(t, self.vocab, self.hidden),),
            )
        )
        out.append(Layer("softmax_xent", "loss", out_elems=t * self.vocab))
        return out

    def input_shape(self) -> tuple[int, ...]:
        return (self.seq_len,)


def _alexnet(image: int, ch: tuple[int, ...], fc: tuple[int, ...], classes: int) -> AlexNetConfig:
    return AlexNetConfig(
        image=image,
        channels_in=3,
        convs=(
            ConvSpec(ch[0], 11, 4, 4, True),
            ConvSpec(ch[1], 5, 1, 2, True),
            ConvSpec(ch[2], 3, 1, 1, False),
            ConvSpec(ch[3], 3, 1, 1, False),
            ConvSpec(ch[4], 3, 1, 1, True),
        ),
        fc=fc,
        classes=classes,
    )


def _lstm(seq_len: int) -> Workload:
    return Workload(
        name=f"lstm{seq_len}",
        family="lstm-lm",
        description=f"LSTM language model, vocab 10000, embed 256, 2x256 LSTM, {seq_len} steps",
        sizes={
            "full": LSTMLMConfig(10000, 256, 256, 2, seq_len),
            "tiny": LSTMLMConfig(50, 16, 16, 2, max(4, seq_len // 8)),
        },
        default_size="full",
        default_batch=128,
        batch_sweep=(128, 256, 512),
        task="language-model",
    )


DLBENCH: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            name="fcn5",
            family="fcn",
            description="FCN-5: 26752-2048-2048-2048-26752, sigmoid",
            sizes={
                "full": FCNConfig(26752, (2048,) * 3, 26752),
                "tiny": FCNConfig(64, (32,) * 3, 64),
            },
            default_size="full",
            default_batch=64,
            batch_sweep=(64, 128, 256, 512, 1024, 2048, 4096),
            task="classification",
        ),
        Workload(
            name="fcn8",
            family="fcn",
            description="FCN-8: 26752-2048x6-26752, sigmoid",
            sizes={
                "full": FCNConfig(26752, (2048,) * 6, 26752),
                "tiny": FCNConfig(64, (32,) * 6, 64),
            },
            default_size="full",
            default_batch=64,
            batch_sweep=(64, 128, 256, 512, 1024, 2048, 4096),
            task="classification",
        ),
        Workload(
            name="alexnet",
            family="alexnet",
            description="AlexNet (DLBench): 5 conv + 3 FC, 224x224x3, no LRN, no groups",
            sizes={
                "full": _alexnet(224, (96, 256, 384, 384, 256), (4096, 4096), 1000),
                "tiny": _alexnet(32, (8, 16, 24, 24, 16), (32, 32), 10),
            },
            default_size="full",
            default_batch=16,
            batch_sweep=(16, 32, 64, 128),
            task="classification",
        ),
        Workload(
            name="resnet50",
            family="resnet",
            description="ResNet-50 (bottleneck, v1.5), 224x224x3, 1000 classes",
            sizes={
                "full": ResNetConfig(
                    224, 64, ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)), 1000
                ),
                "tiny": ResNetConfig(32, 8, ((8, 1, 1), (16, 1, 2)), 10),
            },
            default_size="full",
            default_batch=16,
            batch_sweep=(8, 16, 32, 64),
            task="classification",
        ),
        _lstm(32),
        _lstm(64),
    )
}
