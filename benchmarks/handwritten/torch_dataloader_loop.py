"""A hand-written PyTorch training loop over a DataLoader of JPEG files, timing its own
``next()`` calls, written the way a user would, with no dlperf code. The data-flow
benchmark runs it on the same files and DataLoader settings as dlperf's measurement and
compares the share of each step spent waiting for data.

    python benchmarks/handwritten/torch_dataloader_loop.py --data DIR --batch-size 16 \
        --workers 0 --prefetch 0 --delay 0.02 --steps 6 --warmup 3
prints one JSON line: {"stall_share": ..., "median_s": ..., "stall_s": [...], "steps": [...]}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="folder of 00000.jpg ... and labels.npy")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--delay", type=float, default=0.0, help="seconds of extra work per sample")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    every_cpu = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, every_cpu[: a.threads])  # training on its threads' CPUs

    import numpy as np
    import torch
    from PIL import Image
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    torch.set_num_threads(a.threads)
    folder = Path(a.data)
    files = sorted(folder.glob("*.jpg"))
    labels = np.load(folder / "labels.npy")

    class Jpegs(Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            img = np.asarray(Image.open(files[i]).convert("RGB"))
            if i % 2:
                img = img[:, ::-1]
            x = (img.transpose(2, 0, 1).astype(np.float32) / 255.0 - 0.5) / 0.25
            if a.delay:
                time.sleep(a.delay)
            return torch.from_numpy(x), int(labels[i])

    def loader_init(_):  # the loader processes may use every CPU
        os.sched_setaffinity(0, every_cpu)

    kw = {}
    if a.workers:
        kw = dict(prefetch_factor=max(1, a.prefetch), persistent_workers=True,
                  worker_init_fn=loader_init)
    data = DataLoader(Jpegs(), batch_size=a.batch_size, shuffle=True, drop_last=True,
                      num_workers=a.workers, generator=torch.Generator().manual_seed(0), **kw)
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
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    def batches():
        while True:  # epoch after epoch
            yield from data

    it = batches()
    waits, steps = [], []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        x, y = next(it)
        t1 = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        t2 = time.perf_counter()
        if i >= a.warmup:
            waits.append(t1 - t0)
            steps.append(t2 - t0)
    print(json.dumps({"stall_share": sum(waits) / sum(steps), "median_s": statistics.median(steps),
                      "stall_s": waits, "steps": steps}))
    os._exit(0)  # the loader processes end with us


if __name__ == "__main__":
    main()
