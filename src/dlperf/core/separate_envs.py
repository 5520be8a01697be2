"""Environments of their own, for frameworks whose dependencies conflict with dlperf's.

MXNet 1.9.1 (its last release) needs numpy<1.24; dlperf and the other frameworks need a
newer one. So MXNet lives in a virtual environment of its own and the launcher starts its
workers with that environment's interpreter (``BackendInfo.python``). The launcher puts
dlperf's source on the worker's PYTHONPATH, so the environment holds only the framework
and what a worker process imports besides (pydantic, psutil; numpy comes with MXNet).

Where: ``$XDG_DATA_HOME/dlperf/envs/NAME`` (default ``~/.local/share/dlperf/envs/NAME``),
or the interpreter named by ``$DLPERF_<NAME>_PYTHON``. Imports no framework.

The same machinery makes an environment with another version of a framework dlperf
installs (``dlperf setup torch==2.12.0``: environment ``torch-2.12.0``), so that
``dlperf sweep --env torch==2.12.0`` measures a sweep with it and ``dlperf compare`` sets
the two versions side by side.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dlperf.core.errors import UsageError


@dataclass(frozen=True)
class SeparateEnv:
    name: str
    requirements: tuple[str, ...]
    #: imported by the check after installing; their versions are printed
    modules: tuple[str, ...]

    @property
    def python_var(self) -> str:
        return f"DLPERF_{re.sub(r'[^A-Z0-9]', '_', self.name.upper())}_PYTHON"


SEPARATE: dict[str, SeparateEnv] = {
    "mxnet": SeparateEnv(
        name="mxnet",
        # numpy<1.24: MXNet 1.9.1 uses the aliases (np.bool, ...) numpy 1.24 removed
        requirements=("mxnet==1.9.1", "numpy<1.24", "pydantic>=2.7", "psutil>=5.9"),
        modules=("mxnet", "numpy", "pydantic", "psutil"),
    ),
}


#: per framework dlperf installs: the pip requirement of one of its versions, and the
#: packages its workers import besides (pip picks versions of them that fit)
VERSIONED: dict[str, tuple[str, tuple[str, ...]]] = {
    "torch": ("torch=={v}", ()),
    "tensorflow": ("tensorflow-cpu=={v}", ()),
    "jax": ("jax[cpu]=={v}", ("flax", "optax")),
}
#: what a worker process imports besides its framework (dlperf's source comes by PYTHONPATH)
WORKER_NEEDS = ("numpy", "pydantic>=2.7", "psutil>=5.9")
_PIN = re.compile(r"^([a-z][a-z0-9_]*)==([0-9][0-9a-z.+!-]*)$")


def versioned(requirement: str) -> SeparateEnv:
    """The environment of one version of a framework: 'torch==2.12.0' -> 'torch-2.12.0'."""
    m = _PIN.match(requirement.strip().lower())
    if not m:
        raise UsageError(f"'{requirement}' is not FRAMEWORK==VERSION (torch==2.12.0)")
    fw, version = m.groups()
    if fw not in VERSIONED:
        raise UsageError(f"dlperf makes versioned environments of {', '.join(VERSIONED)}, not "
                         f"'{fw}'")
    pin, extra = VERSIONED[fw]
    return SeparateEnv(name=f"{fw}-{version}",
                       requirements=(pin.format(v=version), *extra, *WORKER_NEEDS),
                       modules=(fw, *(e.split("[")[0] for e in extra), "numpy", "pydantic",
                                "psutil"))


def get(name: str) -> SeparateEnv:
    """An environment by name: 'mxnet', or a framework's version ('torch-2.12.0')."""
    if name in SEPARATE:
        return SEPARATE[name]
    fw, sep, version = name.partition("-")
    if not sep:
        raise UsageError(f"unknown environment '{name}' (known: {', '.join(SEPARATE)}, or "
                         "FRAMEWORK-VERSION)")
    return versioned(f"{fw}=={version}")


def framework_of(name: str) -> str:
    """The framework a versioned environment holds ('torch-2.12.0' -> 'torch')."""
    return name.partition("-")[0]


def data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def python(name: str) -> str:
    """The interpreter that runs framework ``name``'s workers (it may not exist yet)."""
    env = get(name)
    return os.environ.get(env.python_var) or str(data_home() / "dlperf" / "envs" / name / "bin" / "python")


def exists(name: str) -> bool:
    exe = python(name)
    return os.path.isfile(exe) and os.access(exe, os.X_OK)


def require(name: str) -> None:
    """UsageError naming the command that makes the environment, where it is not made."""
    if not exists(name):
        fw, _, version = name.partition("-")
        how = f"{fw}=={version}" if name not in SEPARATE else name
        raise UsageError(f"no environment '{name}' ({python(name)}); make it with 'dlperf "
                         f"setup {how}' (or set ${get(name).python_var})")


def check(name: str) -> dict[str, str]:
    """Import the environment's modules in its interpreter; their versions, or UsageError
    with the import's last error line (and the system packages a missing library needs)."""
    env, exe = get(name), python(name)
    code = ("import importlib, json; print(json.dumps({m: getattr(importlib.import_module(m), "
            f"'__version__', '?') for m in {list(env.modules)!r}}}))")
    p = subprocess.run([exe, "-c", code], capture_output=True, text=True)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        hint = ""
        if ".so" in last:  # MXNet's library links the system's OpenMP and quadmath
            hint = " (on Debian/Ubuntu: apt-get install libgomp1 libquadmath0)"
        raise UsageError(f"the {name} environment ({exe}) cannot import {name}: {last}{hint}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def create(
    name: str, *, force: bool = False, log: Callable[[str], object] = print
) -> dict[str, str]:
    """Make ``python(name)`` an interpreter with the environment's requirements; returns
    the versions it imports. Creates a virtual environment where none is (the default
    place, or the DIR of ``$DLPERF_<NAME>_PYTHON=DIR/bin/python``); an existing
    interpreter that already imports everything is left alone unless ``force``. A virtual
    environment created here is removed again if the set-up fails, so that a half-made
    one is never taken for a working one."""
    env, exe = get(name), Path(python(name))
    if exe.exists() and not force:
        try:
            return check(name)
        except UsageError:
            pass  # install what is missing
    made = None
    if not exe.exists():
        if exe.parent.name != "bin":
            raise UsageError(f"${env.python_var}={exe} does not exist; name an interpreter, "
                             "or DIR/bin/python to have a virtual environment made in DIR")
        made = exe.parent.parent
        if made.exists() and any(made.iterdir()):
            raise UsageError(f"{made} exists and is not a virtual environment; remove it or "
                             f"set ${env.python_var}")
        log(f"creating a virtual environment for {name} in {made}")
        _run([_base_python(), "-m", "venv", str(made)], f"creating {made}")
    try:
        log(f"installing {' '.join(env.requirements)} (about a minute)")
        _run([str(exe), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              *env.requirements], f"pip install into {exe}")
        return check(name)
    except (UsageError, KeyboardInterrupt):
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise


def _base_python() -> str:
    """The interpreter to make the environment from: this one (Python 3.11, which numpy
    1.23's wheels support), outside any virtual environment it runs in."""
    return getattr(sys, "_base_executable", None) or sys.executable


def _run(cmd: list[str], what: str) -> None:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise UsageError(f"{what} failed: {e}") from None
    if p.returncode != 0:
        lines = [ln for ln in (p.stderr + p.stdout).strip().splitlines()
                 if ln.strip() and not ln.startswith("WARNING")]
        raise UsageError(f"{what} failed: {lines[-1] if lines else f'exit status {p.returncode}'}")
