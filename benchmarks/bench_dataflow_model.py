"""The input-pipeline model against this machine: steps measured on each framework's input
pipeline (loader workers x prefetch depth x threads, and a slow source by
--sample-delay where the worker count matters), the kernels and the loaders calibrated in
the same store, then the predicted stall share beside the measured one (points), the
time per mini-batch, and the smallest stall-free loader-worker count beside the one the
runs show.

    python benchmarks/bench_dataflow_model.py --db bench-dataflow.db
    python benchmarks/bench_dataflow_model.py --db bench-dataflow.db --no-measure

Everything goes through the store, so a second run resumes where the first stopped.
Targets (issue 32; docs/dataflow.md): stall share within 5 points at the median; the
smallest stall-free worker count within one of the measured. Nothing is asserted: the
figures are the result. The loaders' calibration runs (8-sample batches of a 64-sample
data set, no workers) are never among the runs compared.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dlperf import api  # noqa: E402
from dlperf.cli.validate_dataflow import summary_line  # noqa: E402
from dlperf.core.spec import Measurement, RunSpec  # noqa: E402
from dlperf.core.store import Store  # noqa: E402
from dlperf.kinds.calibrate.plan import local_calibration  # noqa: E402
from dlperf.kinds.calibrate.validate import measured  # noqa: E402
from dlperf.kinds.dataflow import validate as dv  # noqa: E402
from dlperf.kinds.dataflow.plan import on_pipeline, resolve  # noqa: E402

#: more processes for a floor (synthetic data) whose cores other work took
RETRIES = 2
MEASUREMENT = Measurement(min_time_s=2.0, min_steps=5, warmup_max_steps=6,
                          warmup_max_time_s=15.0)
#: (network, batch, framework, threads, input settings, loader workers, prefetch depths):
#: each framework's loader in the loop, ahead in a thread, in workers; a 2-thread step
#: whose cores the workers take; png's heavier decoding; a source slower than the step
#: (an added wait per sample), where the worker count decides the stall
GRID = [
    ("alexnet", 16, "torch", 1, {}, (0, 1, 2), (0, 2)),
    ("alexnet", 16, "torch", 2, {}, (0, 1, 2), (0, 2)),
    ("alexnet", 16, "torch", 2, {"data_format": "png"}, (0, 1), (0,)),
    ("alexnet", 16, "torch", 1, {"sample_delay_s": 0.08}, (0, 1, 2, 3), (2,)),
    ("alexnet", 16, "tensorflow", 1, {}, (0, 2), (0, 2)),
    ("alexnet", 16, "tensorflow", 1, {"sample_delay_s": 0.08}, (0, 1, 2, 3), (2,)),
    ("alexnet", 16, "jax", 1, {}, (0, 2), (0, 2)),
    ("alexnet", 16, "jax", 1, {"sample_delay_s": 0.08}, (0, 1, 2, 3), (2,)),
    ("fcn5", 64, "torch", 1, {}, (0, 1), (0, 2)),
    ("lstm32", 128, "torch", 1, {}, (0, 1), (0, 2)),
]


def specs(frameworks: list[str]) -> list[RunSpec]:
    out = []
    for net, batch, fw, threads, extra, workers, prefetch in GRID:
        if fw not in frameworks:
            continue
        base = RunSpec(network=net, framework=fw, threads=threads, batch_size=batch,
                       measurement=MEASUREMENT)
        if base.run_id not in {s.run_id for s in out}:  # the floor: synthetic data
            out.append(base)
        for w in workers:
            for p in prefetch:
                opts, _ = resolve({"input": "disk", **extra, "loader_workers": w,
                                   "prefetch": p}, net, None, None, batch)
                out.append(on_pipeline(base, opts))
    return out


def measure(db: str, frameworks: list[str]) -> None:
    t0 = time.monotonic()
    print("calibrating the kernels at 1 and 2 threads ...", flush=True)
    api.calibrate(frameworks, [1, 2], db=db)
    print(f"  {time.monotonic() - t0:.0f} s; calibrating the loaders ...", flush=True)
    t1 = time.monotonic()
    api.calibrate_dataflow(frameworks, ["alexnet", "fcn5", "lstm32"], db=db)
    print(f"  {time.monotonic() - t1:.0f} s", flush=True)
    todo = specs(frameworks)
    print(f"measuring {len(todo)} steps (on input pipelines, and their floors on "
          "synthetic data) ...", flush=True)
    t2 = time.monotonic()
    api.run_specs(todo, db=db, timeout_s=600.0)
    for _ in range(RETRIES):  # a floor whose cores were taken: another process
        with Store(db) as store:
            again = [r.spec.model_copy(update={"repeat": len(r.results)})
                     for s in todo if s.options == type(s.options)()
                     and (r := measured(store, s)) is not None and dv.floor_s(r) is None]
        if not again:
            break
        print(f"  measuring again {len(again)} floors whose cores were taken", flush=True)
        api.run_specs(again, db=db, timeout_s=600.0)
    print(f"  {time.monotonic() - t2:.0f} s", flush=True)


def report(db: str, frameworks: list[str]) -> None:
    with Store(db) as store:
        cases, skipped = dv.cases(store, local_calibration(store), frameworks=frameworks)
    if not cases:
        print(f"nothing to compare ({len(skipped)} left out"
              + (f": {skipped[0][1]}" if skipped else "") + ")")
        return
    print(f"\n{'configuration':58} {'stall meas.':>11} {'pred.':>7} {'points':>7} "
          f"{'on floor':>8} {'points':>7} {'time err':>8}")
    for c in sorted(cases, key=lambda c: c.row.spec.label()):
        fl = (f"{c.on_floor.stall_share:8.1%} {c.floor_points:+7.1f}" if c.on_floor
              else f"{'-':>8} {'-':>7}")
        print(f"{c.row.spec.label():58} {c.measured_share:11.1%} "
              f"{c.prediction.input.stall_share:7.1%} {c.points:+7.1f} {fl} {c.error:+8.0%}")
    counts = dv.worker_counts(cases)
    if counts:
        print("\nsmallest stall-free loader-worker count (measured / predicted):")
        for w in counts:
            shares = ", ".join(f"w{k} {v:.0%}" for k, v in sorted(w.measured.items()))
            print(f"  {w.label}: {w.smallest_measured} / {w.predicted}   ({shares})")
    by_fw: dict[str, list] = {}
    for c in cases:
        by_fw.setdefault(c.row.spec.framework, []).append(c)
    print()
    for fw, cs in sorted(by_fw.items()):
        s = dv.summarize(cs, [])
        print(f"  {fw:10} n={s['n']:2}  stall points median {s['median_abs_points']:.1f}, "
              f"p90 {s['p90_abs_points']:.1f}; time median |error| "
              f"{s['median_abs_time_error']:.1%}")
    print(summary_line(dv.summarize(cases, counts)))
    if skipped:
        print(f"left out: {len(skipped)} ({skipped[0][1]})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default="bench-dataflow.db")
    ap.add_argument("--frameworks", default="torch,tensorflow,jax")
    ap.add_argument("--no-measure", action="store_true", help="only read the store")
    a = ap.parse_args()
    frameworks = a.frameworks.split(",")
    if not a.no_measure:
        measure(a.db, frameworks)
    report(a.db, frameworks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
