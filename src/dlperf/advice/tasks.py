"""Tasks and the networks worth considering for each.

The candidates come from the two sources dlperf reproduces: the guide's network families
(its slides pair each family with the kind of data it suits: convolutional networks for
images, recurrent networks and LSTMs for sequences, auto-encoders, VAEs and GANs for
generation, feed-forward networks for simple data) and DLBench's networks (AlexNet and
ResNet-50 for images, LSTM language models for sequences, the fully connected FCN-5).
Each candidate says why it is one; none is ranked here: the numbers rank them.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlperf.core.errors import UsageError


@dataclass(frozen=True)
class Candidate:
    network: str  # a dlperf workload name
    why: str


@dataclass(frozen=True)
class Task:
    name: str
    description: str
    candidates: tuple[Candidate, ...]
    # the data size the report's advice section assumes (``dlperf advise`` takes yours)
    example_samples: int = 1_000_000
    example_epochs: float = 10
    example: str = "an example size: 1M samples, 10 epochs"


_GUIDE = "the guide's families"
_DLBENCH = "DLBench's networks"

TASKS: dict[str, Task] = {t.name: t for t in (
    Task("image-classification", "labelled images", (
        Candidate("resnet50", f"{_DLBENCH}: deep residual CNN, 224x224 images, 1000 classes"),
        Candidate("alexnet", f"{_DLBENCH}: shallower CNN at 224x224, fewer FLOPs per image"),
        Candidate("cnn", f"{_GUIDE}: deep convolutional network (here on 8x8 digits, far "
                  "smaller images than ImageNet's)"),
        Candidate("dbn", f"{_GUIDE}: deep belief network, pre-trained RBM by RBM, then "
                  "fine-tuned (on 8x8 digits)"),
    ), 1_200_000, 90, "ImageNet-1k's size: 1.2M images, 90 epochs"),
    Task("sequences", "text and other ordered data", (
        Candidate("lstm32", f"{_DLBENCH}: 2-layer LSTM language model, 32 steps"),
        Candidate("lstm64", f"{_DLBENCH}: the same over 64 steps"),
        Candidate("lstm", f"{_GUIDE}: LSTM classifier of sequences (digits read row by row)"),
        Candidate("rnn", f"{_GUIDE}: plain RNN, cheaper per step, shorter memory"),
    )),
    Task("generation", "generating or reconstructing samples", (
        Candidate("vae", f"{_GUIDE}: variational auto-encoder (encoder, sampler, decoder)"),
        Candidate("gan", f"{_GUIDE}: generator and discriminator trained in turn"),
        Candidate("deconv", f"{_GUIDE}: deconvolutional network (transposed convolutions)"),
    )),
    Task("simple-tabular", "fixed-length feature vectors", (
        Candidate("ffn", f"{_GUIDE}: feed-forward network with one hidden layer"),
        Candidate("autoencoder", f"{_GUIDE}: auto-encoder (features, anomaly scores)"),
        Candidate("fcn5", f"{_DLBENCH}: wide fully connected network (26752 inputs)"),
    )),
)}


def task(name: str) -> Task:
    """A task by name ('image-classification'; 'image_classification' too); one
    UsageError line for an unknown one."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    if key not in TASKS:
        raise UsageError(f"unknown task '{name}' (known: {', '.join(TASKS)})")
    return TASKS[key]
