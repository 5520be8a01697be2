"""The guide's network families, framework-neutral: shapes, parameter counts, FLOPs.

Every family trains on real data that works offline (``dataset``: one of
``dlperf.data.LOADERS``, or ``trees``, the generated expression trees below), and its
synthetic data for time per mini-batch has exactly the same shapes. Sizes ``small`` and
``large`` differ in width and depth, never in the input, so both sizes train on the same
data; ``tiny`` is for tests.

Parameters a user may set (``--param NAME=VALUE``) are fields of the configs:
``hidden`` (hidden nodes per layer, or the code size of an auto-encoder), ``depth``
(hidden layers), ``init_scale`` ("default": the framework's own initialisation; a
number s: weights ~ N(0, s^2), biases 0), ``k`` (Gibbs steps of CD-k), and a few
family-specific ones.

FLOPs follow ``dlperf.workloads.base``: matmuls and convolutions only, 2 per multiply-add.
Where a family's step is not one forward and one backward pass (RBM, DBN pre-training,
GAN), extra pseudo-layers without parameters carry the extra products, so that
``batch x sum(layer.train_flops())`` is the step's exact matmul count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dlperf.workloads.base import Layer, Workload, conv, dense

#: The shape of one example of each data set, as ``dlperf.data`` delivers it.
DATA_SHAPES: dict[str, tuple[int, ...]] = {
    "digits": (1, 8, 8),
    "digits-seq": (8, 8),
    "mnist1d": (40, 1),
    "trees": (),
}
CLASSES = 10
ACTIVATIONS = ("relu", "sigmoid", "tanh")


def _check(cfg, *, datasets: tuple[str, ...], positive: tuple[str, ...]) -> None:
    """Raise ValueError (a UsageError at resolve time) for a field out of range."""
    if cfg.dataset not in datasets:
        raise ValueError(f"dataset must be one of {', '.join(datasets)}, got '{cfg.dataset}'")
    for name in positive:
        v = getattr(cfg, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    act = getattr(cfg, "activation", "relu")
    if act not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got '{act}'")
    init_scale_value(cfg.init_scale)


def init_scale_value(v: float | int | str | None) -> float | None:
    """None for the framework default ("default"), else the standard deviation s > 0."""
    if v is None or v == "default":
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0 or math.isinf(v):
        raise ValueError(f"init_scale must be 'default' or a positive number, got {v!r}")
    return float(v)


def _flat(dataset: str) -> int:
    return math.prod(DATA_SHAPES[dataset])


def _stack(name: str, widths: tuple[int, ...], *, first: bool, act: str) -> list[Layer]:
    """Dense layers through ``widths`` with an activation after each."""
    out: list[Layer] = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        out.append(dense(f"{name}{i + 1}", a, b, first=first and i == 0))
        out.append(Layer(f"{name}_{act}{i + 1}", "act", out_elems=b))
    return out


def _gstep(layer: Layer) -> Layer:
    """The extra pass of a layer that the generator's update goes through (GAN): one more
    forward and one input gradient, no weight gradient (the layer is held fixed)."""
    return Layer(f"{layer.name}_gstep", layer.op, fwd_flops=layer.fwd_flops, input_grad=True)


# ----------------------------------------------------------------------------- classifiers
@dataclass(frozen=True)
class FFNConfig:
    """Feed-forward classifier: flattened input -> ``depth`` hidden layers of ``hidden``
    nodes -> 10 classes, softmax cross-entropy. ``depth=1`` is the guide's shallow net."""

    hidden: int = 128
    depth: int = 1
    activation: str = "relu"
    init_scale: float | str = "default"
    dataset: str = "digits"

    @property
    def inputs(self) -> int:
        return _flat(self.dataset)

    def layers(self) -> list[Layer]:
        _check(self, datasets=("digits", "digits-seq", "mnist1d"), positive=("hidden", "depth"))
        widths = (self.inputs, *(self.hidden,) * self.depth)
        out = _stack("fc", widths, first=True, act=self.activation)
        out.append(dense(f"fc{self.depth + 1}", self.hidden, CLASSES))
        out.append(Layer("softmax_xent", "loss", out_elems=CLASSES))
        return out

    def input_shape(self) -> tuple[int, ...]:
        return DATA_SHAPES[self.dataset]


@dataclass(frozen=True)
class CNNConfig:
    """Deep convolutional classifier for 8x8 digits: ``depth`` 3x3 convolutions (padding 1,
    ReLU), channels ``width * 2**(i // 2)``, a 2x2 max-pool after every second one while
    the map is larger than 1x1, then a dense layer of ``hidden`` and the classes."""

    width: int = 16
    depth: int = 4
    hidden: int = 64
    init_scale: float | str = "default"
    dataset: str = "digits"

    def plan(self) -> list[tuple[int, int, bool]]:
        """(channels, side after the conv, pooled after it) for each convolution."""
        side, out = DATA_SHAPES[self.dataset][1], []
        for i in range(self.depth):
            pool = i % 2 == 1 and side >= 2
            out.append((self.width * 2 ** (i // 2), side, pool))
            side = side // 2 if pool else side
        return out

    def layers(self) -> list[Layer]:
        _check(self, datasets=("digits",), positive=("width", "depth", "hidden"))
        out: list[Layer] = []
        c_in, side = DATA_SHAPES[self.dataset][0], 0
        for i, (c, side, pool) in enumerate(self.plan()):
            out.append(conv(f"conv{i + 1}", c_in, c, 3, side, first=i == 0))
            out.append(Layer(f"relu{i + 1}", "act", out_elems=c * side * side))
            if pool:
                side //= 2
                out.append(Layer(f"pool{i + 1}", "pool", out_elems=c * side * side))
            c_in = c
        out.append(dense("fc1", c_in * side * side, self.hidden))
        out.append(Layer("fc_relu1", "act", out_elems=self.hidden))
        out.append(dense("fc2", self.hidden, CLASSES))
        out.append(Layer("softmax_xent", "loss", out_elems=CLASSES))
        return out

    def input_shape(self) -> tuple[int, ...]:
        return DATA_SHAPES[self.dataset]


@dataclass(frozen=True)
class RNNConfig:
    """Sequence classifier: ``depth`` stacked recurrent layers (``cell`` 'rnn': tanh
    Elman units; 'lstm'), the last step's hidden state -> 10 classes. PyTorch's two bias
    vectors per gate are both counted (they are both trained)."""

    cell: str = "rnn"
    hidden: int = 64
    depth: int = 1
    init_scale: float | str = "default"
    dataset: str = "digits-seq"

    def layers(self) -> list[Layer]:
        _check(self, datasets=("digits-seq", "mnist1d"), positive=("hidden", "depth"))
        if self.cell not in ("rnn", "lstm"):
            raise ValueError(f"cell must be rnn or lstm, got '{self.cell}'")
        t, n_in = DATA_SHAPES[self.dataset]
        g = (4 if self.cell == "lstm" else 1) * self.hidden  # gate rows
        out: list[Layer] = []
        for i in range(self.depth):
            h2h = 2 * g * self.hidden
            # input gradient: into the layer below (not into data) and into h_{t-1}
            # for t >= 1 (no gradient flows into the zero initial state)
            dgrad = (t * 2 * g * n_in if i > 0 else 0) + (t - 1) * h2h
            out.append(
                Layer(
                    f"{self.cell}{i + 1}",
                    self.cell,
                    params=g * (n_in + self.hidden) + 2 * g,
                    fwd_flops=t * 2 * g * (n_in + self.hidden),
                    out_elems=t * self.hidden,
                    dgrad_flops=dgrad,
                )
            )
            n_in = self.hidden
        out.append(dense("fc", self.hidden, CLASSES))
        out.append(Layer("softmax_xent", "loss", out_elems=CLASSES))
        return out

    def input_shape(self) -> tuple[int, ...]:
        return DATA_SHAPES[self.dataset]


@dataclass(frozen=True)
class RecursiveConfig:
    """Recursive network (Socher et al., 2011) over binary expression trees: leaf digits
    and operators are embedded; one composition cell h = tanh(W [h_left; h_right] + b +
    e_op) is applied bottom-up; the root's state -> the expression's value, a digit.
    Every tree has exactly ``leaves`` leaves, in a random shape (see ``random_tree``)."""

    hidden: int = 64
    leaves: int = 6
    ops: int = 2  # 1: max; 2: max, min; 3: max, min, sum mod 10 (ListOps-like)
    init_scale: float | str = "default"
    dataset: str = "trees"

    def layers(self) -> list[Layer]:
        _check(self, datasets=("trees",), positive=("hidden", "leaves", "ops"))
        if self.leaves < 2 or self.ops > 3:
            raise ValueError("need leaves >= 2 and ops in 1..3")
        h, n = self.hidden, self.leaves - 1  # n compositions per tree
        compose = dense("compose", 2 * h, h)
        return [
            Layer("leaf_embedding", "embedding", params=10 * h, out_elems=self.leaves * h),
            Layer("op_embedding", "embedding", params=self.ops * h, out_elems=n * h),
            Layer(
                "compose",
                "dense",
                params=compose.params,
                fwd_flops=n * compose.fwd_flops,
                out_elems=n * h,
            ),
            dense("fc", h, CLASSES),
            Layer("softmax_xent", "loss", out_elems=CLASSES),
        ]

    def input_shape(self) -> tuple[int, ...]:
        return ()


# ----------------------------------------------------------------------------- auto-encoders
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
        n = _flat(self.dataset)
        enc = (n, *(self.width,) * (self.depth - 1), self.hidden)
        return enc + enc[-2::-1]

    def layers(self) -> list[Layer]:
        _check(self, datasets=("digits",), positive=("hidden", "depth", "width"))
        w = self.widths()
        out = _stack("enc", w[: self.depth + 1], first=True, act=self.activation)
        dec = _stack("dec", w[self.depth :], first=False, act=self.activation)
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
        _check(self, datasets=("digits",), positive=("code", "width"))
        if self.width < 2:
            raise ValueError("width must be at least 2")
        c, w = DATA_SHAPES[self.dataset][0], self.width
        return [
            dense("enc", _flat(self.dataset), self.code, first=True),
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
    )


# ----------------------------------------------------------------------------- generative
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
        return _flat(self.dataset)

    def layers(self) -> list[Layer]:
        _check(self, datasets=("digits",), positive=("hidden", "k"))
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
        return (_flat(self.dataset), *(self.hidden,) * self.depth)

    def layers(self) -> list[Layer]:
        _check(self, datasets=("digits",), positive=("hidden", "depth", "k"))
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
        _check(self, datasets=("digits",), positive=("hidden", "latent", "depth"))
        n, h, z = _flat(self.dataset), self.hidden, self.latent
        out = _stack("enc", (n, *(h,) * self.depth), first=True, act="relu")
        out.append(dense("enc_gauss", h, 2 * z))
        out.append(Layer("sampler", "sample", out_elems=z))
        out += _stack("dec", (z, *(h,) * self.depth), first=False, act="relu")
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
        n, h = _flat(self.dataset), self.hidden
        out = _stack("g", (self.latent, *(h,) * self.depth), first=True, act="relu")
        out.append(dense("g_out", h, n))
        out.append(Layer("g_sigmoid", "act", out_elems=n))
        return out

    def discriminator_layers(self) -> list[Layer]:
        n, h = _flat(self.dataset), self.hidden
        out = _stack("d", (n, *(h,) * self.depth), first=True, act="lrelu")
        out.append(dense("d_out", h, 1))
        return out

    def layers(self) -> list[Layer]:
        _check(self, datasets=("digits",), positive=("latent", "hidden", "depth"))
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
                    )
                )
                out.append(_gstep(layer))
            else:
                out.append(layer)
        out.append(Layer("bce", "loss", out_elems=1))
        return out

    def input_shape(self) -> tuple[int, ...]:
        return DATA_SHAPES[self.dataset]


# ----------------------------------------------------------------------------- trees
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


# ----------------------------------------------------------------------------- registry
_SWEEP = (16, 32, 64, 128, 256)


def _family(
    name: str, description: str, sizes: dict, task: str, tunable: tuple[str, ...], batch: int = 32
) -> Workload:
    return Workload(
        name=name,
        family=name,
        description=description,
        sizes=sizes,
        default_size="small",
        default_batch=batch,
        batch_sweep=_SWEEP,
        task=task,
        group="guide",
        tunable=(*tunable, "init_scale"),
    )


FAMILIES: dict[str, Workload] = {
    w.name: w
    for w in (
        _family(
            "ffn",
            "feed-forward net, one hidden layer (shallow); digits 8x8",
            {
                "tiny": FFNConfig(hidden=8),
                "small": FFNConfig(hidden=128),
                "large": FFNConfig(hidden=4096),
            },
            "classification",
            ("hidden", "depth", "activation", "dataset"),
        ),
        _family(
            "autoencoder",
            "auto-encoder, code smaller than the input; digits",
            {
                "tiny": AutoencoderConfig(hidden=4, width=8),
                "small": AutoencoderConfig(),
                "large": AutoencoderConfig(hidden=32, depth=3, width=2048),
            },
            "reconstruction",
            ("hidden", "depth", "width", "activation"),
        ),
        _family(
            "rbm",
            "restricted Boltzmann machine, CD-k; digits",
            {
                "tiny": RBMConfig(hidden=8),
                "small": RBMConfig(hidden=64),
                "large": RBMConfig(hidden=2048),
            },
            "density",
            ("hidden", "k"),
        ),
        _family(
            "dbn",
            "deep belief net: greedy RBM pre-training, gentle backprop; digits",
            {
                "tiny": DBNConfig(hidden=8, depth=2),
                "small": DBNConfig(hidden=128, depth=2),
                "large": DBNConfig(hidden=1024, depth=3),
            },
            "classification",
            ("hidden", "depth", "k", "phase"),
        ),
        _family(
            "vae",
            "variational auto-encoder, Bernoulli pixels; digits",
            {
                "tiny": VAEConfig(hidden=8, latent=2),
                "small": VAEConfig(),
                "large": VAEConfig(hidden=1024, latent=32, depth=2),
            },
            "density",
            ("hidden", "latent", "depth"),
        ),
        _family(
            "gan",
            "GAN, dense; 1 mini-batch = 1 D + 1 G update; digits",
            {
                "tiny": GANConfig(latent=4, hidden=8),
                "small": GANConfig(),
                "large": GANConfig(latent=64, hidden=1024, depth=2),
            },
            "generation",
            ("latent", "hidden", "depth"),
        ),
        _family(
            "rnn",
            "plain (tanh) RNN classifier; digit rows as 8 steps",
            {
                "tiny": RNNConfig(hidden=8),
                "small": RNNConfig(hidden=64),
                "large": RNNConfig(hidden=512, depth=2),
            },
            "classification",
            ("hidden", "depth", "dataset"),
        ),
        _family(
            "lstm",
            "LSTM classifier; digit rows as 8 steps",
            {
                "tiny": RNNConfig("lstm", hidden=8),
                "small": RNNConfig("lstm", hidden=64),
                "large": RNNConfig("lstm", hidden=512, depth=2),
            },
            "classification",
            ("hidden", "depth", "dataset"),
        ),
        _family(
            "cnn",
            "deep convolutional classifier; digits 8x8",
            {
                "tiny": CNNConfig(width=2, depth=2, hidden=8),
                "small": CNNConfig(),
                "large": CNNConfig(width=64, depth=6, hidden=512),
            },
            "classification",
            ("width", "depth", "hidden"),
        ),
        _family(
            "deconv",
            "deconvolutional net: code -> transposed convs -> 8x8 image",
            {
                "tiny": DeconvConfig(code=4, width=4),
                "small": DeconvConfig(),
                "large": DeconvConfig(code=32, width=512),
            },
            "reconstruction",
            ("code", "width"),
        ),
        _family(
            "recursive",
            "recursive net over expression trees (max/min), value",
            {
                "tiny": RecursiveConfig(hidden=8, leaves=3),
                "small": RecursiveConfig(),
                "large": RecursiveConfig(hidden=512, leaves=12),
            },
            "classification",
            ("hidden", "leaves", "ops"),
        ),
    )
}
