"""The files a connector runs inside vLLM: what the lint check reads for it.

A connector's own module is a small part of what it executes: SimpleCPUOffload's
CUDA stream call sits in ``vllm/v1/simple_kv_offload/worker.py``, HiSparse's in
``vllm/v1/hisparse/``. The PR gate already knows which files loading a
connector executes (``conformance.import_graph``); the lint reads the same files
of the vLLM this process would import (the installed one, or the gate's overlay
of a pull request), found without importing it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from ..vllm_build.import_graph import SourceTree, installed_sources, is_own_file, loaded_files
from .findings import Finding, lint_files


@dataclass(frozen=True)
class Closure:
    """A connector's files: ``root`` holds the ``vllm`` package; ``files`` are relative to it, own files first."""

    root: Path
    files: tuple[str, ...]

    def paths(self) -> list[Path]:
        return [self.root / f for f in self.files]

    def lint(self) -> list[Finding]:
        """Findings in every file, each named by its path inside vLLM (``vllm/...``), not this machine's."""
        findings = lint_files(self.paths())
        shown = {str(self.root / f): f for f in self.files}
        return sorted(replace(f, path=shown.get(f.path, f.path)) for f in findings)


def vllm_root() -> Path | None:
    """The folder that holds the importable ``vllm`` package, found without importing it."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


@lru_cache(maxsize=4)
def _tree(root: Path) -> SourceTree:
    return SourceTree(installed_sources(root))


def connector_closure(module: str, root: Path | None = None) -> Closure | None:
    """The files loading ``module`` (a vLLM connector module) executes; None when vLLM or the module is absent."""
    root = root or vllm_root()
    if root is None:
        return None
    tree = _tree(root)
    files = loaded_files(tree, module)
    if not any(is_own_file(f, module) for f in files):
        return None
    ordered = sorted(files, key=lambda f: (not is_own_file(f, module), f))
    return Closure(root, tuple(ordered))
