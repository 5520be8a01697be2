"""A plain, hand-written TensorFlow 2 / Keras 3 training loop: the yardstick for dlperf's
TensorFlow backend.

    python benchmarks/handwritten/tf_loop.py --network fcn5|alexnet --threads N \\
        --batch-size B --steps S --warmup W [--variant graph|xla]

The same network, initialisation, loss (mean softmax cross-entropy), plain SGD (lr 0.01)
and synthetic data as dlperf's backend, written the way a user would write them. Only the
layer sizes come from dlperf (``dlperf.workloads``). Prints one JSON line with the time of
every timed step (train step + fetching the loss, which waits for the step).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--network", choices=("fcn5", "alexnet"), required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--variant", choices=("graph", "xla"), default="graph")
    args = p.parse_args()

    # Threads before TensorFlow loads: pin to the first N CPUs, size its pools.
    cpus = sorted(os.sched_getaffinity(0))[: args.threads]
    os.sched_setaffinity(0, cpus)
    n = str(args.threads)
    os.environ.update(OMP_NUM_THREADS=n, TF_NUM_INTRAOP_THREADS=n, TF_NUM_INTEROP_THREADS="1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ["KERAS_BACKEND"] = "tensorflow"

    import keras
    import tensorflow as tf

    from dlperf.workloads import get

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)

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
        x = tf.random.normal((args.batch_size, cfg.inputs))
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
        x = tf.random.normal((args.batch_size, cfg.image, cfg.image, 3))
    y = tf.random.uniform((args.batch_size,), 0, cfg.classes, dtype=tf.int32)

    optimizer = keras.optimizers.SGD(learning_rate=0.01)

    @tf.function(jit_compile=args.variant == "xla")
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            )
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    for _ in range(args.warmup):
        train_step(x, y).numpy()
    steps = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = train_step(x, y)
        loss.numpy()  # wait for the step
        steps.append(time.perf_counter() - t0)

    print(json.dumps({
        "framework": "tensorflow",
        "network": args.network,
        "variant": args.variant,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "median_s": statistics.median(steps),
        "mean_s": statistics.fmean(steps),
        "steps": steps,
    }))


if __name__ == "__main__":
    main()
