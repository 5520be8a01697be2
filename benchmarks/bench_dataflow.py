"""Data flow: three of dlperf's figures against independent measures, side by side in one
run (targets in brackets).

1. stall share: dlperf's share of each step spent waiting for data, against a
   hand-written PyTorch loop timing its own next() calls over the same files and
   DataLoader settings (benchmarks/handwritten/torch_dataloader_loop.py) [0.95 .. 1.05].
   AlexNet at batch 16, 1 thread, JPEGs loaded in the training loop (0 workers), with
   --delay seconds of extra work per sample (a heavy augmentation) so that the stall is
   a good part of the step.
2. the floor: with a loader worker and prefetching, the disk pipeline's time per
   mini-batch against the synthetic-data time of AlexNet at 1 thread, a compute-bound
   network [0.95 .. 1.05].
3. storage: the built-in direct reader's cold bandwidth against fio's on the same file,
   sequential and random [0.9 .. 1.1] (skipped without fio).

Each pair runs back to back, alternating which goes first (ABBA), and the ratio is the
median of the per-round ratios, so the drift of a shared machine cancels within a pair.

    python benchmarks/bench_dataflow.py [--rounds 3] [--min-time 8] [--delay 0.02]
        [--only stall,floor,storage] [--file-size 512MiB] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from dlperf import workloads
from dlperf.core.spec import Measurement, RunSpec
from dlperf.engine.config import parse_bytes
from dlperf.engine.launch import run_isolated
from dlperf.engine.launch.isolated import SRC_DIR
from dlperf.inputs import datasets
from dlperf.inputs.options import InputOptions
from dlperf.kinds.dataflow import storage
from dlperf.kinds.dataflow.analysis import dataflow_of

HERE = Path(__file__).resolve().parent


def measurement(min_time: float) -> Measurement:
    return Measurement(min_time_s=min_time, min_steps=5, warmup_max_steps=6)


def step_spec(opts: InputOptions, min_time: float, batch: int = 16) -> RunSpec:
    return RunSpec(network="alexnet", batch_size=batch, threads=1,
                   measurement=measurement(min_time), options=opts.to_options())


def dlperf_step(spec: RunSpec):
    r = run_isolated(spec, timeout_s=1800)
    if not r.ok:
        raise SystemExit(f"dlperf run failed: {r.failure}")
    return r


def handwritten(data: Path, delay: float, steps: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, str(HERE / "handwritten" / "torch_dataloader_loop.py"),
                        "--data", str(data), "--batch-size", "16", "--workers", "0",
                        "--delay", str(delay), "--steps", str(steps), "--warmup", "3"],
                       capture_output=True, text=True, check=True, env=env)
    return json.loads(p.stdout.strip().splitlines()[-1])


def report(name: str, ours: list[float], theirs: list[float], lo: float, hi: float,
           unit: str = "") -> bool:
    ratios = [o / t for o, t in zip(ours, theirs, strict=True)]
    ratio = statistics.median(ratios)
    ok = lo <= ratio <= hi
    print(f"{name:34} dlperf {statistics.median(ours):.4g}{unit}  independent "
          f"{statistics.median(theirs):.4g}{unit}  ratio {ratio:.3f} [{lo}..{hi}] "
          f"{'PASS' if ok else 'FAIL'}   (rounds: {', '.join(f'{r:.3f}' for r in ratios)})",
          flush=True)
    return ok


def bench_stall(a: argparse.Namespace) -> bool:
    opts = InputOptions(input="disk", data_format="jpeg", sample_delay_s=a.delay)
    spec = step_spec(opts, a.min_time)
    cfg = workloads.resolve("alexnet", None, None)[2]
    data = datasets.ensure(datasets.for_network(cfg, opts.samples, "jpeg"))
    ours, theirs = [], []
    for i in range(a.rounds):
        if i % 2 == 0:
            d = dataflow_of(dlperf_step(spec)).stall_share
        h = handwritten(data, a.delay, steps=6)["stall_share"]
        if i % 2 == 1:
            d = dataflow_of(dlperf_step(spec)).stall_share
        ours.append(d)
        theirs.append(h)
    return report(f"stall share (alexnet, +{a.delay * 1e3:g} ms/sample)", ours, theirs,
                  0.95, 1.05)


def bench_floor(a: argparse.Namespace) -> bool:
    synthetic = step_spec(InputOptions(), a.min_time)
    disk = step_spec(InputOptions(input="disk", loader_workers=1, prefetch=2), a.min_time)
    ours, theirs = [], []
    for i in range(a.rounds):
        first, second = (disk, synthetic) if i % 2 == 0 else (synthetic, disk)
        t = {s.config_id: dlperf_step(s).metrics.median_s for s in (first, second)}
        ours.append(t[disk.config_id])
        theirs.append(t[synthetic.config_id])
    return report("disk w1 p2 / synthetic (alexnet)", ours, theirs, 0.95, 1.05, " s")


def bench_storage(a: argparse.Namespace) -> bool:
    exe = shutil.which("fio")
    if exe is None:
        print("storage: fio is not installed (apt-get install fio): skipped")
        return True
    path = storage.test_file(Path(a.dir), parse_bytes(a.file_size))
    try:
        seq_o, seq_t, rnd_o, rnd_t = [], [], [], []
        for i in range(a.rounds):
            runs = [lambda: storage.direct_read(path), lambda: storage.fio_read(exe, path)]
            if i % 2:
                runs.reverse()
            res = [f() for f in runs]
            ours, fio = (res[0], res[1]) if i % 2 == 0 else (res[1], res[0])
            seq_o.append(ours.sequential.bytes_per_s / 1e6)
            seq_t.append(fio.sequential.bytes_per_s / 1e6)
            rnd_o.append(ours.random.bytes_per_s / 1e6)
            rnd_t.append(fio.random.bytes_per_s / 1e6)
        print(f"  ({ours.method}; {fio.tool}, {fio.method}; {path.stat().st_size >> 20} MiB)")
        ok = report("storage sequential, direct / fio", seq_o, seq_t, 0.9, 1.1, " MB/s")
        return report("storage random, direct / fio", rnd_o, rnd_t, 0.9, 1.1, " MB/s") and ok
    finally:
        path.unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=8.0)
    ap.add_argument("--delay", type=float, default=0.02)
    ap.add_argument("--only", default="stall,floor,storage")
    ap.add_argument("--file-size", default="512MiB")
    ap.add_argument("--dir", default=str(Path.home()))
    a = ap.parse_args()
    os.environ["PYTHONPATH"] = SRC_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")
    benches = {"stall": bench_stall, "floor": bench_floor, "storage": bench_storage}
    results = [benches[name](a) for name in a.only.split(",")]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
