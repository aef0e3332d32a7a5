"""The files a connector runs inside vLLM: what the lint check reads for it.

A connector's own module is a small part of what it executes (SimpleCPUOffload's CUDA stream call sits
in ``vllm/v1/simple_kv_offload/worker.py``). The PR gate already knows which files loading a connector
executes (``vllm_install.import_graph``); the lint reads those files whole, of the vLLM this
process would import (installed, or the gate's overlay), without importing it, and beyond them the
definitions of every name they use (``reach.py``). A pinned finding that is gone is told apart
(``Closure.unfound``): the code is gone, or the lint no longer reads its place.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from ..vllm_install.import_graph import SourceTree, installed_sources, is_own_file, loaded_files, shared_reason
from .checker import MODULE_SCOPE
from .findings import Finding
from .reach import in_definitions, module_facts, reached_definitions


@dataclass(frozen=True)
class Closure:
    """A connector's files: ``root`` holds the ``vllm`` package; ``files`` are relative to it, own files first.

    ``parts`` names the files read in part: file -> the top-level definitions read of it (None, or no
    definition, reads its top level only); every other file is read whole.
    """

    root: Path
    files: tuple[str, ...]
    parts: dict[str, frozenset[str | None]] = field(default_factory=dict)

    def paths(self) -> list[Path]:
        return [self.root / f for f in self.files]

    def reads(self, file: str, function: str) -> bool:
        """Whether the lint reads the code of ``function`` (qualified, or ``<module>``) in ``file``."""
        if file not in self.files:
            return False
        return file not in self.parts or function == MODULE_SCOPE or in_definitions(function, self.parts[file])

    def lint(self) -> list[Finding]:
        """Findings in the code read, each named by its path inside vLLM (``vllm/...``), not this machine's."""
        found = (replace(f, path=file) for file in self.files for f in module_facts(self.root / file, file).findings)
        return sorted(f for f in found if self.reads(f.path, f.function))

    def unfound(self, key: dict[str, str]) -> str:
        """Why a finding (``Finding.key()``) an expectation pins is not among ``lint()``'s, in words."""
        file, function, call = key["file"], key["function"], key["call"]
        if self.reads(file, function):
            read = "whole" if file not in self.parts else f"for {function}"
            return f"the code is gone: the lint reads {file} {read}, and {function} there makes no {call} call"
        if file in self.parts:
            read = ", ".join(sorted(n for n in self.parts[file] if n)) or "its top level"
            return (f"the lint no longer reads it: of {file} it reads only what the connector's code uses "
                    f"({read}), not {function}")
        if (self.root / file).is_file():
            return f"the lint no longer reads it: {file} is in this vLLM, but the connector's code no longer uses it"
        return f"the code is gone from there: this vLLM has no {file}"


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
    """The code loading ``module`` (a vLLM connector module) executes; None when vLLM or the module is absent."""
    root = root or vllm_root()
    if root is None:
        return None
    tree = _tree(root)
    files = loaded_files(tree, module)
    if not any(is_own_file(f, module) for f in files):
        return None
    parts = {file: frozenset(names) for file, names in reached_definitions(root, files).items()
             if shared_reason(file) is None}
    ordered = sorted(files, key=lambda f: (not is_own_file(f, module), f)) + sorted(parts)
    return Closure(root, tuple(ordered), parts)
