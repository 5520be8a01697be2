"""The shape of the code, checked over every import in ``src/dlperf`` (lazy ones too: a
lazy import is still a dependency):

- the layers, by folder (``LAYERS``): a module imports its own layer or one below;
- the top-level packages form a graph with no cycle: no two of them import each other,
  directly or through others;
- frameworks are imported only in ``backends/`` and the torch-only wing of the parallel
  kind;
- nothing registers itself by import side effect.

Run alone to see the graph: ``python -m pytest tests/test_architecture.py``.
"""

from __future__ import annotations

import ast
from fnmatch import fnmatchcase
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "dlperf"
FRAMEWORKS = ("torch", "tensorflow", "jax", "flax", "optax", "keras", "mxnet")

#: The layers from the bottom up, each a list of module patterns (``fnmatch`` on the
#: dotted name, ``__init__`` included); the most specific matching pattern (the longest)
#: decides. A module may import its own layer or one below, never one above.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # what a run is and where it is kept, for every kind alike; the root of it all
    ("core", ("dlperf.core.*",)),
    # facts: framework-neutral networks, the analytic model and its catalogues, published
    # numbers, what an input pipeline is (they raise core's errors and use its units)
    ("facts", ("dlperf.workloads.*", "dlperf.perfmodel.*", "dlperf.reference.*",
               "dlperf.inputs.*")),
    # each kind's framework-free modules: its options and outcome, its planning helpers
    ("kinds' types", ("dlperf.kinds.kind", "dlperf.kinds.*.options", "dlperf.kinds.*.make",
                      "dlperf.kinds.dataflow.plan", "dlperf.kinds.train.resolve",
                      "dlperf.kinds.*.quality", "dlperf.kinds.*.status",
                      "dlperf.kinds.*.results", "dlperf.kinds.dataflow.storage",
                      "dlperf.kinds.dataflow.transfer", "dlperf.kinds.dataflow.memory")),
    # the only modules that import a framework (and the torch wing of kinds/parallel)
    ("backends", ("dlperf.backends.*",)),
    # each kind's run body (inside a worker), its planner against the store and its
    # analysis of stored results
    ("kinds' run bodies", ("dlperf.kinds.*",)),
    # rendering (tables, exporters, plots, the HTML page) and each kind's sections
    ("reports", ("dlperf.report.*", "dlperf.kinds.*.*section", "dlperf.kinds.*.plots",
                 "dlperf.kinds.*.tables", "dlperf.kinds.*.rows", "dlperf.kinds.*.factors")),
    # each kind's entry (KIND) and the one registry, KINDS: they name a kind's run body
    # and its sections, so they sit above both
    ("kinds' entries", ("dlperf.kinds.__init__", "dlperf.kinds.*.__init__")),
    # config, plan, runner, worker, launchers, the machine's lock: they read KINDS
    ("engine", ("dlperf.engine.*",)),
    # recommendations from results, the kinds' analyses and the model; comparisons of
    # two sides' results
    ("analyses", ("dlperf.advice.*", "dlperf.compare.*")),
    ("api", ("dlperf.api",)),
    ("cli", ("dlperf.cli.*", "dlperf.__init__", "dlperf.__main__")),
]

#: the modules of kinds/parallel that run under torchrun and import torch themselves
TORCH_WING = ("dlperf.kinds.parallel.common", "dlperf.kinds.parallel.sync",
              "dlperf.kinds.parallel.mixed", "dlperf.kinds.parallel.hybrid",
              "dlperf.kinds.parallel.pipeline", "dlperf.kinds.parallel.param_server",
              "dlperf.kinds.parallel.ps_client", "dlperf.kinds.parallel.ps_server",
              "dlperf.kinds.parallel.probe", "dlperf.kinds.parallel.run",
              "dlperf.kinds.parallel.fsdp")


def _modules() -> dict[str, Path]:
    out = {}
    for f in SRC.rglob("*.py"):
        parts = f.relative_to(SRC.parent).with_suffix("").parts
        out[".".join(parts)] = f
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name:
        if name in MODULES:
            return name
        if f"{name}.__init__" in MODULES:
            return f"{name}.__init__"
        name = name.rpartition(".")[0]
    return None


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for mod, path in MODULES.items():
        deps = set()
        for name in _imports(path):
            if not name.startswith("dlperf"):
                continue
            target = _resolve(name)
            # importing a submodule runs its packages' __init__: a dependency, except on
            # the module's own packages (which Python has run already)
            own_package = target is not None and target.endswith(".__init__") and \
                (mod + ".").startswith(target[:-len("__init__")])
            if target and target != mod and not own_package:
                deps.add(target)
        graph[mod] = deps
    return graph


def _layer(mod: str) -> int:
    best, layer = -1, None
    for i, (_, patterns) in enumerate(LAYERS):
        for p in patterns:
            if (fnmatchcase(mod, p) or (p.endswith(".*") and mod == p[:-2] + ".__init__")) \
                    and len(p) > best:
                best, layer = len(p), i
    assert layer is not None, f"{mod} is in no layer of tests/test_architecture.py"
    return layer


def _top(mod: str) -> str:
    """The top-level package of a module (``dlperf.kinds.step.run`` -> ``kinds``); a
    module at the top is a package of its own (``api``), the root's ``__init__`` too."""
    return mod.split(".")[1]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_every_module_has_a_layer():
    assert all(_layer(m) >= 0 for m in MODULES)


def test_no_upward_imports():
    upward = [f"{m} ({LAYERS[_layer(m)][0]}) imports {d} ({LAYERS[_layer(d)][0]})"
              for m, deps in _graph().items() for d in deps if _layer(d) > _layer(m)]
    assert upward == []


def test_no_import_circles_between_modules():
    assert _cycles(_graph()) == []


def test_top_level_packages_form_no_cycle():
    # the root __init__ is the composition root (it hands core the table of kinds): it
    # may import anything and nothing imports it
    packages: dict[str, set[str]] = {}
    for mod, deps in _graph().items():
        if mod == "dlperf.__init__":
            continue
        packages.setdefault(_top(mod), set()).update(
            _top(d) for d in deps if _top(d) != _top(mod) and d != "dlperf.__init__")
    assert _cycles(packages) == []


def test_the_package_graph_check_finds_a_cycle():
    # the check above would see one: two packages importing each other through a third
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_frameworks_are_imported_only_by_backends_and_the_torch_wing():
    found = []
    for mod, path in MODULES.items():
        framework_free = mod in ("dlperf.backends.base", "dlperf.backends.__init__")
        if (mod.startswith("dlperf.backends.") and not framework_free) or mod in TORCH_WING:
            continue
        for name in _imports(path):
            if name.split(".")[0] in FRAMEWORKS:
                found.append(f"{mod} imports {name}")
    assert found == []


def test_no_registration_by_import_side_effect():
    # subcommands, kinds and report sections are explicit lists; nothing imports dlperf
    # modules by name at run time except the backend loader (which must not import a
    # framework until a worker needs it)
    offenders = []
    for mod, path in MODULES.items():
        if mod == "dlperf.backends.__init__":
            continue
        text = path.read_text()
        if "import_module(" in text and '"dlperf.' in text:
            offenders.append(mod)
    assert offenders == []


def test_core_knows_no_kind():
    # core reads each kind's types from the table the root installs, never from the kinds
    graph = _graph()
    assert [f"{m} imports {d}" for m, deps in graph.items() if m.startswith("dlperf.core.")
            for d in deps if not d.startswith("dlperf.core.")] == []


def test_a_worker_of_another_environment_finds_dlperf_where_the_launcher_says():
    # MXNet's workers run another interpreter with this folder on their path: it must be
    # the one that holds the package, wherever the launcher's module sits in the tree
    from dlperf.engine.launch.isolated import SRC_DIR

    assert (Path(SRC_DIR) / "dlperf" / "__init__.py").is_file()
