"""How often ``dlperf compare`` cries wolf, and how often it finds a real slowdown, on
this machine, in one run.

Each trial measures one configuration in 3 x ``--processes`` fresh worker processes,
interleaved (A, A', B, A, A', B, ...) so that a drift of the machine touches every side
alike: A and A' are the same configuration (an A/A pair: any verdict but "no significant
change" is a false alarm), B runs with the test hook DLPERF_INJECT_SLOWDOWN (every step
made ``--slowdown`` slower: "slower" is a hit). Every trial is judged by both interval
methods on the same measurements.

    python benchmarks/bench_compare.py [--trials 20] [--processes 3] [--slowdown 0.10]
        [--network fcn5] [--batch-size 64] [--threads 1] [--min-time 1.0]

Targets (issue 36): false alarms at most 5% at the default level; at least 90% of the
10% slowdowns found.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dlperf import api  # noqa: E402
from dlperf.compare import stats  # noqa: E402
from dlperf.core.spec import Measurement, RunSpec  # noqa: E402
from dlperf.core.store import Store  # noqa: E402
from dlperf.core.timing import INJECT_VAR  # noqa: E402


def measure(spec: RunSpec, work: Path, slowdown: float) -> None:
    os.environ[INJECT_VAR] = str(slowdown) if slowdown else ""
    try:
        [r] = api.run_specs([spec], db=work, timeout_s=600)
    finally:
        os.environ.pop(INJECT_VAR, None)
    if not r.ok:
        raise SystemExit(f"{spec.label()} failed: {r.failure}")


def side(results, path: Path) -> str:
    with Store(path) as s:
        for r in results:
            s.add(r)
    return str(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--processes", type=int, default=stats.MIN_PROCESSES)
    ap.add_argument("--slowdown", type=float, default=0.10)
    ap.add_argument("--network", default="fcn5")
    ap.add_argument("--size", default="full")
    ap.add_argument("--framework", default="torch")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--level", type=float, default=0.95)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    work = tmp / "work.db"
    m = Measurement(min_time_s=a.min_time)
    print(f"{platform.node()}: {a.network} {a.framework} x{a.threads} b{a.batch_size}, "
          f"{a.trials} trials x 3 sides x {a.processes} processes, slowdown {a.slowdown:.0%}")
    alarms = {m_: 0 for m_ in stats.METHODS}
    hits = {m_: 0 for m_ in stats.METHODS}
    disturbed = 0  # trials where compare flagged a side as disturbed
    ratios = []
    t0 = time.time()
    index = 0
    for trial in range(a.trials):
        runs: dict[str, list] = {"A": [], "A2": [], "B": []}
        for _ in range(a.processes):
            for name in runs:
                spec = RunSpec(network=a.network, size=a.size, framework=a.framework,
                               threads=a.threads, batch_size=a.batch_size, measurement=m,
                               repeat=index)
                index += 1
                measure(spec, work, a.slowdown if name == "B" else 0.0)
                with Store(work) as s:
                    runs[name].append(next(r for r in s.results(kind="step")
                                           if r.spec.run_id == spec.run_id))
        paths = {n: side(rs, tmp / f"t{trial}-{n}.db") for n, rs in runs.items()}
        line = [f"trial {trial + 1:2d}"]
        for method in stats.METHODS:
            aa, _, _ = api.compare(paths["A"], paths["A2"], method=method, level=a.level)
            ab, _, _ = api.compare(paths["A"], paths["B"], method=method, level=a.level)
            (c_aa,), (c_ab,) = aa.comparisons, ab.comparisons
            alarms[method] += c_aa.verdict != "no significant change"
            hits[method] += c_ab.verdict == "slower"
            line.append(f"{method}: A/A {c_aa.interval.ratio:.3f} {c_aa.verdict}, "
                        f"A/B {c_ab.interval.ratio:.3f} {c_ab.verdict}")
            if method == "welch":
                ratios.append(c_ab.interval.ratio)
                flags = [part for c in (c_aa, c_ab) for w in (c.a.disturbed(), c.b.disturbed())
                         for part in (w or "").split("; ") if part and "injected" not in part]
                disturbed += bool(flags)
                if flags:
                    line.append(f"[disturbed: {flags[0]}]")
        print("  ".join(line), flush=True)
    n = a.trials
    print(f"\n{n} trials in {time.time() - t0:.0f} s; level {a.level:.0%}; "
          f"injected {a.slowdown:.0%}, measured B/A median {sorted(ratios)[n // 2]:.3f}")
    print(f"{'method':10s} {'false alarms (A/A)':>20s} {'found (A/B)':>14s}")
    for method in stats.METHODS:
        print(f"{method:10s} {alarms[method]:>8d}/{n} = {alarms[method] / n:5.0%} "
              f"{hits[method]:>6d}/{n} = {hits[method] / n:4.0%}")
    print(f"trials with a side flagged as disturbed: {disturbed}/{n}")
    print("targets: false alarms <= 5%, found >= 90%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
