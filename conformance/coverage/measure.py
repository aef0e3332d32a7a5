"""Measure connector coverage with coverage.py, and turn its data into the results' ``coverage`` section.

One ``coverage.Coverage`` per test process (branch measurement, in memory), started before vLLM is
imported and switched to the connector of each test as it sets up (a dynamic context per connector),
so one run attributes each line to the connectors whose tests ran it. An xdist worker hands its data
to the controller as bytes (``CoverageData.dumps``), which combines them. The numbers come from
coverage.py's own JSON report, per connector (its ``contexts`` filter); missing lines are grouped by
the function that holds them, read with ``ast``.

coverage.py picks its core: ``sys.monitoring`` where that can measure branches (CPython 3.14 and newer),
its C tracer elsewhere. Threads a connector starts are measured; processes it starts are not.
"""

from __future__ import annotations

import ast
import json
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import coverage
from coverage.exceptions import CoverageException

from kvconform.reports.model import MODULE_LEVEL, ConnectorCoverage, MissingLines, ModuleCoverage

from .scope import Scope

# coverage.py's warnings that say nothing here: a worker whose tests ran no connector measured nothing, and the
# results say which connectors ran measured code
QUIET = ("no-data-collected", "module-not-measured")
NO_CONNECTOR = ""  # the context of a test that runs no connector: measured, attributed to none


def new(scope: Scope) -> coverage.Coverage:
    """A Coverage over ``scope``'s files that keeps its data in memory and reads no configuration file (the
    project's own .coveragerc, if any, is about its code, not the connectors')."""
    measuring = coverage.Coverage(branch=True, data_file=None, config_file=False, include=scope.include_patterns())
    measuring.set_option("run:disable_warnings", list(QUIET))
    return measuring


def start(scope: Scope) -> coverage.Coverage:
    measuring = new(scope)
    measuring.start()
    return measuring


def combine(into: coverage.Coverage, blobs: Iterable[bytes]) -> None:
    """Add the data other processes measured (``CoverageData.dumps``) to ``into``'s."""
    data = into.get_data()
    for blob in blobs:
        other = coverage.CoverageData(no_disk=True)
        other.loads(blob)
        data.update(other)


def display_path(file: Path) -> str:
    """A source file's path from the folder above its top package (``vllm/distributed/...``): the same on every
    machine and install, so runs compare and merge by it."""
    top = file.parent
    while (top / "__init__.py").is_file() and top.parent != top:
        top = top.parent
    return file.relative_to(top).as_posix()


@dataclass(frozen=True)
class Function:
    """A function's place in its file: ``first`` its def (or first decorator), ``body`` its body's first line."""

    name: str  # qualified: Class.method, outer.inner
    first: int
    body: int
    last: int
    outermost: bool  # not inside another function's body


def functions_of(tree: ast.Module) -> tuple[Function, ...]:
    """Every function of a parsed module, outer before inner."""
    found: list[Function] = []

    def visit(node: ast.AST, prefix: str, inside_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                found.append(Function(name, first, child.body[0].lineno, child.end_lineno or child.lineno,
                                      not inside_function))
                visit(child, f"{name}.", True)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", inside_function)
            else:
                visit(child, prefix, inside_function)

    visit(tree, "", False)
    return tuple(found)


@cache
def _functions(file: Path) -> tuple[Function, ...]:
    """Every function in ``file``, outer before inner."""
    try:
        return functions_of(ast.parse(file.read_text(encoding="utf-8")))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return ()


def holder(functions: tuple[Function, ...], line: int) -> str:
    """The innermost function whose body holds ``line``; else the function ``line`` defines (its def or a
    decorator); else MODULE_LEVEL."""
    in_body = [f.name for f in functions if f.body <= line <= f.last]
    defines = [f.name for f in functions if f.first <= line < f.body]
    return (in_body or defines or [MODULE_LEVEL])[-1]


def group_by_function(file: Path, lines: Iterable[int]) -> list[MissingLines]:
    """``lines`` of ``file`` grouped by the function that holds each (``holder``), in the order of the file."""
    groups: dict[str, list[int]] = {}
    functions = _functions(file)
    for line in sorted(lines):
        groups.setdefault(holder(functions, line), []).append(line)
    return [MissingLines(function=name, lines=found) for name, found in groups.items()]


def import_time(file: Path, lines: Iterable[int]) -> set[int]:
    """Which of ``lines`` run when ``file`` is imported rather than when a function of it is called: those
    outside every function's body (module and class level, def and decorator lines)."""
    bodies = [(f.body, f.last) for f in _functions(file)]
    return {line for line in lines if not any(body <= line <= last for body, last in bodies)}


def _module(file: Path, own: bool, report: dict[str, Any], imported: Imported) -> ModuleCoverage:
    """One file of coverage.py's JSON report, with the lines and branches that ran as the file was imported (in
    whichever test, or before any) counted as run: which connector's test imported a module first depends
    on the order tests ran in, and importing is not what a connector's tests exercise."""
    summary = report["summary"]
    lines, arcs = imported.get(file, (set(), set()))
    missing = set(report["missing_lines"])
    missing_branches = [(a, b) for a, b in report.get("missing_branches", [])]
    ran_on_import = missing & import_time(file, lines)
    branches_on_import = [arc for arc in missing_branches if arc in arcs and arc[0] in import_time(file, {arc[0]})]
    return ModuleCoverage(
        path=display_path(file), own=own,
        statements=summary["num_statements"], covered_statements=summary["covered_lines"] + len(ran_on_import),
        branches=summary.get("num_branches", 0),
        covered_branches=summary.get("covered_branches", 0) + len(branches_on_import),
        missing=group_by_function(file, missing - ran_on_import),
        missing_branches=[arc for arc in missing_branches if arc not in branches_on_import],
    )


# file -> (lines, branches) that ran in any test or outside one
Imported = dict[Path, tuple[set[int], set[tuple[int, int]]]]


def _all_contexts(measuring: coverage.Coverage) -> Imported:
    data = measuring.get_data()
    return {Path(f): (set(data.lines(f) or ()), set(data.arcs(f) or ())) for f in data.measured_files()}


def _reached(measuring: coverage.Coverage, context: str) -> set[Path]:
    """The measured files any of ``context``'s tests ran a line of."""
    data = measuring.get_data()
    data.set_query_contexts([context])
    try:
        return {Path(f) for f in data.measured_files() if data.lines(f)}
    finally:
        data.set_query_contexts(None)


def connector_coverage(measuring: coverage.Coverage, scope: Scope, connector: str, run: str,
                       platform: str, imported: Imported) -> ConnectorCoverage | None:
    """``connector``'s coverage from ``measuring``'s data: its own modules (whether reached or not) and the other
    measured modules its tests reached; None where none of its tests ran a measured line."""
    context = f"^{re.escape(connector)}$"
    reached = _reached(measuring, context)
    if not reached:
        return None
    own = scope.own_files(connector) | scope.own(connector, reached)
    files = sorted(own | reached)
    with tempfile.TemporaryDirectory(prefix="kvconform-coverage-") as folder:
        out = Path(folder) / "coverage.json"
        try:
            measuring.json_report(morfs=[str(f) for f in files], outfile=str(out), contexts=[context],
                                  ignore_errors=True)
        except CoverageException:
            return None
        reports = json.loads(out.read_text())["files"]
    by_path = {Path(name).resolve(): report for name, report in reports.items()}
    modules = [_module(f, f in own, by_path[f], imported) for f in files
               if f in by_path and by_path[f]["summary"]["num_statements"]]  # an empty __init__.py says nothing
    modules.sort(key=lambda m: (not m.own, m.path))
    return ConnectorCoverage(run=run, platform=platform, connector=connector, modules=modules)


def summarize(measuring: coverage.Coverage, scope: Scope, run: str, platform: str) -> list[ConnectorCoverage]:
    """Every connector whose tests ran measured code, by name."""
    contexts = sorted(c for c in measuring.get_data().measured_contexts() if c != NO_CONNECTOR)
    imported = _all_contexts(measuring)
    found = (connector_coverage(measuring, scope, c, run, platform, imported) for c in contexts)
    return [c for c in found if c is not None]
