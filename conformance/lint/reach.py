"""What a connector's code uses from the rest of vLLM: the definitions the lint reads beyond its files.

vLLM moves helpers between packages (``pin_tensor`` left ``v1/simple_kv_offload/`` for
``vllm/utils/host_memory.py``), so a closure of whole files loses a device call that did not change. The
lint follows every name a connector's files use at run time, through their imports, into the vLLM module
that defines it, and reads that definition (a function, or a class with its methods) plus the module's
top level. Only the definition: vLLM's shared modules (``parallel_state``, ``gpu_sync_debug``) hold CUDA
calls behind conditions the lint cannot see through, and reading them whole or following calls would
hand every connector vLLM's findings. Read with ``ast``; each file is parsed once per process
(``module_facts``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .findings import Finding, lint_file, lint_source, lint_tree
from .names import dotted, import_aliases

VLLM = "vllm"
REEXPORT_DEPTH = 4  # ``from .x import y`` in a package's __init__, followed this many times to the definition
ANNOTATIONS = frozenset({"annotation", "returns"})  # fields that ``from __future__ import annotations`` never runs
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class ModuleFacts:
    """What the lint needs of one file, from one parse: its findings and the names it defines and uses."""

    findings: tuple[Finding, ...]
    defines: frozenset[str]  # names it defines at its top level
    imports: dict[str, str]  # names it imports at its top level -> their origin, as written (may be relative)
    uses: frozenset[str] | None  # dotted names it uses at run time, resolved (absolute); None: not asked for


# (path, mtime_ns, size) -> its facts: connectors share most of the files they read.
_FACTS: dict[tuple[str, int, int], ModuleFacts] = {}


def module_facts(path: Path, shown: str, uses: bool = False) -> ModuleFacts:
    """The facts of the file ``path``, whose path inside vLLM is ``shown`` (``vllm/...``, for relative
    imports); ``uses``: with the names it uses (a walk of the whole file, needed of files read whole only)."""
    try:
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        if key not in _FACTS or (uses and _FACTS[key].uses is None):
            _FACTS[key] = _read(path, path.read_bytes(), shown, uses)
        return _FACTS[key]
    except OSError:  # unreadable: its finding (KVC000) is what lint_file says
        return ModuleFacts(tuple(lint_file(path)), frozenset(), {}, frozenset())


def _read(path: Path, data: bytes, shown: str, uses: bool) -> ModuleFacts:
    try:
        tree = ast.parse(data, filename=str(path))
    except (SyntaxError, ValueError):
        return ModuleFacts(tuple(lint_source(data, path)), frozenset(), {}, frozenset())
    defines: set[str] = set()
    for node in tree.body:
        if isinstance(node, DEFINITIONS):
            defines.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defines.update(t.id for t in targets if isinstance(t, ast.Name))
    imports = import_aliases(ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))],
                                        type_ignores=[]))
    aliases = import_aliases(tree)
    return ModuleFacts(tuple(lint_tree(tree, data, path, aliases)), frozenset(defines), imports,
                       frozenset(used_names(tree, shown, aliases)) if uses else None)


def module_file(root: Path, module: str) -> str | None:
    """``vllm/a/b.py`` or ``vllm/a/b/__init__.py`` for ``vllm.a.b`` under ``root``; None when neither is a file."""
    base = Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if (root / candidate).is_file():
            return candidate.as_posix()
    return None


def module_of(path: str) -> str:
    """``vllm.a.b`` for ``vllm/a/b.py`` and for ``vllm/a/b/__init__.py``."""
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def absolute(origin: str, path: str) -> str:
    """An alias's origin (``.x.y``, ``..y``, ``a.b``) as an absolute dotted name, seen from the file ``path``."""
    level = len(origin) - len(origin.lstrip("."))
    if not level:
        return origin
    package = module_of(path) if path.endswith("/__init__.py") else module_of(path).rpartition(".")[0]
    parts = package.split(".")
    anchor = ".".join(parts[:max(len(parts) - (level - 1), 0)])
    rest = origin[level:]
    return f"{anchor}.{rest}" if rest and anchor else rest or anchor


def _runtime_nodes(tree: ast.Module) -> Iterator[ast.AST]:
    """The nodes of ``tree`` that can run: not annotations, not ``if TYPE_CHECKING:`` bodies."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and (dotted(node.test) or "").endswith("TYPE_CHECKING"):
            stack.extend(node.orelse)
            continue
        yield node
        for name, value in ast.iter_fields(node):
            if name in ANNOTATIONS:
                continue
            if isinstance(value, ast.AST):
                stack.append(value)
            elif isinstance(value, list):
                stack.extend(v for v in value if isinstance(v, ast.AST))


def used_names(tree: ast.Module, path: str, aliases: dict[str, str] | None = None) -> set[str]:
    """Every dotted name ``tree`` (the file ``path``) uses at run time, resolved through its imports
    (``aliases``: its ``import_aliases``, when known) to where it comes from; a name only in annotations
    or under ``TYPE_CHECKING`` runs nothing."""
    found = import_aliases(tree) if aliases is None else aliases
    aliases = {local: absolute(origin, path) for local, origin in found.items()}
    names = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, (ast.Attribute, ast.Name)):
            name = dotted(node)
            if name is not None:
                head, dot, rest = name.partition(".")
                names.add(aliases.get(head, head) + dot + rest)
    return names


def definition(root: Path, module: str, attr: str | None) -> tuple[str, str | None] | None:
    """(file, top-level name) that defines ``module.attr``, through re-exports; None when no file of vLLM does.

    ``attr`` None stands for the module itself (its top level only).
    """
    for _ in range(REEXPORT_DEPTH + 1):
        file = module_file(root, module)
        if file is None:
            return None
        if attr is None:
            return file, None
        facts = module_facts(root / file, file)
        origin = facts.imports.get(attr)
        if attr in facts.defines or origin is None:
            return file, attr
        module, _, attr = absolute(origin, file).rpartition(".")
        if module_file(root, f"{module}.{attr}"):  # a re-exported submodule: its top level
            module, attr = f"{module}.{attr}", None
    return None


def split_module(root: Path, name: str) -> tuple[str, str | None] | None:
    """``vllm.a.b.f.g`` as (the longest module prefix that is a file of vLLM, the next part or None)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        module = ".".join(parts[:end])
        if module_file(root, module):
            return module, parts[end] if end < len(parts) else None
    return None


def reached_definitions(root: Path, files: Iterable[str]) -> dict[str, set[str | None]]:
    """file -> the top-level names of it that ``files`` use (None: only its top level), for vLLM files
    outside ``files``: what the lint reads beyond the connector's whole files."""
    whole = set(files)
    reached: dict[str, set[str | None]] = {}
    for path in sorted(whole):
        for name in module_facts(root / path, path, uses=True).uses or ():
            if name != VLLM and not name.startswith(f"{VLLM}."):
                continue
            target = split_module(root, name)
            found = definition(root, *target) if target else None
            if found is not None and found[0] not in whole:
                reached.setdefault(found[0], set()).add(found[1])
    return reached


def in_definitions(function: str, names: Iterable[str | None]) -> bool:
    """Whether code in ``function`` (``Class.method``, ``<module>`` excluded) is inside one of ``names``."""
    return any(name is not None and (function == name or function.startswith(f"{name}.")) for name in names)
