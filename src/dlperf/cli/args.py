"""Argument parsing shared by the subcommands: value types, lists, and the flags they share,
each declared once (``add_run_flags``: what to run; ``add_limits``, ``add_db``, ...).

A bad value becomes one line naming the flag (``argument --FLAG: ...``) and exit status 2:
argparse types raise ``ArgumentTypeError``, the rest raises ``UsageError``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from pydantic import ValidationError

from dlperf.core import store
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
def number_list(cast: type, *, at_least: float | None = None) -> Callable[[str], list[Any]]:
    """An argparse type: a comma-separated list of finite ints or floats, each at least
    ``at_least`` ('1,2,4'); repeats dropped, the order kept."""
    one = number(cast, at_least=at_least)
    kind = "integers" if cast is int else "numbers"

    def parse(text: str) -> list[Any]:
        items = [v.strip() for v in text.split(",") if v.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        try:
            for v in items:
                cast(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of "
                                             f"{kind}") from None
        return list(dict.fromkeys(one(v) for v in items))

    return parse


counts = number_list(int, at_least=1)  # threads, batch sizes, workers
nonneg_counts = number_list(int, at_least=0)  # loader workers, prefetch depths


def str_list(text: str | None) -> list[str] | None:
    return [v.strip() for v in text.split(",") if v.strip()] if text else None


def threads_list(text: str) -> list[int]:
    """'1,2,4', or 'auto': 1, 2, 4, ... one step past the CPUs."""
    if text == "auto":
        from dlperf.engine.config import auto_threads

        return auto_threads()
    return counts(text)


def batch_list(text: str) -> list[int] | str:
    """'16,32', or 'default' (the network's) or 'sweep' (DLBench's batch-size sweep)."""
    return text if text in ("default", "sweep") else counts(text)


def precision_list(text: str) -> list[str] | None:
    vals = str_list(text)
    for v in vals or ():
        if v not in PRECISIONS:
            raise argparse.ArgumentTypeError(f"unknown precision '{v}' (known: "
                                             f"{', '.join(PRECISIONS)})")
    return vals


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


# ----------------------------------------------------------------------------- what to run
PRECISION_HELP = ("fp32 (default; TF32 off), tf32 (GPU only), bf16 or fp16 (the framework's "
                  "mixed precision, fp16 with loss scaling)")
_GROUP = object()  # Take.default left out: the group's default for the flag


@dataclass(frozen=True)
class Take:
    """How a subcommand takes one flag of ``add_run_flags``: one value or a comma-separated
    list (``many``), its default (left out: the group's), whether it is required, its help
    (None: the group's); ``catalogue``: --device takes any catalogue device, not only this
    machine's cpu or gpu."""

    many: bool = False
    default: Any = _GROUP
    required: bool = False
    help: str | None = None
    catalogue: bool = False

    def pick(self, group_default: Any) -> Any:
        return group_default if self.default is _GROUP else self.default


REQUIRED = Take(required=True)
LIST = Take(many=True)


def add_run_flags(p: argparse._ActionsContainer, **takes: Take | bool) -> None:
    """What to run: the flags the measuring and predicting subcommands share, each declared
    here once. A keyword per flag the subcommand takes (network, size, framework, variant,
    device, precision, threads, batch_size, param, repeat, seed): True as the group has
    it, or a ``Take``. In list form --network, --framework, --variant and --device are
    spelled --networks, --frameworks, --variants, --devices (comma-separated names);
    --threads ('1,2,4' or 'auto'), --batch-size ('16,32', 'default' or 'sweep') and
    --precision keep their spelling. The values arrive parsed (ints, lists of them)."""
    unknown = set(takes) - set(_FLAGS)
    if unknown:
        raise TypeError(f"add_run_flags: no flag {sorted(unknown)}")
    for name, add in _FLAGS.items():
        take = takes.get(name, False)
        if take is not False:
            add(p, Take() if take is True else take)


def _network(p: argparse._ActionsContainer, t: Take) -> None:
    if t.many:
        p.add_argument("--networks", type=str_list, help=t.help or "comma-separated")
    else:
        p.add_argument("--network", "-n", required=t.required, default=t.pick(None),
                       help=t.help or "a network of 'dlperf networks'")


def _size(p: argparse._ActionsContainer, t: Take) -> None:
    p.add_argument("--size", default=t.pick(None), help=t.help or "network size (full, tiny; "
                   "small, large for the guide's families)")


def _framework(p: argparse._ActionsContainer, t: Take) -> None:
    if t.many:
        p.add_argument("--frameworks", type=str_list, help=t.help or "comma-separated "
                       "(default torch)")
    else:
        p.add_argument("--framework", "-f", default=t.pick("torch"), help=t.help or "torch "
                       "(default), tensorflow, jax, keras or mxnet")


def _variant(p: argparse._ActionsContainer, t: Take) -> None:
    if t.many:
        p.add_argument("--variants", type=str_list, help=t.help or "comma-separated, "
                       "'default' or 'all'")
    else:
        p.add_argument("--variant", default=t.pick(None), help=t.help or "e.g. eager|compile "
                       "(torch), graph|xla (tensorflow), jit (jax), hybrid|imperative (mxnet)")


def _device(p: argparse._ActionsContainer, t: Take) -> None:
    if t.many:
        p.add_argument("--devices", type=str_list, help=t.help or "cpu,gpu")
        return
    # this machine's cpu or gpu, or (predict, calc) any device of the catalogue
    kw: dict[str, Any] = ({} if t.catalogue else
                          {"choices": ("cpu", "gpu"), "default": t.pick("cpu")})
    p.add_argument("--device", "-d", required=t.required, **kw,
                   help=t.help or "cpu (default) or gpu")


def _precision(p: argparse._ActionsContainer, t: Take) -> None:
    kw: dict[str, Any] = ({"type": precision_list, "default": t.pick(None)} if t.many else
                          {"choices": PRECISIONS, "default": t.pick("fp32")})
    p.add_argument("--precision", **kw, help=t.help or (
        "comma-separated: " if t.many else "") + PRECISION_HELP)


def _threads(p: argparse._ActionsContainer, t: Take) -> None:
    p.add_argument("--threads", "-t", type=threads_list if t.many else positive_int,
                   default=t.pick(None if t.many else 1), help=t.help or (
                       "comma-separated or 'auto'" if t.many else "threads (default 1)"))


def _batch_size(p: argparse._ActionsContainer, t: Take) -> None:
    p.add_argument("--batch-size", "-b", type=batch_list if t.many else positive_int,
                   default=t.pick(None), help=t.help or (
                       "comma-separated, 'default' or 'sweep'" if t.many else
                       "default: the network's DLBench default"))


def _param(p: argparse._ActionsContainer, t: Take) -> None:
    p.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help=t.help or "network parameter (repeat the flag for several)")


def _repeat(p: argparse._ActionsContainer, t: Take) -> None:
    p.add_argument("--repeat", type=positive_int, default=t.pick(1),
                   help=t.help or "worker processes (default 1)")


def _seed(p: argparse._ActionsContainer, t: Take) -> None:
    p.add_argument("--seed", type=seed_int, default=t.pick(0), help=t.help or "random seed "
                   "(default 0)")


_FLAGS: dict[str, Callable[[argparse._ActionsContainer, Take], None]] = {
    "network": _network, "size": _size, "framework": _framework, "variant": _variant,
    "device": _device, "precision": _precision, "threads": _threads,
    "batch_size": _batch_size, "param": _param, "repeat": _repeat, "seed": _seed}


# ----------------------------------------------------------------------------- the rest
def existing_store(text: str) -> str:
    """A --db that a command only reads: a path with no store is a typo, not a new store
    (an empty one would make a report of nothing, silently, and leave a file behind)."""
    if store.names_no_store(text):
        raise argparse.ArgumentTypeError(f"no results store at {text} ('dlperf run', "
                                         "'sweep' and 'calibrate' make one)")
    return text


def add_db(p: argparse.ArgumentParser, reads_only: bool = False) -> None:
    """--db; ``reads_only``: the command only reads the store, which must then exist."""
    p.add_argument("--db", type=existing_store if reads_only else None,
                   help="results store (SQLite); default $DLPERF_DB or "
                   "~/.local/share/dlperf/results.db")


def add_json(p: argparse.ArgumentParser, help: str = "print the results as JSON") -> None:
    p.add_argument("--json", action="store_true", help=help)


def add_timing(p: argparse._ActionsContainer) -> None:
    p.add_argument("--min-time", type=positive_float, help="time the timed steps for at least "
                   "this many seconds (default 2; part of each result's identity, as are the "
                   "other timing settings)")
    p.add_argument("--min-steps", type=positive_int, help="at least this many timed steps "
                   "(default 5)")
    p.add_argument("--warmup-time", type=positive_float, help="warm-up budget in seconds "
                   "(default 30)")


def add_timeout(p: argparse._ActionsContainer, help: str = "seconds (above 0) per worker "
                "process before it is killed and recorded as a timeout (default 1800)") -> None:
    p.add_argument("--timeout", type=positive_float, help=help)


def add_memory_limit(p: argparse._ActionsContainer, help: str = "resident memory per worker, "
                     "e.g. 8GiB; over it the worker is killed and recorded as out of memory "
                     "(on a GPU: the device memory its framework may take)") -> None:
    p.add_argument("--memory-limit", help=help)


def add_limits(p: argparse.ArgumentParser) -> None:
    add_timeout(p)
    add_memory_limit(p)
    add_timing(p)


def add_sweep_flags(p: argparse._ActionsContainer, retry_failed: bool = True) -> None:
    p.add_argument("--force", action="store_true", help="re-measure what the store already has")
    if retry_failed:
        p.add_argument("--retry-failed", action="store_true", help="re-run stored failures")
    p.add_argument("--dry-run", action="store_true", help="list what would run, run nothing")


# ----------------------------------------------------------------------------- executor
def add_executor(p: argparse.ArgumentParser) -> None:
    """--executor and the Slurm flags (docs/cluster.md); a sweep file's [slurm] table
    holds the same settings, and these flags override its keys."""
    g = p.add_argument_group("where to run (docs/cluster.md)")
    g.add_argument("--executor", choices=("local", "slurm"), help="local: on this machine "
                   "(default); slurm: each group of configurations a Slurm job, the results "
                   "merged here as the jobs end")
    g.add_argument("--partitions", type=str_list, help="Slurm partitions, comma-separated: "
                   "the sweep runs on each (machines side by side); default the cluster's")
    g.add_argument("--constraint", help="sbatch --constraint (node features)")
    g.add_argument("--nodelist", help="sbatch --nodelist")
    g.add_argument("--slurm-time", help="each job's time limit, in Slurm's format (minutes, "
                   "H:MM:SS, D-HH:MM:SS)")
    g.add_argument("--cpus-per-task", type=positive_int, help="CPUs per job (default: the "
                   "job's thread count)")
    g.add_argument("--gpus", type=nonneg_int, help="GPUs per node (default: 1 for GPU runs)")
    g.add_argument("--account", help="sbatch --account")
    g.add_argument("--exclusive", action="store_true", default=None,
                   help="a node of its own for each job")
    g.add_argument("--slurm-dir", help="folder the jobs write their results to, on a file "
                   "system the nodes share (default: beside the store, <store>.slurm/)")
    g.add_argument("--slurm-poll", type=positive_float, help="seconds between two looks at "
                   "the jobs' states with squeue (default 5; longer spares a busy "
                   "controller, shorter notices an ended job sooner)")


#: the flag (argparse dest) that sets each SlurmSettings key
SLURM_FLAGS = {"partitions": "partitions", "constraint": "constraint", "nodelist": "nodelist",
               "time": "slurm_time", "cpus_per_task": "cpus_per_task", "gpus": "gpus",
               "account": "account", "exclusive": "exclusive", "folder": "slurm_dir",
               "poll_s": "slurm_poll"}


def slurm_values(a: argparse.Namespace) -> dict[str, Any]:
    """The Slurm settings the flags give (for a sweep file's [slurm] table to take)."""
    return {k: getattr(a, dest) for k, dest in SLURM_FLAGS.items()
            if getattr(a, dest, None) is not None}


def slurm_from(a: argparse.Namespace) -> Any:
    """The Slurm settings the flags give with ``--executor slurm``, else None (a Slurm
    flag without it is refused: it would do nothing). One line naming the flag on a bad
    value."""
    from dlperf.engine.slurm.settings import SlurmSettings

    given = slurm_values(a)
    if a.executor != "slurm":
        if given:
            raise UsageError(f"--{SLURM_FLAGS_SPELLING[next(iter(given))]} needs "
                             "--executor slurm")
        return None
    try:
        return SlurmSettings.model_validate(given)
    except ValidationError as e:
        err = e.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "slurm"
        flag = SLURM_FLAGS_SPELLING.get(key, key)
        raise UsageError(f"--{flag}: {err['msg'].removeprefix('Value error, ')}") from None


SLURM_FLAGS_SPELLING = {k: dest.replace("_", "-") for k, dest in SLURM_FLAGS.items()}
