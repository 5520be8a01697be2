"""The shape of the code, checked: no import circles, no upward imports, frameworks only
in backends/ (and the torch-only parallel wing), no registration by import side effect.

Every ``import`` counts, at module level or inside a function: a lazy import is still a
dependency. Run alone to see the graph: ``python -m pytest tests/test_architecture.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "dlperf"
FRAMEWORKS = ("torch", "tensorflow", "jax", "flax", "optax", "keras", "mxnet")

#: Layers from the bottom up; a module may import its own layer or one below, never above.
#: The first matching prefix decides (so "dlperf.kinds.parallel.make" is matched before
#: "dlperf.kinds.parallel").
LAYERS: list[tuple[str, ...]] = [
    # 0: facts and definitions, no dlperf dependencies beyond their own kind
    ("dlperf.core.errors", "dlperf.core.units", "dlperf.core.environment", "dlperf.workloads.real_data",
     "dlperf.workloads", "dlperf.core.stats", "dlperf.core.orphans",
     "dlperf.engine.cpulock", "dlperf.engine.launch.watch", "dlperf.kinds.parallel.status",
     "dlperf.perfmodel.partition", "dlperf.perfmodel", "dlperf.kinds.dataflow", "dlperf.core.cpu_peak",
     "dlperf.core.separate_envs", "dlperf.reference"),
    # 1: what a run is
    ("dlperf.core.spec", "dlperf.kinds", "dlperf.backends.base", "dlperf.backends.__init__",
     "dlperf.core.timing", "dlperf.kinds.parallel.make", "dlperf.kinds.train"),
    # 2: configuration, planning, storage
    ("dlperf.engine.config", "dlperf.core.store", "dlperf.core.migrate", "dlperf.engine.plan", "dlperf.engine.presets",
     "dlperf.kinds.peak.rates", "dlperf.core.store_import", "dlperf.kinds.dataflow.plan",
     "dlperf.kinds.dataflow.storage_run", "dlperf.inputs.pipeline", "dlperf.kinds.calibrate.plan",
     "dlperf.kinds.calibrate.prediction", "dlperf.kinds.calibrate.reference", "dlperf.kinds.calibrate.__init__"),
    # 3: inside a worker process
    ("dlperf.backends", "dlperf.engine.worker", "dlperf.kinds.train.run", "dlperf.kinds.parallel",
     "dlperf.kinds.dataflow.run", "dlperf.kinds.calibrate.run", "dlperf.kinds.explain.run"),
    # 4: starting and watching workers
    ("dlperf.engine.launch",),
    # 5: running specs and the experiments made of them
    ("dlperf.engine.runner", "dlperf.kinds.train.experiments", "dlperf.engine.flopcache"),
    # 6: reading the store (advice reads the report's rows and the model)
    ("dlperf.report", "dlperf.advice", "dlperf.kinds.explain.analysis", "dlperf.kinds.explain.__init__"),
    # 7: the Python API
    ("dlperf.api",),
    # 8: the command line
    ("dlperf.cli", "dlperf.__init__", "dlperf.__main__"),
]


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
        own_pkg = mod.rpartition(".")[0]
        deps = set()
        for name in _imports(path):
            if not name.startswith("dlperf"):
                continue
            target = _resolve(name)
            # importing a submodule imports its packages: that is not a dependency
            if target and target != mod and not (
                    target.endswith(".__init__") and mod.startswith(target[:-9])) and \
                    target != f"{own_pkg}.__init__":
                deps.add(target)
        graph[mod] = deps
    return graph


def _layer(mod: str) -> int:
    best, layer = -1, None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and len(p) > best:
                best, layer = len(p), i
    assert layer is not None, f"{mod} is in no layer of tests/test_architecture.py"
    return layer


def test_no_import_circles():
    graph = _graph()
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == []


def test_no_upward_imports():
    upward = [f"{m} (layer {_layer(m)}) imports {d} (layer {_layer(d)})"
              for m, deps in _graph().items() for d in deps if _layer(d) > _layer(m)]
    assert upward == []


def test_frameworks_are_imported_only_by_backends_and_the_torch_wing():
    allowed = ("dlperf.backends.", "dlperf.kinds.parallel.")
    found = []
    for mod, path in MODULES.items():
        if mod.startswith(allowed) and not mod.startswith("dlperf.backends.base") and \
                mod != "dlperf.backends.__init__" and mod != "dlperf.kinds.parallel.make":
            continue
        for name in _imports(path):
            if name.split(".")[0] in FRAMEWORKS:
                found.append(f"{mod} imports {name}")
    assert found == []


def test_no_registration_by_import_side_effect():
    # subcommands and report sections are explicit lists; nothing imports dlperf modules by
    # name at run time except the backend registry (which must not import a framework
    # until a worker needs it)
    offenders = []
    for mod, path in MODULES.items():
        if mod == "dlperf.backends.__init__":
            continue
        text = path.read_text()
        if "import_module(" in text and '"dlperf.' in text:
            offenders.append(mod)
    assert offenders == []
