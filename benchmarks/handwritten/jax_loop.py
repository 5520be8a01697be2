"""A hand-written JAX training loop: the baseline dlperf's JAX backend is checked against.

    python benchmarks/handwritten/jax_loop.py --network fcn5|alexnet --threads N \\
        --batch-size B --steps S --warmup W

Plain Flax + Optax, written the way a user would write it: the same model, loss, SGD and
synthetic data as dlperf's backend, but none of its code (only the layer sizes come from
``dlperf.workloads``). Prints one JSON line with every timed step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def pin(threads: int) -> None:
    """Pin to the first N CPUs and size XLA's thread pool, before JAX is imported."""
    cpus = sorted(os.sched_getaffinity(0))[:threads]
    os.sched_setaffinity(0, cpus)
    # what the dlperf launcher sets for a JAX worker; XLA:CPU sizes its pool from NPROC
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NPROC"):
        os.environ[var] = str(threads)
    if threads == 1:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--network", choices=("fcn5", "alexnet"), required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--size", default="full", help="dlperf workload size (full or tiny)")
    args = p.parse_args(argv)
    pin(args.threads)

    import math
    from functools import partial

    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax

    from dlperf.workloads import get

    cfg = get(args.network).config(args.size)

    def fan_in_uniform(key, shape, dtype=jnp.float32):
        # U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as PyTorch initialises Linear and Conv2d
        bound = 1.0 / math.sqrt(math.prod(shape[:-1]))
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    class FCN(nn.Module):
        @nn.compact
        def __call__(self, x):
            widths = (*cfg.hidden, cfg.classes)
            for i, w in enumerate(widths):
                x = nn.Dense(w, kernel_init=fan_in_uniform)(x)
                if i < len(widths) - 1:
                    x = nn.sigmoid(x)
            return x

    class AlexNet(nn.Module):
        @nn.compact
        def __call__(self, x):
            for c in cfg.convs:
                x = nn.Conv(c.out, (c.kernel, c.kernel), c.stride, [(c.pad, c.pad)] * 2,
                            kernel_init=fan_in_uniform)(x)
                x = nn.relu(x)
                if c.pool_after:
                    x = nn.max_pool(x, (3, 3), (2, 2), ((1, 1), (1, 1)))
            x = x.reshape(x.shape[0], -1)
            for w in cfg.fc:
                x = nn.relu(nn.Dense(w, kernel_init=fan_in_uniform)(x))
            return nn.Dense(cfg.classes, kernel_init=fan_in_uniform)(x)

    if args.network == "fcn5":
        model, x_shape = FCN(), (args.batch_size, cfg.inputs)
    else:
        model, x_shape = AlexNet(), (args.batch_size, cfg.image, cfg.image, cfg.channels_in)

    kp, kx, ky = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(kx, x_shape)
    y = jax.random.randint(ky, (args.batch_size,), 0, cfg.classes)
    params = jax.jit(model.init)(kp, x)["params"]
    tx = optax.sgd(0.01)
    opt_state = tx.init(params)

    def loss_fn(params, x, y):
        logits = model.apply({"params": params}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @partial(jax.jit, donate_argnums=(0, 1))
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    for _ in range(args.warmup):
        params, opt_state, loss = train_step(params, opt_state, x, y)
        jax.block_until_ready((params, opt_state, loss))
    times = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        params, opt_state, loss = train_step(params, opt_state, x, y)
        jax.block_until_ready((params, opt_state, loss))
        times.append(time.perf_counter() - t0)
    # as dlperf's cpu_util: process CPU time / wall time over the timed steps
    cpu_util = (time.process_time() - cpu0) / (time.perf_counter() - wall0)

    print(json.dumps({
        "framework": "jax",
        "network": args.network,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "median_s": statistics.median(times),
        "mean_s": statistics.fmean(times),
        "steps": times,
        "cpu_util": cpu_util,
        "loss": float(loss),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
