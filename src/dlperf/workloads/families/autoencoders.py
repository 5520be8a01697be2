"""Auto-encoders: dense, and the deconvolutional net (transposed convolutions)."""

from __future__ import annotations

from dataclasses import dataclass

from dlperf.workloads.base import Gemm, Layer, dense
from dlperf.workloads.families.common import (
    DATA_SHAPES,
    check_fields,
    dense_stack,
    flat_size,
)


@dataclass(frozen=True)
class AutoencoderConfig:
    """Auto-encoder: input -> (``depth - 1`` layers of ``width``) -> code of ``hidden``
    nodes -> mirror image -> sigmoid output; mean squared reconstruction error."""

    hidden: int = 32
    depth: int = 1
    width: int = 256
    activation: str = "relu"
    init_scale: float | str = "default"
    dataset: str = "digits"

    def widths(self) -> tuple[int, ...]:
        n = flat_size(self.dataset)
        enc = (n, *(self.width,) * (self.depth - 1), self.hidden)
        return enc + enc[-2::-1]

    def layers(self) -> list[Layer]:
        check_fields(self, datasets=("digits",), positive=("hidden", "depth", "width"))
        w = self.widths()
        out = dense_stack("enc", w[: self.depth + 1], first=True, act=self.activation)
        dec = dense_stack("dec", w[self.depth :], first=False, act=self.activation)
        dec[-1] = Layer(f"dec_sigmoid{self.depth}", "act", out_elems=w[-1])
        out += dec
        out.append(Layer("mse", "loss", out_elems=w[-1]))
        return out

    def input_shape(self) -> tuple[int, ...]:
        return DATA_SHAPES[self.dataset]


@dataclass(frozen=True)
class DeconvConfig:
    """Deconvolutional network: a dense encoder to a ``code``, then a dense layer to a
    ``width`` x 2 x 2 map and two 4x4/2 transposed convolutions (2 -> 4 -> 8) to the image;
    sigmoid output, mean squared reconstruction error."""

    code: int = 16
    width: int = 32
    init_scale: float | str = "default"
    dataset: str = "digits"

    def layers(self) -> list[Layer]:
        check_fields(self, datasets=("digits",), positive=("code", "width"))
        if self.width < 2:
            raise ValueError("width must be at least 2")
        c, w = DATA_SHAPES[self.dataset][0], self.width
        return [
            dense("enc", flat_size(self.dataset), self.code, first=True),
            Layer("enc_relu", "act", out_elems=self.code),
            dense("dec_fc", self.code, w * 4),
            Layer("dec_relu", "act", out_elems=w * 4),
            deconv("deconv1", w, w // 2, 4, 2),
            Layer("deconv_relu1", "act", out_elems=w // 2 * 16),
            deconv("deconv2", w // 2, c, 4, 4),
            Layer("sigmoid", "act", out_elems=c * 64),
            Layer("mse", "loss", out_elems=c * 64),
        ]

    def input_shape(self) -> tuple[int, ...]:
        return DATA_SHAPES[self.dataset]


def deconv(name: str, c_in: int, c_out: int, k: int, in_hw: int) -> Layer:
    """Transposed convolution, stride 2: its products are those of the convolution it is
    the gradient of, counted over the input map (as torch.utils.flop_counter does)."""
    return Layer(
        name,
        "deconv",
        params=k * k * c_in * c_out + c_out,
        fwd_flops=2 * k * k * c_in * c_out * in_hw * in_hw,
        out_elems=c_out * (2 * in_hw) ** 2,
        # the gradient of a convolution: one row per input pixel, k x k x c_out columns
        gemms=(Gemm(in_hw * in_hw, k * k * c_out, c_in, window=k),),
    )
