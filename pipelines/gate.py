"""Which KV connectors a vLLM change touches: the selection half of the PR gate.

Everything here reads the vLLM checkout through git and ``ast`` and never imports
or runs its code: file names, refs and sources come from a pull request and are
untrusted. Git is always called with an argument list, refs are resolved to
commit ids before use, and paths only ever travel after ``--``.

A changed file selects connectors by the first of these that applies:

1. it is shared connector infrastructure (``EVERY_CONNECTOR``): every connector;
2. Python would execute it while loading a connector: the connector's own
   module or package, the packages above it, and the helper modules it imports
   (directly or through other helpers) inside ``IMPORT_GRAPH_ROOTS``;
3. anything else: no connector.

Connectors that wrap a selected connector (``wraps`` in the connector profiles,
e.g. MultiConnector wraps ExampleConnector) are selected with it.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from conformance.factory_source import FACTORY_FILE, FactorySourceError, parse_registrations

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

# A path Python can import as a module; only such names are read from the tree.
_MODULE_FILE = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*/)*[A-Za-z_][A-Za-z0-9_]*\.py")
_COMMIT_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


class GateError(Exception):
    """A problem with the gate's input (repository, refs, checkout layout): one line."""


# --- git -------------------------------------------------------------------------------


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    """Run git in ``repo`` with an argument list; a failure is a GateError with git's message."""
    try:
        proc = subprocess.run(["git", "-c", "core.fsmonitor=false", *args], cwd=repo, input=stdin,
                              capture_output=True, check=False)
    except FileNotFoundError:
        raise GateError("git is not installed (needed to read the change)") from None
    if proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip().splitlines()
        raise GateError(f"git {args[0]} failed: {message[-1] if message else f'exit {proc.returncode}'}")
    return proc.stdout


def check_repository(repo: Path) -> Path:
    """``repo`` as an absolute path, or a GateError saying why it is not a git repository."""
    repo = Path(repo).expanduser()
    if not repo.is_dir():
        raise GateError(f"--repo {repo}: no such directory")
    try:
        _git(repo, "rev-parse", "--git-dir")
    except GateError:
        raise GateError(f"--repo {repo}: not a git repository") from None
    return repo.resolve()


def resolve_commit(repo: Path, rev: str, flag: str = "ref") -> str:
    """The commit id ``rev`` names; untrusted text never reaches git as an option."""
    if not rev or rev.startswith("-") or any(c in rev for c in "\0\n\r"):
        raise GateError(f"{flag} {rev!r}: not a valid git revision")
    try:
        out = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    except GateError:
        raise GateError(f"{flag} {rev!r}: no such commit in {repo}") from None
    sha = out.decode().strip()
    if not _COMMIT_ID.fullmatch(sha):
        raise GateError(f"{flag} {rev!r}: git answered {sha!r}, not a commit id")
    return sha


def changed_files(repo: Path, base: str, head: str) -> list[str]:
    """Files changed on ``head`` since it forked from ``base`` (both commit ids), verbatim.

    Renames are listed as a deletion plus an addition, so moving a connector's
    file away still names the old path.
    """
    try:
        fork = _git(repo, "merge-base", base, head).decode().strip()
    except GateError:
        fork = base  # unrelated histories: compare the two trees directly
    out = _git(repo, "diff", "--name-only", "-z", "--no-renames", "--no-ext-diff", fork, head, "--")
    return [name.decode("utf-8", "surrogateescape") for name in out.split(b"\0") if name]


def read_python_sources(repo: Path, commit: str, roots) -> dict[str, str]:
    """path -> source of every importable ``.py`` file under ``roots`` at ``commit``."""
    listing = _git(repo, "ls-tree", "-r", "-z", "--name-only", commit, "--", *roots)
    paths = [p for p in (n.decode("utf-8", "replace") for n in listing.split(b"\0") if n)
             if _MODULE_FILE.fullmatch(p)]
    if not paths:
        return {}
    # Only module-shaped names (checked above) go into the batch request, one per line.
    request = "".join(f"{commit}:{p}\n" for p in paths).encode()
    blob = _git(repo, "cat-file", "--batch", stdin=request)
    sources: dict[str, str] = {}
    pos = 0
    for path in paths:
        header_end = blob.index(b"\n", pos)
        header = blob[pos:header_end].split()
        if len(header) != 3 or header[1] != b"blob":
            pos = header_end + 1
            continue
        size = int(header[2])
        sources[path] = blob[header_end + 1:header_end + 1 + size].decode("utf-8", "replace")
        pos = header_end + 1 + size + 1
    return sources


# --- the factory registry --------------------------------------------------------------


def parse_factory(source: str, where: str = FACTORY_FILE) -> dict[str, str]:
    """name -> module path of every ``KVConnectorFactory.register_connector(...)`` call, in order."""
    try:
        return {name: module for name, (module, _) in parse_registrations(source, where).items()}
    except FactorySourceError as exc:
        raise GateError(str(exc)) from None


# --- shared infrastructure ---------------------------------------------------------------

# Glob syntax -> regex: ``**/`` any number of folders, ``**`` anything, ``*`` and ``?`` within a segment.
_GLOB_TOKENS = {"**/": r"(?:[^/]+/)*", "**": r".*", "*": r"[^/]*", "?": r"[^/]"}
_GLOB_SPLIT = re.compile(r"(\*\*/|\*\*|\*|\?)")


@lru_cache(maxsize=256)
def compile_glob(pattern: str) -> re.Pattern:
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
    module = _module_of(path)
    package = module if path.endswith("/__init__.py") else module.rpartition(".")[0]
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return frozenset()
    targets: set[str] = set()
    for node in _import_statements(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, package)
            if base:
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
    return frozenset(targets)


def _import_statements(tree: ast.Module):
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


# --- selection ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FileMatch:
    """What one changed file selects, and why (for the readable summary)."""

    path: str
    connectors: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Selection:
    changed_files: tuple[str, ...]
    connectors: tuple[str, ...]  # in the factory's registration order
    reasons: dict[str, list[str]]  # connector -> changed files that pulled it in
    files: tuple[FileMatch, ...]
    wrapped: dict[str, tuple[str, ...]]  # wrapper -> the selected connectors it wraps

    def as_json(self) -> dict:
        return {"changed_files": list(self.changed_files), "connectors": list(self.connectors),
                "reasons": {name: list(files) for name, files in self.reasons.items()}}


def _match_file(path: str, registry: dict[str, str], loads: dict[str, set[str]]) -> FileMatch:
    reason = shared_reason(path)
    if reason is not None:
        return FileMatch(path, tuple(registry), f"every connector: {reason}")
    own = [name for name, module in registry.items() if is_own_file(path, module)]
    loaded_by = [name for name in registry if path in loads[name] and name not in own]
    why = "; ".join(text for text in (
        own and f"the own module of {', '.join(own)}",
        loaded_by and f"executed when loading {', '.join(loaded_by)}") if text)
    users = tuple(name for name in registry if name in own or name in loaded_by)
    return FileMatch(path, users, why or "no connector loads it")


def select(changed: list[str], registry: dict[str, str], tree: SourceTree,
           wraps: dict[str, list[str]]) -> Selection:
    """The connectors ``changed`` touches; pure, so it is tested without git."""
    # Parsing the import graph is most of the cost: skip it when no changed file is in it.
    in_graph = any(shared_reason(p) is None and p.startswith(tuple(f"{r}/" for r in IMPORT_GRAPH_ROOTS))
                   for p in changed)
    loads = {name: loaded_files(tree, module) if in_graph else set() for name, module in registry.items()}
    matches = tuple(_match_file(path, registry, loads) for path in changed)
    reasons: dict[str, list[str]] = {}
    for match in matches:
        for name in match.connectors:
            reasons.setdefault(name, []).append(match.path)
    wrapped = _add_wrappers(reasons, registry, wraps, changed)
    connectors = tuple(name for name in registry if name in reasons)
    return Selection(tuple(changed), connectors, {n: reasons[n] for n in connectors}, matches, wrapped)


def _add_wrappers(reasons: dict[str, list[str]], registry: dict[str, str],
                  wraps: dict[str, list[str]], order: list[str]) -> dict[str, tuple[str, ...]]:
    """Select the wrappers of selected connectors, repeating until nothing changes
    (a wrapper may itself be wrapped); a wrapper inherits the files of what it wraps."""
    wrapped: dict[str, tuple[str, ...]] = {}
    changed = True
    while changed:
        changed = False
        for wrapper, inner in wraps.items():
            hit = tuple(name for name in inner if name in reasons)
            if wrapper not in registry or not hit:
                continue
            files = set(reasons.get(wrapper, ())).union(*(reasons[name] for name in hit))
            merged = [path for path in order if path in files]
            if merged != reasons.get(wrapper) or hit != wrapped.get(wrapper):
                reasons[wrapper], wrapped[wrapper] = merged, hit
                changed = True
    return wrapped


def profile_wraps() -> dict[str, list[str]]:
    """wrapper -> wrapped connectors, from the connector profiles."""
    from conformance.profiles import load_profiles

    return {name: list(p.wraps) for name, p in load_profiles().connectors.items() if p.wraps}


def select_change(repo: Path, base: str, head: str = "HEAD") -> Selection:
    """Read the change between ``base`` and ``head`` in ``repo`` and select its connectors."""
    repo = check_repository(repo)
    base_id = resolve_commit(repo, base, "--base")
    head_id = resolve_commit(repo, head, "--head")
    sources = read_python_sources(repo, head_id, IMPORT_GRAPH_ROOTS)
    if FACTORY_FILE not in sources:
        raise GateError(f"{repo} at {head}: no {FACTORY_FILE}; is this a vLLM checkout?")
    registry = parse_factory(sources[FACTORY_FILE], f"{head}:{FACTORY_FILE}")
    return select(changed_files(repo, base_id, head_id), registry, SourceTree(sources), profile_wraps())
