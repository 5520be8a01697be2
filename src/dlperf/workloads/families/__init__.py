"""The guide's network families, framework-neutral: shapes, parameter counts, FLOPs.

Every family trains on real data that works offline (``dataset``: one of
``dlperf.workloads.real_data.LOADERS``, or ``trees``, the generated expression trees below), and its
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

from dlperf.workloads.base import Workload
from dlperf.workloads.families.autoencoders import AutoencoderConfig, DeconvConfig, deconv
from dlperf.workloads.families.classifiers import (
    CNNConfig,
    FFNConfig,
    RecursiveConfig,
    RNNConfig,
)
from dlperf.workloads.families.common import ACTIVATIONS, CLASSES, DATA_SHAPES, init_scale_value
from dlperf.workloads.families.generative import (
    DBNConfig,
    GANConfig,
    RBMConfig,
    VAEConfig,
    rbm_layers,
)
from dlperf.workloads.families.trees import (
    PackedTrees,
    expression_trees,
    pack_trees,
    random_tree,
)

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
            ("hidden", "depth", "activation", "dataset", "widths", "side"),
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
            ("hidden", "depth", "k", "phase", "dataset"),
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
            ("width", "depth", "hidden", "side"),
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


__all__ = ["ACTIVATIONS", "CLASSES", "DATA_SHAPES", "FAMILIES", "AutoencoderConfig", "CNNConfig",
           "DBNConfig", "DeconvConfig", "FFNConfig", "GANConfig", "PackedTrees", "RBMConfig",
           "RNNConfig", "RecursiveConfig", "VAEConfig", "deconv", "expression_trees",
           "init_scale_value", "pack_trees", "random_tree", "rbm_layers"]
