"""The files a connector named by module path runs inside its own package: what the lint reads for it.

An out-of-tree connector's module often only delegates: the device calls sit in helper modules of its own
package (a worker helper that creates CUDA events and streams), so linting the named module alone passes a
connector that crashes off CUDA. The lint reads every module of the connector's top-level package that its
module reaches by import, transitively, at module level and inside functions, relative or absolute, as it
reads the helpers of vLLM's in-tree connectors (``closure.py``), and with the same import graph
(``vllm_install/import_graph.py``). Modules of other distributions (torch, numpy, vLLM) are not read: their
findings are not the connector's. An import that names no Python file of the package (a compiled core, an
optional module that is absent) is passed over. Nothing is imported: the package is found with ``find_spec``
of its top-level name, which runs none of its code.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from collections.abc import Sequence
from pathlib import Path

from ..vllm_install.import_graph import SourceTree, installed_sources, is_own_file, loaded_files
from .closure import Closure, connector_closure
from .reach import VLLM, module_file


def top_level(module: str) -> str:
    """The top-level package (or module) of the dotted module name ``module``: whose files the lint reads."""
    return module.partition(".")[0]


def package_roots(top: str, search: Sequence[Path] = ()) -> list[Path]:
    """The folders that hold the top-level package or module ``top`` on this Python's path, else in the folders
    ``search`` (a namespace package may have several), found without importing it; none when it cannot be found."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):  # ValueError: a module in sys.modules without a spec
        spec = None
    if spec is None and search:
        spec = importlib.machinery.PathFinder.find_spec(top, [str(folder) for folder in search])
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(location).parent for location in spec.submodule_search_locations]
    return [Path(spec.origin).parent] if spec.origin and spec.has_location else []


def package_sources(root: Path, top: str) -> dict[str, str]:
    """path (relative to ``root``) -> source of every Python file of the top-level package or module ``top``."""
    if (root / top).is_dir():
        return installed_sources(root, {top: "the connector's own package"})
    single = root / f"{top}.py"
    try:
        return {single.name: single.read_text(encoding="utf-8", errors="replace")}
    except OSError:
        return {}


def package_closure(module: str, search: Sequence[Path] = ()) -> Closure | None:
    """The files of its own top-level package that loading ``module`` executes, the module's own first;
    None when no Python file of ``module`` can be found on this Python's path (or in ``search``)."""
    top = top_level(module)
    for root in package_roots(top, search):
        if module_file(root, module) is None:
            continue
        files = loaded_files(SourceTree(package_sources(root, top)), module)
        return Closure(root, tuple(sorted(files, key=lambda f: (not is_own_file(f, module), f))))
    return None


def module_closure(module: str, search: Sequence[Path] = ()) -> Closure | None:
    """What the lint reads for the connector module ``module``: a module of vLLM's gets vLLM's closure (its
    files and the definitions they use), any other the modules of its own package it reaches by import (found
    on this Python's path, else in ``search``)."""
    return connector_closure(module) if top_level(module) == VLLM else package_closure(module, search)


def closure_words(module: str, closure: Closure) -> str:
    """What a closure of ``module`` is, in words for a report: ``the 3 file(s) of its package mypkg it runs``."""
    top = top_level(module)
    owner = "vLLM" if top == VLLM else f"its package {top}"
    return f"the {len(closure.files)} file(s) of {owner} it runs"
