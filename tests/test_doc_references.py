"""Every dotted name of dlperf that the docs, the README and the code's docstrings and
comments mention (``dlperf.kinds.step.run``, ``dlperf.core.spec.RunSpec.label``) names
something that exists, and the package's own example runs.

Names are resolved from the source, without importing it (a backend module imports its
framework): the longest prefix that is a module of ``src/dlperf``, then each further part
a name defined in that module (a function, a class, an assignment, an import) or in that
class's body. A name inherited from a base class outside dlperf cannot be seen this way
and is taken on trust; nothing else is.
"""

from __future__ import annotations

import ast
import doctest
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
#: dlperf.a.b.c, not inside a path or a file name (results.db, dlperf.egg-info)
DOTTED = re.compile(r"(?<![\w/.\-])dlperf(?:\.[A-Za-z_]\w*)+(?![\w\-/])")


def _module_file(name: str) -> Path | None:
    base = SRC.joinpath(*name.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _defined(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names a module or class body defines, each with the node that defines it."""
    out: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out[n.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, ast.ImportFrom | ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = node
        elif isinstance(node, ast.If | ast.Try):  # names defined under a guard
            out.update(_defined(node.body))
            for h in getattr(node, "handlers", []):
                out.update(_defined(h.body))
            out.update(_defined(node.orelse))
    return out


def _resolves_in(module: str, rest: list[str]) -> bool:
    path = _module_file(module)
    if path is None:
        return False
    if not rest:
        return True
    tree = _tree(path)
    names = _defined(tree.body)
    node = names.get(rest[0])
    if node is None:
        # a module-level __getattr__ serves the names its __all__ lists
        lazy = "__getattr__" in names and isinstance(names.get("__all__"), ast.Assign)
        return lazy and rest[0] in ast.literal_eval(names["__all__"].value) or \
            _module_file(f"{module}.{rest[0]}") is not None and \
            _resolves_in(f"{module}.{rest[0]}", rest[1:])
    if isinstance(node, ast.ImportFrom) and node.module:
        target = next(a.name for a in node.names if (a.asname or a.name) == rest[0])
        if node.module.startswith("dlperf"):
            return _resolves(f"{node.module}.{target}.{'.'.join(rest[1:])}".rstrip("."))
        return True  # a third-party name
    if len(rest) == 1:
        return True
    if isinstance(node, ast.ClassDef):
        members = _defined(node.body)
        if rest[1] in members:
            return True
        # inherited: from a dlperf base we can read, else taken on trust
        for base in node.bases:
            readable = isinstance(base, ast.Name) and isinstance(
                names.get(base.id), ast.ClassDef | ast.ImportFrom)
            if not readable or _resolves_in(module, [base.id, *rest[1:]]):
                return True
        return False
    return True  # an attribute of a value: beyond what the source says


@cache
def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        if _module_file(module) is not None:
            return _resolves_in(module, parts[i:])
    return False


def _texts() -> dict[Path, str]:
    """The docs, the README, and each source file's docstrings and comments."""
    out = {p: p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
    for p in sorted((SRC / "dlperf").rglob("*.py")):
        text = p.read_text()
        parts = [n.value.value for n in ast.walk(ast.parse(text))
                 if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                 and isinstance(n.value.value, str)]
        parts += [line.split("#", 1)[1] for line in text.splitlines() if "#" in line]
        out[p] = "\n".join(parts)
    return out


def test_every_dotted_reference_names_something_that_exists():
    missing = sorted({f"{p.relative_to(ROOT)}: {name}" for p, text in _texts().items()
                      for name in DOTTED.findall(text) if not _resolves(name)})
    assert missing == []


#: a source file named by its path (``kinds/step/run.py``, ``dlperf/core/spec.py``)
PATH = re.compile(r"(?<![\w/<>.\-])((?:[a-z_]+/)+[a-z_0-9]+\.py)\b")


def test_every_source_path_in_the_docs_exists():
    missing = []
    for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for name in sorted(set(PATH.findall(p.read_text()))):
            if not any((base / name).is_file() for base in (ROOT, SRC, SRC / "dlperf")):
                missing.append(f"{p.name}: {name}")
    assert missing == []


def test_the_resolver_tells_a_stale_name_from_a_real_one():
    assert _resolves("dlperf.core.spec.RunSpec.label")
    assert _resolves("dlperf.kinds.KINDS")
    assert not _resolves("dlperf.kinds.kind.Kind.no_such_field")
    assert not _resolves("dlperf.training.rules.resolve")  # a module that moved
    assert not _resolves("dlperf.workloads.init")


def test_the_package_example_runs():
    import dlperf

    failures, tried = doctest.testmod(dlperf, optionflags=doctest.ELLIPSIS)
    assert tried > 0 and failures == 0
