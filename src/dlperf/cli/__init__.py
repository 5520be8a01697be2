"""The ``dlperf`` command: parsing and printing only; the work lives in ``dlperf.api``.

One module per subcommand (or pair of close ones), each with ``add(subparsers)`` that adds
its parser and sets its handler; ``COMMANDS`` lists them in ``--help`` order: adding a
subcommand is one module and one line here.

Every bad input ends with one line on stderr, ``dlperf: error: ...``, and exit status 2.
Ctrl-C ends with status 130 after saying how many results were stored.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

from dlperf import __version__
from dlperf.cli import (
    advise,
    calc,
    calibrate,
    compare,
    dataflow,
    env,
    experiment,
    explain,
    import_,
    networks,
    parallel,
    predict,
    report,
    run,
    setup,
    status,
    sweep,
    train,
    validate,
)
from dlperf.cli.args import Parser
from dlperf.core.errors import StoreWriteError, UsageError
from dlperf.engine.runner import Interrupted

#: every subcommand module, in the order ``dlperf --help`` lists them
COMMANDS = (run, sweep, status, report, import_, compare, networks, env, train, experiment,
            parallel, dataflow,
            predict, calibrate, validate, explain, advise, calc, setup)


def build_parser() -> Parser:
    ap = Parser(prog="dlperf", description="Measure, explain and predict how fast neural "
                "networks train.")
    ap.add_argument("--version", action="version", version=f"dlperf {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS:
        command.add(sub)
    return ap


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM (a kill, a 'timeout' command, a closing session) takes the Ctrl-C path: the
    # workers are killed and the run in flight is stored as interrupted
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminate)
    try:
        a = build_parser().parse_args(argv)
        if not getattr(a, "command", None):
            build_parser().print_help()
            return 2
        return a.func(a)
    except UsageError as e:
        # plain print: one line however wide the terminal
        print(f"dlperf: error: {e}", file=sys.stderr)
        return 2
    except StoreWriteError as e:
        print(f"dlperf: error: {e}", file=sys.stderr)
        return 1
    except Interrupted as e:
        flight = (f"; {e.in_flight.spec.label()} was stored as interrupted"
                  if e.in_flight else "")
        print(f"dlperf: interrupted; {e.saved} results stored{flight}. Run the same command "
              "again to continue where it stopped.", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("dlperf: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # 'dlperf ... | head': the reader left; say nothing more (stdout is gone)
        _silence_stdout()
        return 0
    except Exception as e:  # a defect of dlperf: one line, the traceback on request
        if os.environ.get("DLPERF_DEBUG"):
            raise
        print(f"dlperf: internal error: {type(e).__name__}: {e} (run with DLPERF_DEBUG=1 "
              "for the traceback)", file=sys.stderr)
        return 1


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush does
    not raise again (the recipe of Python's signal documentation)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


__all__ = ["COMMANDS", "build_parser", "main"]
