"""A plain, hand-written Keras 3 training loop: the yardstick for dlperf's keras backend.

    python benchmarks/handwritten/keras_loop.py --variant torch|jax|tensorflow \\
        --network fcn5|alexnet --threads N --batch-size B --steps S --warmup W

The variant is the Keras backend (KERAS_BACKEND). One model definition in Keras layers,
``model.compile`` with plain SGD (lr 0.01) and sparse softmax cross-entropy on the logits,
then ``model.train_on_batch`` on a batch already on the device, written the way a Keras
user writes it; only the layer sizes come from dlperf (``dlperf.workloads``). Prints one
JSON line with the time of every timed step (``train_on_batch`` returns the loss as a
Python number, so it has waited for the step).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time


def set_threads(backend: str, threads: int) -> None:
    """Pin to the first N CPUs and size the backend's thread pools, as a user would."""
    cpus = sorted(os.sched_getaffinity(0))[:threads]
    os.sched_setaffinity(0, cpus)
    n = str(threads)
    os.environ.update(OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, TF_NUM_INTRAOP_THREADS=n,
                      TF_NUM_INTEROP_THREADS="1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if backend == "jax":
        os.environ["NPROC"] = n  # XLA:CPU sizes its pool from it, once, at start-up
    os.environ["KERAS_BACKEND"] = backend  # read once, when Keras is imported
    if backend == "torch":
        import torch

        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
    elif backend == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", choices=("torch", "jax", "tensorflow"), required=True)
    p.add_argument("--network", choices=("fcn5", "alexnet"), required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    set_threads(args.variant, args.threads)

    import keras
    import numpy as np

    from dlperf.workloads import get

    cfg = get(args.network).config("full")
    keras.utils.set_random_seed(0)

    def uniform(fan_in):  # U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as dlperf initialises
        b = 1.0 / math.sqrt(fan_in)
        return keras.initializers.RandomUniform(-b, b)

    layers = keras.layers
    if args.network == "fcn5":
        widths = (cfg.inputs, *cfg.hidden)
        model = keras.Sequential(
            [keras.Input((cfg.inputs,))]
            + [layers.Dense(w, activation="sigmoid", kernel_initializer=uniform(a))
               for a, w in zip(widths[:-1], widths[1:], strict=True)]
            + [layers.Dense(cfg.classes, kernel_initializer=uniform(widths[-1]))]
        )
        x_shape = (args.batch_size, cfg.inputs)
    else:
        # AlexNet, PyTorch-style symmetric padding: 11x11/4 pad 4, max-pools 3x3/2 pad 1
        c1, c2, c3, c4, c5 = (c.out for c in cfg.convs)
        model = keras.Sequential([
            keras.Input((cfg.image, cfg.image, 3)),
            layers.ZeroPadding2D(4),
            layers.Conv2D(c1, 11, 4, activation="relu", kernel_initializer=uniform(11 * 11 * 3)),
            layers.ZeroPadding2D(1),
            layers.MaxPooling2D(3, 2),
            layers.Conv2D(c2, 5, padding="same", activation="relu",
                          kernel_initializer=uniform(5 * 5 * c1)),
            layers.ZeroPadding2D(1),
            layers.MaxPooling2D(3, 2),
            layers.Conv2D(c3, 3, padding="same", activation="relu",
                          kernel_initializer=uniform(3 * 3 * c2)),
            layers.Conv2D(c4, 3, padding="same", activation="relu",
                          kernel_initializer=uniform(3 * 3 * c3)),
            layers.Conv2D(c5, 3, padding="same", activation="relu",
                          kernel_initializer=uniform(3 * 3 * c4)),
            layers.ZeroPadding2D(1),
            layers.MaxPooling2D(3, 2),
            layers.Flatten(),
            layers.Dense(cfg.fc[0], activation="relu",
                         kernel_initializer=uniform(c5 * cfg.feature_side() ** 2)),
            layers.Dense(cfg.fc[1], activation="relu", kernel_initializer=uniform(cfg.fc[0])),
            layers.Dense(cfg.classes, kernel_initializer=uniform(cfg.fc[1])),
        ])
        x_shape = (args.batch_size, cfg.image, cfg.image, 3)

    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x = keras.ops.convert_to_tensor(rng.standard_normal(x_shape, dtype=np.float32))
    y = keras.ops.convert_to_tensor(rng.integers(0, cfg.classes, args.batch_size), "int32")

    for _ in range(args.warmup):
        model.train_on_batch(x, y)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = model.train_on_batch(x, y)
        times.append(time.perf_counter() - t0)

    print(json.dumps({
        "framework": "keras",
        "variant": args.variant,
        "network": args.network,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "median_s": statistics.median(times),
        "mean_s": statistics.fmean(times),
        "steps": times,
        "loss": float(loss),
    }))


if __name__ == "__main__":
    main()
