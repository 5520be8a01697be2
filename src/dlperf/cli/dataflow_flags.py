"""The input-pipeline flags of ``dlperf run`` (and of ``dlperf dataflow``): argparse only.

    --input synthetic|memory|disk  --data-format jpeg|png|raw  --loader-workers N
    --prefetch N  --pin-memory  --cache warm|cold  --samples N  --sample-delay S
    --data-dir DIR

Every bad value is one line naming its flag (``UsageError``). Framework-free.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from dlperf import workloads
from dlperf.cli import args
from dlperf.core.errors import UsageError
from dlperf.inputs.options import DATA_FORMATS, INPUT_MODES, CacheState, InputOptions
from dlperf.kinds.dataflow.plan import resolve

CACHE_STATES: tuple[str, ...] = CacheState.__args__  # type: ignore[attr-defined]


def workers_or_auto(text: str) -> int | str:
    """--loader-workers of ``dlperf predict``: a count, or 'auto' (the smallest count the
    model finds stall-free)."""
    return "auto" if text.strip().lower() == "auto" else args.nonneg_int(text)


def add_input_flags(p: argparse.ArgumentParser, *, grid: bool = False,
                    auto: bool = False) -> None:
    """The input flags; with ``grid``, --loader-workers and --prefetch take lists; with
    ``auto``, --loader-workers also takes 'auto'."""
    g = p.add_argument_group("input pipeline (docs/dataflow.md)")
    g.add_argument("--input", choices=INPUT_MODES, help="synthetic (one batch made on the "
                   "device, as DLBench; the default of run), memory (a decoded data set in host "
                   "memory) or disk (files read every epoch; the default of the dataflow "
                   "commands)")
    g.add_argument("--data-format", choices=DATA_FORMATS, help="disk: jpeg or png files "
                   "(read and decoded; images only) or raw records (read only); default jpeg "
                   "for images, raw otherwise")
    if grid:
        g.add_argument("--loader-workers", type=args.nonneg_counts, default="0,1,2,4",
                       help="comma-separated loader process counts (default 0,1,2,4)")
        g.add_argument("--prefetch", type=args.nonneg_counts, default="0,2",
                       help="comma-separated prefetch depths in batches (default 0,2)")
    else:
        g.add_argument("--loader-workers", type=workers_or_auto if auto else args.nonneg_int,
                       help="loader processes (default 0: load in the training process)"
                       + ("; auto: the smallest count that removes the stall" if auto else ""))
        g.add_argument("--prefetch", type=args.nonneg_int, help="batches prepared ahead "
                       "(default 0)")
    g.add_argument("--autotune", action="store_true", default=None,
                   help="tf.data: AUTOTUNE the parallel map and the prefetch depth")
    g.add_argument("--pin-memory", action="store_true", default=None,
                   help="page-locked host batches (for a GPU)")
    g.add_argument("--cache", choices=CACHE_STATES, help="cold: evict the data set's files "
                   "from the page cache before the run and every epoch (default warm)")
    g.add_argument("--samples", type=args.positive_int, help="samples in the generated data set "
                   "(default 512)")
    g.add_argument("--sample-delay", type=args.nonneg_float, metavar="SECONDS", help="an added wait "
                   "per sample in the loader: a what-if for a slower source")
    g.add_argument("--data-dir", help="folder of the generated data sets (default "
                   "$DLPERF_DATA_DIR or ~/.cache/dlperf/data)")


def use_data_dir(a: argparse.Namespace) -> None:
    """Apply --data-dir: this process and its workers generate and read data sets there."""
    d = getattr(a, "data_dir", None)
    if not d:
        return
    path = Path(d).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(f"--data-dir: {d} is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--data-dir: cannot create {d}: {e.strerror}") from None
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise UsageError(f"--data-dir: {d} is not readable and writable")
    os.environ["DLPERF_DATA_DIR"] = str(path.resolve())


def given(a: argparse.Namespace, **override: Any) -> dict[str, Any]:
    """The input flags that were given (plus ``override``), by InputOptions field."""
    dests = {"input": "input", "data_format": "data_format", "loader_workers": "loader_workers",
             "prefetch": "prefetch", "autotune": "autotune", "pin_memory": "pin_memory",
             "cache": "cache",
             "samples": "samples", "sample_delay_s": "sample_delay"}
    vals = {f: getattr(a, d) for f, d in dests.items() if getattr(a, d, None) is not None}
    return {**vals, **override}


def input_for_run(a: argparse.Namespace, params: dict[str, Any], batch_size: int | None
                  ) -> tuple[InputOptions | None, list[str]]:
    """The input pipeline ``dlperf run``'s flags ask for (None: synthetic data, as
    before), with notes on what was decided; applies --data-dir."""
    from dlperf.engine.config import parse_bytes

    use_data_dir(a)
    values = given(a)
    if values in ({}, {"input": "synthetic"}):
        return None, []
    if getattr(a, "mode", "train") != "train":
        raise UsageError(f"--input and the other input-pipeline flags apply to --mode train, "
                         f"not --mode {a.mode}")
    batch = batch_size or workloads.get(a.network).default_batch
    limit = parse_bytes(a.memory_limit) if a.memory_limit else None
    return resolve(values, a.network, a.size, params, batch, limit)
