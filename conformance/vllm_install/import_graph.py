"""Which files of vLLM Python executes to load a connector: the import graph, read with ``ast``.

Pure: it reads sources it is handed (a PR's files from git for the gate, the
installed vLLM's files for the lint) and never imports or runs them. The PR gate
selects the connectors a changed file reaches; the lint check reads every file a
connector runs, not just its own module. Both need one answer to "which files
does loading this connector execute", so it lives here, below both.

A connector's files are its own module or package, the packages above it, and
the helper modules it imports (directly or through other helpers) inside
``IMPORT_GRAPH_ROOTS``. Shared connector infrastructure (``EVERY_CONNECTOR``)
is not followed: every connector loads it, and following it (``v1/__init__``
imports DecodeBench) would make every connector depend on every other.
"""

from __future__ import annotations

import ast
import os
import re
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .factory import FACTORY_FILE

# Changes to these select every connector. Globs: ``*`` stays within one path
# segment, ``**/`` spans any number of folders, a trailing ``/**`` is everything below.
EVERY_CONNECTOR: dict[str, str] = {
    "vllm/distributed/kv_transfer/__init__.py": "package init executed by every connector import",
    "vllm/distributed/kv_transfer/kv_transfer_state.py": "creates and holds the process's connector",
    "vllm/distributed/kv_transfer/kv_connector/__init__.py": "package init executed by every connector import",
    "vllm/distributed/kv_transfer/kv_connector/base.py": "the connector base class",
    FACTORY_FILE: "the connector registry and constructor",
    "vllm/distributed/kv_transfer/kv_connector/utils.py": "helpers shared by the runner and most connectors",
    "vllm/distributed/kv_transfer/kv_connector/v1/__init__.py": "package init executed by every v1 connector import",
    "vllm/distributed/kv_transfer/kv_connector/v1/base.py": "the v1 connector base class (the API under test)",
    "vllm/distributed/kv_transfer/kv_connector/v1/metrics.py": "connector stats imported by the base class",
    "vllm/config/kv_transfer.py": "KVTransferConfig, how every connector is configured",
    "vllm/config/cache.py": "CacheConfig: block size and cache dtype every connector sees",
    "vllm/v1/kv_cache_interface.py": "KV cache specs and config: the shapes connectors are handed",
    "vllm/v1/kv_cache_layout.py": "the physical KV layout connectors read and write",
    "vllm/v1/kv_cache_spec_registry.py": "KV cache spec registry behind the cache config",
    "vllm/v1/attention/backends/**": "attention backends decide the KV layout and metadata connectors see",
    "vllm/v1/attention/backend.py": "the attention backend interface",
    "vllm/v1/attention/selector.py": "picks the attention backend, hence the KV layout",
    "vllm/v1/worker/**/*kv*": "the model runner's connector hooks",
    "vllm/v1/worker/utils.py": "KV cache allocation (allocate_kv_cache) the harness uses",
    "vllm/v1/core/kv_cache_*": "KV cache manager and config building the scheduler side relies on",
    "vllm/v1/core/block_pool.py": "block ids handed to connectors",
    "vllm/v1/core/sched/scheduler.py": "the scheduler calls the connector's scheduler side",
    "vllm/v1/core/sched/output.py": "SchedulerOutput, the input of build_connector_meta",
    "vllm/v1/outputs.py": "KVConnectorOutput, how finished transfers are reported",
    "vllm/forward_context.py": "the forward context connectors read layers and attention metadata from",
    "vllm/model_executor/layers/attention/kv_transfer_utils.py": "the attention layer's save/load hooks",
}

# Trees whose Python files are attributed to connectors by static imports: a file
# here selects the connectors whose loading executes it.
IMPORT_GRAPH_ROOTS: dict[str, str] = {
    "vllm/distributed/kv_transfer": "connectors and their helpers",
    "vllm/v1/kv_offload": "OffloadingConnector's back ends",
    "vllm/v1/simple_kv_offload": "SimpleCPUOffloadConnector's back ends",
    "vllm/v1/hisparse": "HiSparseConnector's runtime",
}


# --- shared infrastructure ---------------------------------------------------------------

# Glob syntax -> regex: ``**/`` any number of folders, ``**`` anything, ``*`` and ``?`` within a segment.
_GLOB_TOKENS = {"**/": r"(?:[^/]+/)*", "**": r".*", "*": r"[^/]*", "?": r"[^/]"}
_GLOB_SPLIT = re.compile(r"(\*\*/|\*\*|\*|\?)")


@lru_cache(maxsize=256)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """A path glob as a regex matched against a whole path (``fnmatch``'s ``*`` would cross folders)."""
    return re.compile("".join(_GLOB_TOKENS.get(part) or re.escape(part) for part in _GLOB_SPLIT.split(pattern)))


def shared_reason(path: str) -> str | None:
    """Why ``path`` selects every connector, or None when it does not."""
    for pattern, reason in EVERY_CONNECTOR.items():
        if compile_glob(pattern).fullmatch(path):
            return reason
    return None


# --- static imports ----------------------------------------------------------------------


def _module_of(path: str) -> str:
    parts = path[:-3].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


@dataclass
class SourceTree:
    """The Python files under the import-graph roots, and who imports whom among them."""

    sources: dict[str, str]
    _files_by_module: dict[str, str] = field(init=False, default_factory=dict)
    _imports: dict[str, set[str]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._files_by_module = {_module_of(p): p for p in self.sources}

    def file_of(self, module: str) -> str | None:
        return self._files_by_module.get(module)

    def imported_files(self, path: str) -> set[str]:
        """Files in the tree that importing ``path`` executes: its imports and their packages."""
        if path not in self._imports:
            targets = imported_modules(path, self.sources[path])
            modules = targets | {parent for t in targets for parent in _parents(t)}
            self._imports[path] = {f for f in map(self.file_of, modules) if f and f != path}
        return self._imports[path]


@lru_cache(maxsize=1024)
def imported_modules(path: str, source: str) -> frozenset[str]:
    """The absolute module names ``path``'s import statements name (``from a import b``: a and a.b).

    Cached on the source text: parsing is most of a selection's time, and a process
    that selects for several changes (a bot, the tests) sees the same untouched files again.
    """
    targets: set[str] = set()
    for base, names in import_targets(path, source):
        targets.add(base)
        targets.update(f"{base}.{name}" for name in names)
    return frozenset(targets)


def import_targets(path: str, source: str) -> list[tuple[str, tuple[str, ...]]]:
    """Each import statement of ``path`` as (absolute module, names imported from it; empty for ``import m``).

    For a caller that knows which modules exist and can tell ``from pkg import module``
    (an import of the module) from ``from pkg import name`` (of the package itself).
    """
    module = _module_of(path)
    package = module if path.endswith("/__init__.py") else module.rpartition(".")[0]
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    targets: list[tuple[str, tuple[str, ...]]] = []
    for node in _import_statements(tree):
        if isinstance(node, ast.Import):
            targets.extend((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, package)
            if base:
                targets.append((base, tuple(alias.name for alias in node.names)))
    return targets


def _import_statements(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, however deeply nested in functions, classes, ifs and trys.

    Imports are statements, so only statement lists are searched: much faster
    than ``ast.walk`` over every expression of a 3000-line connector.
    """
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        for block in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, block, None)
            if isinstance(children, list):
                stack.extend(children)


def _absolute(module: str | None, level: int, package: str) -> str | None:
    if level == 0:
        return module
    parts = package.split(".")
    if level - 1 > len(parts):
        return None
    anchor = ".".join(parts[:len(parts) - (level - 1)])
    return f"{anchor}.{module}" if module else anchor


def is_own_file(path: str, module: str) -> bool:
    """Whether ``path`` is the connector module ``module`` itself: its file, or a file in its package."""
    base = module.replace(".", "/")
    return path == f"{base}.py" or path.startswith(f"{base}/")


def loaded_files(tree: SourceTree, module: str) -> set[str]:
    """Files Python executes to load a connector module, within the import-graph roots.

    Shared infrastructure (``EVERY_CONNECTOR``) is not followed: it selects every
    connector already, and following it (``v1/__init__`` imports DecodeBench) would
    make every connector depend on every other.
    """
    start = {p for p in tree.sources if is_own_file(p, module)}
    start |= {f for f in map(tree.file_of, _parents(module)) if f}
    seen = {p for p in start if shared_reason(p) is None}
    queue = deque(seen)
    while queue:
        for imported in tree.imported_files(queue.popleft()):
            if imported not in seen and shared_reason(imported) is None:
                seen.add(imported)
                queue.append(imported)
    return seen


def installed_sources(root: Path, roots: Mapping[str, str] = IMPORT_GRAPH_ROOTS) -> dict[str, str]:
    """path -> source of every ``.py`` file under ``roots`` of an installed vLLM whose package folder
    is ``root``'s ``vllm/`` (``root`` is the folder that holds ``vllm``), as the gate reads a checkout.

    Symlinked folders are followed: the PR gate's overlay links the folders a change leaves alone.
    """
    sources: dict[str, str] = {}
    for top in roots:
        for folder, dirs, files in os.walk(root / top, followlinks=True):
            dirs.sort()
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                file = Path(folder, name)
                try:
                    sources[file.relative_to(root).as_posix()] = file.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
    return sources
