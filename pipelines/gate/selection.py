"""Which KV connectors a vLLM change touches: the selection half of the PR gate.

Everything here reads the vLLM checkout through git (``repository``) and ``ast``
and never imports or runs its code: file names, refs and sources come from a pull
request and are untrusted.

A changed file selects connectors by the first of these that applies:

1. it is shared connector infrastructure (``EVERY_CONNECTOR``): every connector;
2. Python would execute it while loading a connector: the connector's own
   module or package, the packages above it, and the helper modules it imports
   (directly or through other helpers) inside ``IMPORT_GRAPH_ROOTS``;
3. anything else: no connector.

Connectors that wrap a selected connector (``wraps`` in the connector profiles,
e.g. MultiConnector wraps ExampleConnector) are selected with it. Where a selected
connector can run is its profile's claim (``claimed_platforms``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from kvconform import platforms
from kvconform.conformance.vllm_install.factory import FACTORY_FILE, FactorySourceError, parse_registrations
from kvconform.conformance.vllm_install.import_graph import (
    IMPORT_GRAPH_ROOTS,
    SourceTree,
    is_own_file,
    loaded_files,
    shared_reason,
)

from .repository import GateError, changed_files, check_repository, fork_point, read_python_sources, resolve_commit

# --- the factory registry --------------------------------------------------------------


def parse_factory(source: str, where: str = FACTORY_FILE) -> dict[str, str]:
    """name -> module path of every ``KVConnectorFactory.register_connector(...)`` call, in order."""
    try:
        return {name: module for name, (module, _) in parse_registrations(source, where).items()}
    except FactorySourceError as exc:
        raise GateError(str(exc)) from None


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
    head: str = ""  # the head commit id, once read from a repository
    fork: str = ""  # the commit head forked from base at (the change's own base), once read from a repository

    def as_json(self) -> dict[str, list[str] | dict[str, list[str]]]:
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
    from kvconform.conformance.connectors.profiles import load_profiles

    return {name: list(p.wraps) for name, p in load_profiles().connectors.items() if p.wraps}


def claimed_platforms(connector: str) -> tuple[str, ...]:
    """The platforms a connector claims (its profile's ``requires.platforms``; none listed: all)."""
    from kvconform.conformance.connectors.profiles import profile_for

    claimed = profile_for(connector).requires.platforms
    return tuple(p for p in platforms.PLATFORMS if claimed is None or p in claimed)


def select_change(repo: Path, base: str, head: str = "HEAD") -> Selection:
    """Read the change between ``base`` and ``head`` in ``repo`` and select its connectors."""
    repo = check_repository(repo)
    base_id = resolve_commit(repo, base, "--base")
    head_id = resolve_commit(repo, head, "--head")
    sources = read_python_sources(repo, head_id, IMPORT_GRAPH_ROOTS)
    if FACTORY_FILE not in sources:
        raise GateError(f"{repo} at {head}: no {FACTORY_FILE}; is this a vLLM checkout?")
    registry = parse_factory(sources[FACTORY_FILE], f"{head}:{FACTORY_FILE}")
    fork = fork_point(repo, base_id, head_id)
    selection = select(changed_files(repo, base_id, head_id, fork), registry, SourceTree(sources), profile_wraps())
    return replace(selection, head=head_id, fork=fork)
