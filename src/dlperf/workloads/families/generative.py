"""Generative and energy-based families: RBM (CD-k), DBN, VAE, GAN."""

from __future__ import annotations

from dataclasses import dataclass, replace

from dlperf.workloads.base import Layer, dense
from dlperf.workloads.families.classifiers import FFNConfig
from dlperf.workloads.families.common import (
    DATA_SHAPES,
    check_fields,
    dense_stack,
    flat_size,
    generator_step,
)


@dataclass(frozen=True)
class RBMConfig:
    """Restricted Boltzmann machine, binary hidden units, visible units the pixel
    intensities in [0, 1] taken as probabilities; trained by CD-k (Hinton, 2002).

    One step: the hidden probabilities of the data, k alternating Gibbs steps (down and
    up), and the two outer products of the positive and negative statistics: per sample
    2VH(1 + 2k) + 2 * 2VH FLOPs, no backpropagation."""

    hidden: int = 64
    k: int = 1
    init_scale: float | str = "default"  # default: N(0, 0.01^2) (Hinton, 2010, sec. 8)
    dataset: str = "digits"

    @property
    def visible(self) -> int:
        return flat_size(self.dataset)

    def layers(self) -> list[Layer]:
        check_fields(self, datasets=("digits",), positive=("hidden", "k"))
        return rbm_layers("rbm", self.visible, self.hidden, self.k)

    def input_shape(self) -> tuple[int, ...]:
        return DATA_SHAPES[self.dataset]


def rbm_layers(name: str, v: int, h: int, k: int) -> list[Layer]:
    """The cost of one CD-k update of a V x H RBM, as pseudo-layers (see RBMConfig)."""
    vh = 2 * v * h
    return [
        Layer(f"{name}_weights", "rbm", params=v * h + v + h),
        Layer(
            f"{name}_gibbs", "rbm", fwd_flops=vh * (1 + 2 * k), out_elems=v + h, input_grad=False
        ),
        Layer(f"{name}_stats", "rbm", fwd_flops=2 * vh, out_elems=v * h, input_grad=False),
    ]


@dataclass(frozen=True)
class DBNConfig:
    """Deep belief network (Hinton, Osindero, Teh, 2006): ``depth`` RBMs of ``hidden``
    units stacked on the input, pre-trained greedily by CD-k, then unrolled into a sigmoid
    classifier (plus a 10-way output layer) and fine-tuned by backpropagation.

    ``phase`` picks what one timed step is: 'finetune' (one backpropagation step of the
    classifier) or 'pretrain' (one CD-k update of every RBM in turn, each on the
    mean-field activations of the ones below)."""

    hidden: int = 128
    depth: int = 2
    k: int = 1
    init_scale: float | str = "default"
    phase: str = "finetune"
    dataset: str = "digits"

    def widths(self) -> tuple[int, ...]:
        return (flat_size(self.dataset), *(self.hidden,) * self.depth)

    def layers(self) -> list[Layer]:
        check_fields(self, datasets=("digits", "cancer"), positive=("hidden", "depth", "k"))
        w = self.widths()
        if self.phase == "finetune":
            return FFNConfig(
                self.hidden, self.depth, "sigmoid", self.init_scale, self.dataset
            ).layers()
        if self.phase != "pretrain":
            raise ValueError(f"phase must be finetune or pretrain, got '{self.phase}'")
        out: list[Layer] = []
        for i, (a, b) in enumerate(zip(w[:-1], w[1:], strict=True)):
            if i:  # the data reach RBM i through the mean-field pass of the ones below
                out.append(
                    Layer(
                        f"rbm{i + 1}_input",
                        "rbm",
                        fwd_flops=sum(2 * x * y for x, y in zip(w[:i], w[1 : i + 1], strict=True)),
                        out_elems=a,
                        input_grad=False,
                    )
                )
            out += rbm_layers(f"rbm{i + 1}", a, b, self.k)
        return out

    def input_shape(self) -> tuple[int, ...]:
        return DATA_SHAPES[self.dataset]


@dataclass(frozen=True)
class VAEConfig:
    """Variational auto-encoder (Kingma & Welling, 2014): encoder (``depth`` ReLU layers of
    ``hidden``) -> mean and log-variance of a ``latent``-dimensional Gaussian; a
    reparameterised sample z = mu + sigma * eps; decoder (mirror) -> Bernoulli logits of
    the pixels. Loss: the negative ELBO, summed over pixels, averaged over the batch."""

    hidden: int = 128
    latent: int = 8
    depth: int = 1
    init_scale: float | str = "default"
    dataset: str = "digits"

    def layers(self) -> list[Layer]:
        check_fields(self, datasets=("digits",), positive=("hidden", "latent", "depth"))
        n, h, z = flat_size(self.dataset), self.hidden, self.latent
        out = dense_stack("enc", (n, *(h,) * self.depth), first=True, act="relu")
        out.append(dense("enc_gauss", h, 2 * z))
        out.append(Layer("sampler", "sample", out_elems=z))
        out += dense_stack("dec", (z, *(h,) * self.depth), first=False, act="relu")
        out.append(dense("dec_out", h, n))
        out.append(Layer("neg_elbo", "loss", out_elems=n))
        return out

    def input_shape(self) -> tuple[int, ...]:
        return DATA_SHAPES[self.dataset]


@dataclass(frozen=True)
class GANConfig:
    """Generative adversarial network (Goodfellow et al., 2014), dense: generator
    ``latent`` -> ``depth`` ReLU layers of ``hidden`` -> sigmoid pixels; discriminator
    pixels -> ``depth`` LeakyReLU layers of ``hidden`` -> one logit.

    One mini-batch is one discriminator update (on a real and a generated batch) followed
    by one generator update (non-saturating loss), each on ``batch`` samples. The
    discriminator's cost counts its two D-step passes (real, fake) with weight gradients,
    and, as ``*_gstep`` pseudo-layers, the G-step's pass through it with input gradients
    only (its weights are held fixed there)."""

    latent: int = 16
    hidden: int = 128
    depth: int = 1
    init_scale: float | str = "default"
    dataset: str = "digits"

    def generator_layers(self) -> list[Layer]:
        n, h = flat_size(self.dataset), self.hidden
        out = dense_stack("g", (self.latent, *(h,) * self.depth), first=True, act="relu")
        out.append(dense("g_out", h, n))
        out.append(Layer("g_sigmoid", "act", out_elems=n))
        return out

    def discriminator_layers(self) -> list[Layer]:
        n, h = flat_size(self.dataset), self.hidden
        out = dense_stack("d", (n, *(h,) * self.depth), first=True, act="lrelu")
        out.append(dense("d_out", h, 1))
        return out

    def layers(self) -> list[Layer]:
        check_fields(self, datasets=("digits",), positive=("latent", "hidden", "depth"))
        out = self.generator_layers()
        for layer in self.discriminator_layers():
            if layer.fwd_flops:
                # two D-step passes (real and fake): forward, weight and input gradients
                dgrad = 0 if not layer.input_grad else 2 * layer.fwd_flops
                out.append(
                    Layer(
                        layer.name,
                        layer.op,
                        params=layer.params,
                        fwd_flops=2 * layer.fwd_flops,
                        out_elems=layer.out_elems,
                        input_grad=layer.input_grad,
                        dgrad_flops=dgrad,
                        gemms=tuple(replace(g, count=2 * g.count) for g in layer.gemms),
                    )
                )
                out.append(generator_step(layer))
            else:
                out.append(layer)
        out.append(Layer("bce", "loss", out_elems=1))
        return out

    def input_shape(self) -> tuple[int, ...]:
        return DATA_SHAPES[self.dataset]
