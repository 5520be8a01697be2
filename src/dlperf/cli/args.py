"""Argument parsing shared by the subcommands: value types, lists, flag groups.

A bad value becomes one line naming the flag (``argument --FLAG: ...``) and exit status 2:
argparse types raise ``ArgumentTypeError``, the rest raises ``UsageError``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from pydantic import ValidationError

from dlperf.core.errors import UsageError
from dlperf.core.spec import PRECISIONS, Measurement


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, status 2 (argparse prints usage too)
        raise UsageError(f"{message} (see '{self.prog} --help')")


# ----------------------------------------------------------------------------- numbers
def _number(text: str, cast: Callable[[str], Any], kind: str) -> Any:
    try:
        v = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not {kind}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"'{text}' is not a finite number")
    return v


def number(cast: type, *, above: float | None = None, at_least: float | None = None,
           below: float | None = None) -> Callable[[str], Any]:
    """An argparse type: a finite int or float, optionally above / at least / below a bound
    (one factory for counts, seconds, sizes and seeds)."""
    kind = "an integer" if cast is int else "a number"

    def fmt(b: float) -> str:
        return str(int(b)) if float(b).is_integer() else f"{b:g}"

    def parse(text: str) -> Any:
        v = _number(text, cast, kind)
        if above is not None and v <= above:
            raise argparse.ArgumentTypeError(f"must be above {fmt(above)}, got '{text}'")
        if at_least is not None and v < at_least:
            what = "0 or more" if at_least == 0 else f"at least {fmt(at_least)}"
            raise argparse.ArgumentTypeError(f"must be {what}, got '{text}'")
        if below is not None and v >= below:
            raise argparse.ArgumentTypeError(f"must be below {fmt(below)}, got '{text}'")
        return v

    return parse


positive_float = number(float, above=0)  # seconds, rates, budgets
nonneg_float = number(float, at_least=0)
positive_int = number(int, at_least=1)  # counts: threads, steps, processes
nonneg_int = number(int, at_least=0)
#: a random seed every framework accepts (NumPy's legacy seed is below 2**32)
seed_int = number(int, at_least=0, below=2**31)
#: the peak kernel's size: matmul side, conv batch x 64
peak_size = number(int, at_least=16)


# ----------------------------------------------------------------------------- lists
def _number_list(text: str, what: str, cast: Callable[[str], Any], kind: str) -> list[Any]:
    try:
        vals = [cast(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{what}: '{text}' is not a comma-separated list of {kind}") from None
    if not vals:
        raise UsageError(f"{what}: empty list")
    return vals


def int_list(text: str, what: str) -> list[int]:
    return _number_list(text, what, int, "integers")


def float_list(text: str, what: str) -> list[float]:
    return _number_list(text, what, float, "numbers")


def str_list(text: str | None) -> list[str] | None:
    return [v.strip() for v in text.split(",") if v.strip()] if text else None


def parse_params(items: Sequence[str] | None, flag: str = "--param") -> dict[str, Any]:
    """--param hidden=512 --param init_scale=0.1 -> {'hidden': 512, 'init_scale': 0.1}"""
    params: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} expects NAME=VALUE, got '{item}'")
        params[key.strip()] = scalar(value.strip(), f"{flag} {key.strip()}")
    return params


def scalar(v: str, what: str = "value") -> int | float | bool | str:
    """'true' -> True, '3' -> 3, '0.5' -> 0.5, else the text."""
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    for cast in (int, float):
        try:
            x = cast(v)
        except ValueError:
            continue
        if not math.isfinite(x):  # 'nan', 'inf': no network or option takes them
            raise UsageError(f"{what}: '{v}' is not a finite number")
        return x
    return v


def threads_arg(text: str) -> list[int]:
    if text == "auto":
        from dlperf.engine.config import auto_threads

        return auto_threads()
    vals = int_list(text, "--threads")
    if any(v < 1 for v in vals):
        raise UsageError(f"--threads: thread counts must be at least 1, got '{text}'")
    return vals


def precision_arg(text: str | None) -> list[str] | None:
    vals = str_list(text)
    for v in vals or ():
        if v not in PRECISIONS:
            raise UsageError(f"--precision: unknown precision '{v}' (known: {', '.join(PRECISIONS)})")
    return vals


def batch_arg(text: str | None) -> list[int] | str | None:
    if text in (None, "default", "sweep"):
        return text
    vals = int_list(text, "--batch-size")
    if any(v < 1 for v in vals):
        raise UsageError(f"--batch-size: batch sizes must be at least 1, got '{text}'")
    return vals


# ----------------------------------------------------------------------------- timing
#: The flag (argparse dest, spelling) that sets each Measurement field.
MEASUREMENT_FLAGS = {"min_time_s": ("min_time", "--min-time"),
                     "min_steps": ("min_steps", "--min-steps"),
                     "warmup_max_time_s": ("warmup_time", "--warmup-time")}


def measurement_from(a: argparse.Namespace, base: Measurement | None = None) -> Measurement:
    """``base`` (default: Measurement()) with the timing flags that were given, validated
    as a whole (e.g. --min-steps above max_steps is refused); errors name the flags."""
    upd = {field: getattr(a, dest) for field, (dest, _) in MEASUREMENT_FLAGS.items()
           if getattr(a, dest, None) is not None}
    try:
        return Measurement.model_validate({**(base or Measurement()).model_dump(), **upd})
    except ValidationError as e:
        err = e.errors()[0]
        field = err["loc"][0] if err["loc"] else None
        flags = ([MEASUREMENT_FLAGS[field][1]] if field in MEASUREMENT_FLAGS
                 else [MEASUREMENT_FLAGS[f][1] for f in upd]) or ["the measurement settings"]
        raise UsageError(f"{'/'.join(flags)}: {err['msg'].removeprefix('Value error, ')}") from None


# ----------------------------------------------------------------------------- flag groups
PRECISION_HELP = ("fp32 (default; TF32 off), tf32 (GPU only), bf16 or fp16 (the framework's "
                  "mixed precision, fp16 with loss scaling)")


def add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="results store (SQLite); default $DLPERF_DB or "
                                "~/.local/share/dlperf/results.db")


def add_timing(p: argparse._ActionsContainer) -> None:
    p.add_argument("--min-time", type=positive_float, help="time the timed steps for at least "
                   "this many seconds (default 2; part of each result's identity, as are the "
                   "other timing settings)")
    p.add_argument("--min-steps", type=positive_int, help="at least this many timed steps "
                   "(default 5)")
    p.add_argument("--warmup-time", type=positive_float, help="warm-up budget in seconds "
                   "(default 30)")


def add_limits(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=positive_float, help="seconds (above 0) per worker process "
                   "before it is killed and recorded as a timeout (default 1800)")
    p.add_argument("--memory-limit", help="resident memory per worker, e.g. 8GiB; over it the "
                   "worker is killed and recorded as out of memory")
    add_timing(p)


def add_sweep_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="re-measure what the store already has")
    p.add_argument("--retry-failed", action="store_true", help="re-run stored failures")
    p.add_argument("--dry-run", action="store_true", help="list what would run, run nothing")
