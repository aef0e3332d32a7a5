"""kvconform's own import graph: no cycle, and dependencies that run one way.

Read statically with ``ast`` through ``conformance.import_graph`` (the same
reader the PR gate and the lint use on vLLM's files), so every import counts:
module level, inside functions, and under ``if TYPE_CHECKING`` (an import kept
out of runtime still ties the two modules together for a reader and for mypy).
An edge is an import that names a kvconform module; a package's own
``__init__`` running first is Python's doing, not a dependency, and is left out.

The layers read bottom-up: ``kvconform`` (the leaf modules beside the four
packages), then ``platforms``, then ``reports``; ``conformance`` and
``pipelines`` may use those below them.

And a style a tool reading the checkout can follow: a module imports its own folder's
modules relatively; only imports across folders name ``kvconform.<folder>``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import tomllib

from kvconform.conformance.vllm_install.import_graph import import_targets

ROOT = Path(__file__).resolve().parents[2]

# package -> the packages it must never import (directly; a cycle through others is caught below).
C = "kvconform.conformance."
# The harness (the engine stand-in, the checks, the workloads) is driven by the plugin and the connector model, and
# imports neither of them nor reliability: what it needs is passed in. "Which vLLM" (vllm_install) is below everything.
HARNESS_FORBIDS = tuple(C + p for p in ("plugin", "reliability", "connectors", "bench", "cli", "conftest"))
LAYERS: dict[str, tuple[str, ...]] = {
    "kvconform.platforms": ("kvconform.conformance", "kvconform.pipelines", "kvconform.reports"),
    "kvconform.reports": ("kvconform.conformance", "kvconform.pipelines"),
    C + "vllm_install": tuple(C + p for p in ("plugin", "reliability", "connectors", "engine", "checks", "workload",
                                            "bench", "lint", "smoke", "cli", "conftest")),
    C + "engine": (*HARNESS_FORBIDS, C + "checks", C + "workload"),
    C + "checks": (*HARNESS_FORBIDS, C + "workload"),
    C + "workload": HARNESS_FORBIDS,
    C + "lint": tuple(C + p for p in ("plugin", "reliability", "connectors", "engine", "checks", "workload", "bench")),
}
LEAVES = ("kvconform.errors",)  # shared small things every package may import: they import nothing of kvconform

Graph = dict[str, set[str]]


def source_modules(root: Path = ROOT) -> dict[str, Path]:
    """Installed module name -> source file, for every package folder pyproject maps under kvconform."""
    package_dir = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    modules = {}
    for package, folder in package_dir.items():
        recurse = package != "kvconform"  # kvconform/ holds its leaf modules; the packages are the other folders
        for path in sorted((root / folder).rglob("*.py") if recurse else (root / folder).glob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            if recurse and not (path.parent / "__init__.py").exists():
                continue  # a data folder's script, not part of the package
            modules[".".join((package, *parts))] = path
    return modules


def build_graph(sources: dict[str, str]) -> Graph:
    """module -> the kvconform modules it imports, from each module's source text."""
    graph: Graph = {}
    for module, source in sources.items():
        # imported_modules resolves relative imports from a path; give it the module's own, as a path
        init = "/__init__.py" if _is_package(module, sources) else ".py"
        path = module.replace(".", "/") + init
        graph[module] = {name for base, names in import_targets(path, source)
                         for name in _imported(base, names, sources) if name != module}
    return graph


def _imported(base: str, names: tuple[str, ...], sources: dict[str, str]) -> set[str]:
    """The kvconform modules one statement imports: ``from pkg import module`` is the module, not ``pkg``."""
    submodules = {f"{base}.{name}" for name in names} & sources.keys()
    uses_base = not names or len(submodules) < len(names)  # ``import base``, or a name defined in base itself
    return submodules | ({base} if uses_base and base in sources else set())


def _is_package(module: str, sources: dict[str, str]) -> bool:
    return any(other.startswith(f"{module}.") for other in sources)


def find_cycle(graph: Graph) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None when the graph has none (depth-first, iterative)."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path, on_path = [start], {start}
        pending = [iter(sorted(graph.get(start, ())))]
        while pending:
            nxt = next(pending[-1], None)
            if nxt is None:  # every import of path[-1] explored: no cycle through it
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                pending.pop()
            elif nxt in on_path:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                pending.append(iter(sorted(graph.get(nxt, ()))))
    return None


def layer_violations(graph: Graph) -> list[str]:
    """``a imports b`` for each import that goes up a layer, or out of a leaf."""
    found = []
    for module, imports in sorted(graph.items()):
        for target in sorted(imports):
            for package, forbidden in LAYERS.items():
                if _within(module, package) and any(_within(target, f) for f in forbidden):
                    found.append(f"{module} imports {target}")
            if module in LEAVES:
                found.append(f"{module} imports {target} (a leaf imports nothing of kvconform)")
    return found


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph({name: path.read_text() for name, path in source_modules().items()})


def test_every_package_is_read(graph):
    """The graph covers all four packages and the leaves, so the other tests cannot pass on an empty graph."""
    assert {"kvconform.conformance.plugin", "kvconform.platforms.spec", "kvconform.pipelines.lanes",
            "kvconform.reports.readers", *LEAVES} <= set(graph)
    # a function-level import
    assert "kvconform.conformance.connectors.selection" in graph["kvconform.conformance.plugin"]


def test_the_import_graph_has_no_cycle(graph):
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_imports_run_down_the_layers(graph):
    assert layer_violations(graph) == []


# ---- the checks can fail: synthetic graphs ------------------------------------------------------


def test_a_cycle_is_found_and_named():
    graph = {"kvconform.a": {"kvconform.b"}, "kvconform.b": {"kvconform.c"}, "kvconform.c": {"kvconform.a"},
             "kvconform.d": {"kvconform.a"}}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"kvconform.a", "kvconform.b", "kvconform.c"}


def test_a_diamond_is_not_a_cycle():
    graph = {"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}
    assert find_cycle(graph) is None


def test_imports_inside_functions_and_type_checking_are_edges():
    sources = {
        "kvconform.reports.model": "from typing import TYPE_CHECKING\n"
                                   "if TYPE_CHECKING:\n    from kvconform.conformance import plugin\n",
        "kvconform.conformance.plugin": "def f():\n    from kvconform.reports.model import X\n",
        "kvconform.conformance": "",
        "kvconform.reports": "",
    }
    graph = build_graph(sources)
    plugin, model = "kvconform.conformance.plugin", "kvconform.reports.model"
    assert find_cycle(graph) in ([plugin, model, plugin], [model, plugin, model])
    assert layer_violations(graph) == ["kvconform.reports.model imports kvconform.conformance.plugin"]


def test_relative_imports_resolve_and_a_leaf_that_imports_is_named():
    sources = {"kvconform": "", "kvconform.errors": "from . import platforms\n",
               "kvconform.platforms": "", "kvconform.platforms.cpu": "from .. import errors\n"}
    graph = build_graph(sources)
    assert graph["kvconform.platforms.cpu"] == {"kvconform.errors"}
    assert layer_violations(graph) == ["kvconform.errors imports kvconform.platforms "
                                       "(a leaf imports nothing of kvconform)"]


# ---- imports a tool reading the checkout can follow ----------------------------------------------
# The folders are mapped under kvconform only by the install (pyproject's package-dir): a tool that reads the files
# (mypy without .ci/mypy's links, an editor's go-to-definition) cannot follow ``kvconform.conformance.x`` to
# ``conformance/x.py``. So a module reaches its own folder's modules by relative imports, and only imports that cross
# folders go through the mapping. pytest imports the suite's test modules and conftest by path, under a name of its
# own (``conformance.test_roundtrip``): a relative import there would load a second copy of the package, so they keep
# absolute imports.
MAPPED_FOLDERS = ("kvconform.conformance", "kvconform.platforms", "kvconform.pipelines", "kvconform.reports")


def _imported_by_path(path: Path) -> bool:
    return path.name.startswith("test_") or path.name == "conftest.py"


def import_style_problems(module: str, path: Path, source: str) -> list[str]:
    """``file:line: ...`` for each import that a tool reading the checkout could not follow, or that pytest would
    load twice."""
    own = next((folder for folder in MAPPED_FOLDERS if _within(module, folder)), None)
    problems = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        where = f"{path.relative_to(ROOT) if path.is_absolute() else path}:{node.lineno}"
        if _imported_by_path(path):
            if node.level:
                problems.append(f"{where}: a relative import in a module pytest imports by path")
        elif own and node.level == 0 and node.module and _within(node.module, own):
            problems.append(f"{where}: from {node.module} import ... (its own folder: import it relatively)")
    return problems


def test_a_folder_imports_its_own_modules_relatively():
    problems = [problem for module, path in source_modules().items()
                for problem in import_style_problems(module, path, path.read_text())]
    assert problems == []


@pytest.mark.parametrize(("name", "source", "flagged"), [
    ("engine/rig.py", "from kvconform.conformance.engine.kvcache import CacheShape\n", True),
    ("engine/rig.py", "def f():\n    from kvconform.conformance import cli\n", True),
    ("engine/rig.py", "from .kvcache import CacheShape\nfrom kvconform.platforms import spec\n", False),
    ("test_roundtrip.py", "from ..engine import rig\n", True),
    ("test_roundtrip.py", "from kvconform.conformance.engine import rig\n", False),
])
def test_the_import_style_check_can_fail(name, source, flagged):
    module = "kvconform.conformance." + name.removesuffix(".py").replace("/", ".")
    assert bool(import_style_problems(module, Path("conformance") / name, source)) == flagged
