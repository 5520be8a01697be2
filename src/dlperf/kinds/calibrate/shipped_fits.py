"""Write the reference curves that catalogue GPUs are scaled from (``perfmodel.scaled``):
one GPU's calibration of every framework and precision it holds (PyTorch's at least, for
the frameworks that have none of their own), read from a store that holds it (the GPU's
own machine, or a copy of its store), with a source line naming the GPU, the software and
the date.

    dlperf calibrate --device gpu --frameworks torch,jax --precision fp32   # and tf32, ...
    python -m dlperf.kinds.calibrate.shipped_fits --db gpu.db --entry h200 \\
        --out src/dlperf/perfmodel/data/reference_fits.json

A user's own GPU the same way, into a file of their own (``--entry``: the catalogue entry
of that GPU, or one of their devices file); ``DLPERF_REFERENCE_FITS=that-file dlperf
predict -d h100-sxm ...`` then scales the catalogue's GPUs from it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from dlperf.core.errors import UsageError
from dlperf.core.spec import RunResult
from dlperf.core.store import Store
from dlperf.kinds.calibrate import plan
from dlperf.perfmodel import catalogue
from dlperf.perfmodel.fit import fit_local
from dlperf.perfmodel.scaled import ReferenceFits


def _software(rows: list[RunResult]) -> str:
    """Each framework's version (from its newest row) and the CUDA stack's."""
    newest: dict[str, RunResult] = {}
    for r in rows:
        newest[r.spec.framework] = r
    parts = [f"{k} {sw[k]}" for r in newest.values() for sw in (r.software,)
             for k in (r.spec.framework, "jaxlib") if sw.get(k)]
    sw = rows[-1].software
    parts += [f"{k} {sw[k]}" for k in ("cuda", "cudnn") if sw.get(k)]
    return ", ".join(dict.fromkeys(parts)) or "software not recorded"


def reference_fits(store: Store, entry: str, machine_id: str | None = None) -> ReferenceFits:
    """The newest GPU calibration of ``machine_id`` (the only machine with one when None)
    of each framework and precision, fitted, as the catalogue's ``entry`` measured.
    PyTorch's must be among them: it stands in for a framework the file lacks."""
    catalogue.device(entry)  # a bad name: one line
    rows = store.results(kind="kernel", status="ok", device="gpu", machine_id=machine_id)
    rows = [r for r in rows if r.spec.network == "kernels"]
    machines = {r.machine_id for r in rows if r.spec.framework == "torch"}
    if len(machines) != 1:
        raise UsageError(f"the store holds PyTorch GPU calibrations of {len(machines)} "
                         "machines; name one (--machine)")
    (mid,) = machines
    rows = [r for r in rows if r.machine_id == mid]
    stored = plan.load(store, device="gpu", machine_id=mid, any_version=True)
    stored.sort(key=lambda s: (s.framework != "torch", s.framework))  # PyTorch's first
    fits = tuple(fit_local(s.samples, s.framework, s.threads, s.device, s.precision)
                 for s in stored)
    rows.sort(key=lambda r: r.finished_at or 0)
    gpu = rows[-1].software.get("gpu") or entry
    day = time.strftime("%Y-%m-%d", time.gmtime(rows[-1].finished_at or 0))
    timed = [x for s in stored for x in s.samples.items if not x.op.startswith("dispatch")]
    clock = ("the device's own clock" if all(x.clock == "device" for x in timed)
             else "the wall clock (queued calls)")
    frameworks = list(dict.fromkeys(f.framework for f in fits))
    each = "; ".join(f"{fw} at {', '.join(f.precision for f in fits if f.framework == fw)}"
                     for fw in frameworks)
    source = (f"dlperf calibrate --device gpu --frameworks {','.join(frameworks)} ({each}) "
              f"on one {gpu} ({_software(rows)}), {day}; {sum(f.samples for f in fits)} "
              f"kernel samples, timed on {clock}")
    return ReferenceFits(device=entry, source=source, fits=fits)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dlperf.kinds.calibrate.shipped_fits",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--db", required=True, help="the store holding the GPU's calibration")
    p.add_argument("--entry", required=True, help="the GPU's catalogue entry, e.g. h200")
    p.add_argument("--machine", help="its machine id, when the store holds several")
    p.add_argument("--out", required=True, type=Path)
    a = p.parse_args(argv)
    try:
        with Store(a.db) as store:
            ref = reference_fits(store, a.entry, a.machine)
    except UsageError as e:
        p.exit(2, f"{p.prog}: error: {e}\n")
    a.out.write_text(ref.model_dump_json(indent=None) + "\n")
    print(f"{a.out}: {len(ref.fits)} curves ({ref.source})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
