"""A plain, hand-written MXNet Gluon training loop: the yardstick for dlperf's MXNet backend.

    python benchmarks/handwritten/mxnet_loop.py --network fcn5|alexnet --threads N \\
        --batch-size B --steps S --warmup W [--variant hybrid|imperative]

Run it with the MXNet environment's interpreter (``dlperf setup mxnet``), with dlperf's
``src`` on PYTHONPATH: only the layer sizes come from dlperf (``dlperf.workloads``). The
same network, initialisation and plain SGD (lr 0.01) as dlperf's backend, written the way
the Gluon tutorials write them: ``SoftmaxCrossEntropyLoss`` per sample, ``backward()`` on
it and ``trainer.step(batch_size)``, the network (not the loss) hybridized. Prints one
JSON line with the time of every timed step (the step, then ``nd.waitall()``, which waits
for the update too).
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
    p.add_argument("--variant", choices=("hybrid", "imperative"), default="hybrid")
    args = p.parse_args()

    # Threads before MXNet loads: pin to the first N CPUs; OpenMP teams of N, one engine
    # thread for CPU operators.
    cpus = sorted(os.sched_getaffinity(0))[: args.threads]
    os.sched_setaffinity(0, cpus)
    n = str(args.threads)
    os.environ.update(OMP_NUM_THREADS=n, MXNET_OMP_MAX_THREADS=n, MXNET_CPU_WORKER_NTHREADS="1")

    import mxnet as mx
    from mxnet import autograd, gluon, nd
    from mxnet.gluon import nn

    from dlperf.workloads import get

    cfg = get(args.network).config("full")
    mx.random.seed(0)

    def uniform(fan_in):  # U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as dlperf initialises
        return mx.init.Uniform(1.0 / math.sqrt(fan_in))

    net = nn.HybridSequential()
    if args.network == "fcn5":
        widths = (cfg.inputs, *cfg.hidden)
        for a, w in zip(widths[:-1], widths[1:], strict=True):
            net.add(nn.Dense(w, activation="sigmoid", in_units=a, weight_initializer=uniform(a)))
        net.add(nn.Dense(cfg.classes, in_units=widths[-1], weight_initializer=uniform(widths[-1])))
        x = nd.random.normal(shape=(args.batch_size, cfg.inputs))
    else:
        # AlexNet as DLBench's code defines it: 11x11/4 pad 4, max-pools 3x3/2 pad 1
        c1, c2, c3, c4, c5 = (c.out for c in cfg.convs)
        side = cfg.feature_side()
        net.add(
            nn.Conv2D(c1, 11, 4, 4, in_channels=3, activation="relu",
                      weight_initializer=uniform(11 * 11 * 3)),
            nn.MaxPool2D(3, 2, 1),
            nn.Conv2D(c2, 5, 1, 2, in_channels=c1, activation="relu",
                      weight_initializer=uniform(5 * 5 * c1)),
            nn.MaxPool2D(3, 2, 1),
            nn.Conv2D(c3, 3, 1, 1, in_channels=c2, activation="relu",
                      weight_initializer=uniform(3 * 3 * c2)),
            nn.Conv2D(c4, 3, 1, 1, in_channels=c3, activation="relu",
                      weight_initializer=uniform(3 * 3 * c3)),
            nn.Conv2D(c5, 3, 1, 1, in_channels=c4, activation="relu",
                      weight_initializer=uniform(3 * 3 * c4)),
            nn.MaxPool2D(3, 2, 1),
            nn.Flatten(),
            nn.Dense(cfg.fc[0], activation="relu", in_units=c5 * side * side,
                     weight_initializer=uniform(c5 * side * side)),
            nn.Dense(cfg.fc[1], activation="relu", in_units=cfg.fc[0],
                     weight_initializer=uniform(cfg.fc[0])),
            nn.Dense(cfg.classes, in_units=cfg.fc[1], weight_initializer=uniform(cfg.fc[1])),
        )
        x = nd.random.normal(shape=(args.batch_size, 3, cfg.image, cfg.image))
    y = nd.random.randint(0, cfg.classes, (args.batch_size,)).astype("float32")
    net.initialize(ctx=mx.cpu())
    if args.variant == "hybrid":
        net.hybridize(static_alloc=True, static_shape=True)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01})

    def train_step():
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(args.batch_size)  # the gradient of the mean loss

    for _ in range(args.warmup):
        train_step()
        nd.waitall()
    steps = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        train_step()
        nd.waitall()  # wait for the step, the update included
        steps.append(time.perf_counter() - t0)

    print(json.dumps({
        "framework": "mxnet",
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
