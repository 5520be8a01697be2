"""``dlperf setup mxnet``: create the environment of a framework that cannot share dlperf's;
``dlperf setup torch==2.12.0``: one with another version of a framework dlperf installs
(see ``dlperf.core.separate_envs``). Parsing and printing only."""

from __future__ import annotations

import argparse

from dlperf.cli.progress import out
from dlperf.core import separate_envs as envs
from dlperf.core.errors import UsageError


def add(sub: argparse._SubParsersAction) -> None:
    names = ", ".join(envs.SEPARATE)
    p = sub.add_parser(
        "setup",
        help=f"create the environment of a framework that needs its own ({names}), or of "
        "another version of one (torch==2.12.0)",
        description="Create a virtual environment for a framework whose dependencies "
        "conflict with dlperf's, or for another version of torch, tensorflow or jax "
        "(FRAMEWORK==VERSION: then 'dlperf sweep --env FRAMEWORK==VERSION' measures with it), "
        "and install it there. Default place: $XDG_DATA_HOME/dlperf/envs/NAME "
        "(~/.local/share/...; NAME: mxnet, or torch-2.12.0); $DLPERF_NAME_PYTHON (NAME in "
        "capitals, other characters as _) names another interpreter (DIR/bin/python: the "
        "environment is made in DIR).",
    )
    p.add_argument("framework", help=f"{names}, or FRAMEWORK==VERSION")
    p.add_argument("--force", action="store_true", help="install again even if it works")
    p.set_defaults(func=cmd_setup)


def cmd_setup(a: argparse.Namespace) -> int:
    name = a.framework.lower()
    if "==" in name:
        name = envs.versioned(name).name
    elif name not in envs.SEPARATE:
        raise UsageError(f"'{a.framework}' needs no environment of its own (setup knows: "
                         f"{', '.join(envs.SEPARATE)}, or FRAMEWORK==VERSION such as "
                         "torch==2.12.0)")
    versions = envs.create(name, force=a.force, log=lambda msg: out.print(msg, markup=False))
    out.print(f"{name} ready: {envs.python(name)} ("
              + ", ".join(f"{m} {v}" for m, v in versions.items()) + ")")
    return 0

