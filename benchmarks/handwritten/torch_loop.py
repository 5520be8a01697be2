"""A minimal hand-written PyTorch training loop for fcn5 and alexnet, written the way a user
would write it, with no dlperf code. The benchmarks time it beside dlperf's measurement of
the same network, so that dlperf's number is shown to measure the framework, not itself.

    python benchmarks/handwritten/torch_loop.py --network fcn5 --threads 1 --batch-size 64 \
        --steps 10 --warmup 3
prints one JSON line: {"framework": "torch", "median_s": ..., "steps": [...]}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--network", choices=["fcn5", "alexnet"], required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: a.threads])

    import torch
    from torch import nn

    torch.set_num_threads(a.threads)
    if a.network == "fcn5":
        b = a.batch_size or 64
        model = nn.Sequential(
            nn.Linear(26752, 2048), nn.Sigmoid(),
            nn.Linear(2048, 2048), nn.Sigmoid(),
            nn.Linear(2048, 2048), nn.Sigmoid(),
            nn.Linear(2048, 26752),
        )
        x, y = torch.randn(b, 26752), torch.randint(0, 26752, (b,))
    else:
        b = a.batch_size or 16
        model = nn.Sequential(
            nn.Conv2d(3, 96, 11, 4, 4), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
            nn.Conv2d(96, 256, 5, 1, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
            nn.Conv2d(256, 384, 3, 1, 1), nn.ReLU(),
            nn.Conv2d(384, 384, 3, 1, 1), nn.ReLU(),
            nn.Conv2d(384, 256, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
            nn.Flatten(),
            nn.Linear(256 * 7 * 7, 4096), nn.ReLU(),
            nn.Linear(4096, 4096), nn.ReLU(),
            nn.Linear(4096, 1000),
        )
        x, y = torch.randn(b, 3, 224, 224), torch.randint(0, 1000, (b,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"framework": "torch", "network": a.network, "batch_size": b,
                      "median_s": statistics.median(times), "mean_s": statistics.fmean(times),
                      "steps": times}))


if __name__ == "__main__":
    main()
