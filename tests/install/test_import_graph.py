"""kvconform's own import graph: no cycle, and layers that import downward only.

Read statically with ``ast`` through ``kvconform.conformance.vllm_install.import_graph`` (the same reader the PR gate
and the lint use on vLLM's files), so every import counts: module level, inside functions, and under ``if
TYPE_CHECKING`` (an import kept out of runtime still ties the two modules together for a reader and for mypy).
An edge is an import that names a kvconform module, and importing ``a.b.c`` also runs the ``__init__`` of each
package it passes through (``a.b``): that is an edge too, since whatever that ``__init__`` imports comes with it.

``MAY_IMPORT`` gives every package of kvconform its rule: the packages it may import. A package without a row
fails, so a new folder must say where it sits. docs/maintaining.md ("Layout rules") draws the same table.

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

# Each package's row: the packages (or single modules) its modules may import, besides their own package and SHARED.
# A module belongs to the longest row that contains it; ``kvconform.conformance`` itself holds the suite's test
# modules, its conftest and the command line, which pytest and the console script load. Nothing may import the
# pytest plugin: pytest loads it by entry point.
P, R, C = "kvconform.platforms", "kvconform.reports", "kvconform.conformance."
# small things every package may import; they import nothing of kvconform
SHARED = ("kvconform.errors", "kvconform.check_table")
TOP = "kvconform"  # a row for the top package's __init__ only
VLLM_INSTALL, SESSION, ENGINE, CHECKS = C + "vllm_install", C + "session", C + "engine", C + "checks"
CONNECTORS = C + "connectors"
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "kvconform": (),  # the package's own __init__ alone: the modules beside it have their rows
    "kvconform.errors": (),
    "kvconform.check_table": (),
    "kvconform.__main__": (C + "cli",),
    P: (),
    R: (P,),
    # what the installed vLLM is, and where it keeps things
    VLLM_INSTALL: (P,),
    # what a run is: its target, options, devices, private-API table
    SESSION: (P, R, VLLM_INSTALL),
    # the harness: the engine stand-in, then the checks and workloads it drives
    ENGINE: (P, VLLM_INSTALL),
    CHECKS: (P, VLLM_INSTALL, ENGINE),
    C + "workload": (P, VLLM_INSTALL, ENGINE, CHECKS),
    C + "lint": (VLLM_INSTALL,),
    # the connector model: profiles, selection, construction, services
    CONNECTORS: (P, R, VLLM_INSTALL, SESSION, ENGINE, CHECKS),
    C + "reliability": (P, R, VLLM_INSTALL, SESSION, ENGINE, CONNECTORS),
    # connector coverage: what is measured and whose it is, and coverage.py's numbers as results
    C + "coverage": (R, VLLM_INSTALL),
    # tools beside the suite
    C + "bench": (P, R, VLLM_INSTALL, SESSION, ENGINE, CHECKS, CONNECTORS),
    C + "smoke": (P, R, SESSION, ENGINE),
    # kvconform mutate: mutants of a connector's own modules, run against the tests whose coverage reached them
    C + "mutation": (R, VLLM_INSTALL, SESSION, CONNECTORS, C + "coverage"),
    # the pytest hooks, on top
    C + "plugin": (P, R, VLLM_INSTALL, SESSION, ENGINE, CHECKS, C + "workload", C + "lint", CONNECTORS,
                   C + "reliability", C + "coverage"),
    "kvconform.conformance": (P, R, VLLM_INSTALL, SESSION, ENGINE, CHECKS, C + "workload", C + "lint", CONNECTORS),
    # the Buildkite generator, and the PR gate above it (it emits the generator's steps for what it selects)
    "kvconform.pipelines": (P, R, VLLM_INSTALL, SESSION, CONNECTORS),
    "kvconform.pipelines.gate": (P, R, VLLM_INSTALL, SESSION, CONNECTORS, "kvconform.pipelines"),
}

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
    """module -> the kvconform modules it imports, from each module's source text, with the ``__init__`` of every
    package an import passes through where that ``__init__`` imports kvconform modules itself (other than the
    importer's own packages, which are already running)."""
    named: Graph = {}
    for module, source in sources.items():
        # imported_modules resolves relative imports from a path; give it the module's own, as a path
        init = "/__init__.py" if _is_package(module, sources) else ".py"
        path = module.replace(".", "/") + init
        named[module] = {name for base, names in import_targets(path, source)
                         for name in _imported(base, names, sources)} - {module}
    graph: Graph = {}
    for module, imports in named.items():
        inits = {package for name in imports for package in _packages_of(name) if named.get(package)}
        graph[module] = imports | (inits - set(_packages_of(module)) - {module})
    return graph


def _packages_of(module: str) -> list[str]:
    """The packages whose ``__init__`` runs before ``module`` does: ``a.b.c`` -> ``a``, ``a.b``."""
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


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


def row_of(module: str, rows: dict[str, tuple[str, ...]] = MAY_IMPORT) -> str | None:
    """The row of ``MAY_IMPORT`` a module belongs to: the longest one that contains it."""
    return max((row for row in rows if module == row or (row != TOP and _within(module, row))), key=len,
               default=None)


def layer_violations(graph: Graph, rows: dict[str, tuple[str, ...]] = MAY_IMPORT) -> list[str]:
    """``a imports b (...)`` for each import its row does not allow, and for each module in no row."""
    found = []
    for module, imports in sorted(graph.items()):
        row = row_of(module, rows)
        if row is None:
            found.append(f"{module} is in no row of MAY_IMPORT: give its package a rule")
            continue
        for target in sorted(imports):
            target_row = row_of(target, rows)
            if target_row == row or any(_within(target, allowed) for allowed in (*rows[row], *SHARED)):
                continue
            allowed = ", ".join(rows[row]) or "nothing of kvconform"
            found.append(f"{module} imports {target} ({row} may import {allowed})")
    return found


def rule_cycle(rows: dict[str, tuple[str, ...]] = MAY_IMPORT) -> list[str] | None:
    """A cycle in the rules themselves (row a may import row b, which may import a), or None."""
    return find_cycle({row: {row_of(allowed, rows) or allowed for allowed in allowed_list} - {row}
                       for row, allowed_list in rows.items()})


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph({name: path.read_text() for name, path in source_modules().items()})


def test_every_package_is_read(graph):
    """The graph covers all four packages and the leaves, so the other tests cannot pass on an empty graph."""
    assert {"kvconform.conformance.plugin", "kvconform.platforms.spec", "kvconform.pipelines.lanes",
            "kvconform.reports.readers", *SHARED} <= set(graph)
    # a function-level import
    assert "kvconform.conformance.connectors.selection" in graph["kvconform.conformance.plugin"]


def test_the_import_graph_has_no_cycle(graph):
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_imports_run_down_the_layers(graph):
    assert layer_violations(graph) == []


def test_every_package_has_a_rule_and_the_rules_run_one_way():
    """Each folder with an ``__init__`` has its own row, each row names only rows, and the rows form no cycle."""
    packages = {module for module, path in source_modules().items() if path.name == "__init__.py"}
    assert sorted(packages - MAY_IMPORT.keys()) == []
    assert sorted({allowed for row in MAY_IMPORT.values() for allowed in row} - MAY_IMPORT.keys()
                  - {C + "cli"}) == []
    assert rule_cycle() is None, "the rules allow a cycle: " + " -> ".join(rule_cycle() or [])


def test_nothing_imports_the_pytest_plugin(graph):
    """pytest loads the plugin by entry point; a module that imports it runs every hook module's imports too."""
    plugin = C + "plugin"
    assert sorted(module for module, imports in graph.items()
                  if not _within(module, plugin) and any(_within(target, plugin) for target in imports)) == []


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
    assert layer_violations(graph) == ["kvconform.reports.model imports kvconform.conformance.plugin "
                                       "(kvconform.reports may import kvconform.platforms)"]


# The cycles between folders that the layering removed, as they stood: each must be named again if it came back.
FORMER_CYCLES = {
    "plugin <-> connectors": {
        C + "connectors.selection": "from ..plugin.options import DEFAULTS\n",
        C + "plugin": "from ..connectors import selection\n", C + "plugin.options": ""},
    "plugin <-> reliability": {
        C + "reliability.crashes": "from kvconform.conformance.plugin import console\n",
        C + "plugin": "from .. import reliability\n", C + "plugin.console": "", C + "reliability": ""},
    "connectors <-> reliability": {
        C + "connectors.services": "from ..reliability import crashes\n",
        C + "reliability.crashes": "from ..connectors import services\n"},
    "bench -> plugin, sideways": {
        C + "bench.expected": "from ..plugin.expectations import decide\n",
        C + "plugin": "from . import expectations\n", C + "plugin.expectations": ""},
}


@pytest.mark.parametrize("name", FORMER_CYCLES)
def test_a_former_cycle_between_folders_is_named(name):
    sources = {C.rstrip("."): "", **{package: "" for package in (C + "connectors", C + "reliability", C + "bench")},
               **FORMER_CYCLES[name]}
    assert layer_violations(build_graph(sources)) != []


def test_an_import_through_a_package_runs_its_init():
    """``from ..plugin.options import X`` runs plugin/__init__.py: an edge to the package, when its ``__init__``
    imports something; an empty ``__init__`` adds nothing, and a module's own packages are no edge."""
    sources = {C + "plugin": "from ..connectors import selection\n", C + "plugin.options": "",
               C + "plugin.hooks": "from .options import X\n", C + "connectors": "",
               C + "connectors.selection": "from ..plugin.options import X\n", C.rstrip("."): ""}
    graph = build_graph(sources)
    assert graph[C + "connectors.selection"] == {C + "plugin.options", C + "plugin"}
    assert graph[C + "plugin.hooks"] == {C + "plugin.options"}
    assert find_cycle(graph) is not None


def test_a_module_in_no_row_is_named():
    graph = {"kvconform.newpkg.mod": {"kvconform.reports.model"}}
    assert layer_violations(graph) == ["kvconform.newpkg.mod is in no row of MAY_IMPORT: give its package a rule"]


def test_a_cycle_in_the_rules_is_found():
    rows = {"kvconform.a": ("kvconform.b",), "kvconform.b": ("kvconform.a",)}
    assert rule_cycle(rows) is not None
    assert rule_cycle({"kvconform.a": ("kvconform.b",), "kvconform.b": ()}) is None


def test_relative_imports_resolve_and_a_leaf_that_imports_is_named():
    sources = {"kvconform": "", "kvconform.errors": "from . import platforms\n",
               "kvconform.platforms": "", "kvconform.platforms.cpu": "from .. import errors\n"}
    graph = build_graph(sources)
    assert graph["kvconform.platforms.cpu"] == {"kvconform.errors"}
    assert layer_violations(graph) == ["kvconform.errors imports kvconform.platforms "
                                       "(kvconform.errors may import nothing of kvconform)"]


# ---- imports a tool reading the checkout can follow ----------------------------------------------
# The folders are mapped under kvconform only by the install (pyproject's package-dir): a tool that reads the files
# (mypy without .ci/mypy's links, an editor's go-to-definition) cannot follow ``kvconform.conformance.x`` to
# ``conformance/x.py``. So a module reaches its own folder's modules by relative imports, and only imports that cross
# folders go through the mapping. pytest imports the suite's test modules and conftest by path, under a name of its
# own (made from the path, ``conformance/test_roundtrip.py``): a relative import there would load a second copy of
# the package, so they keep absolute imports.
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
