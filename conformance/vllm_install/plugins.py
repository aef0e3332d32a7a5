"""Connectors that vLLM plugins register, found without importing vLLM or the plugins.

vLLM runs every ``vllm.general_plugins`` entry point at start-up (``vllm/plugins/__init__.py``:
``load_general_plugins``; only the entry points ``VLLM_PLUGINS`` names, where it is set), and a plugin may call
``KVConnectorFactory.register_connector(name, module_path, class_name)`` there. Such a connector is as
selectable by name as a built-in one, so kvconform must know it where it selects connectors: in the xdist
controller, which never imports vLLM. It reads each plugin's source with ``ast``, as ``factory.py`` reads
vLLM's factory: the entry point's ``module:function``, and the calls with string literal arguments in that
function and in the functions of the same module it calls, in source order, whatever conditions guard them.
A call whose arguments are not literals, and a plugin whose source cannot be found or read, is said in the
run header, never guessed.

Registration is replayed as vLLM makes it: the built-in connectors first (the factory registers them on
import), then the plugins in entry point order. ``register_connector`` raises ValueError on a name already
registered, and ``load_general_plugins`` does not catch it, so vLLM registers neither that plugin's later
calls nor anything of the plugins after it; the name keeps its first owner, and the header says so.

The test processes import vLLM anyway: before one builds a plugin's connector, vLLM's own
``load_general_plugins`` runs the plugins there (``register_in_vllm``), as vLLM's engine core and workers do
before they build one, so the name resolves through ``KVConnectorFactory`` like a built-in one.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from .factory import REGISTRATION_ARGS, is_registration, string_args

GROUP = "vllm.general_plugins"  # vllm/plugins/__init__.py: DEFAULT_PLUGINS_GROUP
ALLOW_LIST_ENV = "VLLM_PLUGINS"  # vllm/envs.py: comma-separated entry point names; unset: all


@dataclass(frozen=True)
class PluginOrigin:
    """The plugin that registers a connector: its distribution and its entry point."""

    distribution: str
    entry_point: str  # "name = module:function", as entry_points.txt says it

    def describe(self) -> str:
        return f"vLLM plugin {self.entry_point!r} of distribution {self.distribution}"


@dataclass(frozen=True)
class PluginConnector:
    """A connector a plugin registers: ``register_connector(name, module_path, class_name)``."""

    name: str
    module_path: str
    class_name: str
    origin: PluginOrigin


@dataclass(frozen=True)
class PluginRegistry:
    """What the installed plugins register, and a line for each thing static reading cannot settle."""

    connectors: dict[str, PluginConnector] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def header_lines(self) -> list[str]:
        """The run header's lines: which plugin registers each connector, then what could not be settled."""
        return [*(f"kvconform: connector {c.name} ({c.module_path}:{c.class_name}) is registered by "
                  f"{c.origin.describe()}" for c in self.connectors.values()),
                *(f"kvconform: {note}" for note in self.notes)]


@dataclass(frozen=True)
class _Call:
    """One ``register_connector`` call in a plugin's source: its arguments, or None where they are not literals."""

    args: tuple[str, ...] | None
    where: str  # file:line


class PluginSourceError(Exception):
    """A plugin whose registrations cannot be read from its source; the message says why."""


def allowed(points: Iterable[EntryPoint], allow_list: str | None) -> list[EntryPoint]:
    """The entry points vLLM loads: all, or those ``VLLM_PLUGINS`` names (split on commas, as vllm/envs.py does)."""
    names = None if allow_list is None else allow_list.split(",")
    return [point for point in points if names is None or point.name in names]


def module_file(module: str, path: Iterable[str]) -> Path | None:
    """The source file of ``module`` on ``path`` (a module file or a package's ``__init__.py``), found without
    importing its packages (``importlib.util.find_spec`` would run them)."""
    relative = Path(*module.split("."))
    for entry in path:
        base = Path(entry or ".") / relative
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _calls_in_order(node: ast.AST) -> list[ast.Call]:
    return sorted((n for n in ast.walk(node) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))


def _registrations(function: ast.FunctionDef, functions: dict[str, ast.FunctionDef], where: str,
                   seen: set[str]) -> Iterator[_Call]:
    """The function's ``register_connector`` calls in source order, with those of the same module's functions it
    calls (by plain name) in their place."""
    seen.add(function.name)
    for call in _calls_in_order(function):
        if is_registration(call):
            yield _Call(string_args(call, REGISTRATION_ARGS), f"{where}:{call.lineno}")
        elif isinstance(call.func, ast.Name) and call.func.id in functions and call.func.id not in seen:
            yield from _registrations(functions[call.func.id], functions, where, seen)


def read_calls(source: str, function: str, where: str) -> list[_Call]:
    """The ``register_connector`` calls the plugin function ``function`` of a module's ``source`` makes."""
    try:
        tree = ast.parse(source, filename=where)
    except SyntaxError as exc:
        raise PluginSourceError(f"{where}:{exc.lineno}: cannot parse: {exc.msg}") from None
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    if function not in functions:
        raise PluginSourceError(f"{where}: no module-level function {function!r}")
    return list(_registrations(functions[function], functions, where, set()))


def _plugin_calls(point: EntryPoint, path: Iterable[str]) -> list[_Call]:
    if not point.attr or "." in point.attr:
        raise PluginSourceError(f"entry point {point.value!r} names no module-level function (module:function)")
    file = module_file(point.module, path)
    if file is None:
        raise PluginSourceError(f"no source file for module {point.module!r} on the import path")
    try:
        source = file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise PluginSourceError(f"{file}: cannot read: {exc}") from None
    return read_calls(source, point.attr, str(file))


def origin_of(point: EntryPoint) -> PluginOrigin:
    distribution = point.dist.name if point.dist is not None else "(unknown distribution)"
    return PluginOrigin(distribution, f"{point.name} = {point.value}")


def replay(in_tree: Iterable[str], plugins: Iterable[tuple[PluginOrigin, list[_Call] | PluginSourceError]]
           ) -> PluginRegistry:
    """Register each plugin's calls after the built-in names, as vLLM would: a duplicate name ends the loading."""
    owners = dict.fromkeys(in_tree, "vLLM's factory")
    connectors: dict[str, PluginConnector] = {}
    notes: list[str] = []
    plugins = list(plugins)
    for index, (origin, calls) in enumerate(plugins):
        if isinstance(calls, PluginSourceError):
            notes.append(f"{origin.describe()}: its connectors cannot be read from its source ({calls}); "
                         f"none of them is tested")
            continue
        for call in calls:
            if call.args is None:
                notes.append(f"{origin.describe()} calls register_connector at {call.where} with arguments that "
                             f"are not string literals: kvconform cannot tell what it registers without running "
                             f"it, so that connector is not tested")
                continue
            name, module_path, class_name = call.args
            if name in owners:
                later = [other.entry_point for other, _ in plugins[index + 1:]]
                notes.append(f"{origin.describe()} registers {name} at {call.where}, already registered by "
                             f"{owners[name]}: vLLM's register_connector raises ValueError (\"Connector '{name}' "
                             f"is already registered.\") and load_general_plugins stops there, so {name} stays "
                             f"{owners[name]}'s and vLLM registers none of this plugin's later calls"
                             + (f" nor the plugins after it ({', '.join(later)})" if later else ""))
                return PluginRegistry(connectors, tuple(notes))
            owners[name] = origin.describe()
            connectors[name] = PluginConnector(name, module_path, class_name, origin)
    return PluginRegistry(connectors, tuple(notes))


@lru_cache(maxsize=8)
def _discover(in_tree: tuple[str, ...], allow_list: str | None, path: tuple[str, ...]) -> PluginRegistry:
    plugins: list[tuple[PluginOrigin, list[_Call] | PluginSourceError]] = []
    for point in allowed(entry_points(group=GROUP), allow_list):
        try:
            plugins.append((origin_of(point), _plugin_calls(point, path)))
        except PluginSourceError as exc:
            plugins.append((origin_of(point), exc))
    return replay(in_tree, plugins)


def discover(in_tree: Iterable[str]) -> PluginRegistry:
    """The connectors the installed ``vllm.general_plugins`` register after the built-in ``in_tree`` names."""
    return _discover(tuple(in_tree), os.environ.get(ALLOW_LIST_ENV), tuple(sys.path))


class PluginLoadError(Exception):
    """vLLM's plugin loading did not register the connector it was run for; the message says what happened."""


_LOAD_ERRORS: list[str] = []  # what this process's load_general_plugins raised (vLLM runs it once per process)


def _import_error(origin: PluginOrigin) -> str | None:
    """What importing the plugin's entry point raises: vLLM logs that and goes on, so it is asked again here."""
    name, _, value = origin.entry_point.partition(" = ")
    try:
        EntryPoint(name, value, GROUP).load()
    except Exception as exc:  # noqa: BLE001 - the plugin's own error, quoted
        return f"{type(exc).__name__}: {exc}"
    return None


def register_in_vllm(connector: PluginConnector) -> None:
    """Run the plugins with vLLM's own ``load_general_plugins`` (once per process; it honours ``VLLM_PLUGINS``),
    as vLLM's engine core and workers do before they build a connector; raise ``PluginLoadError`` where the
    connector is still not registered after it, quoting what went wrong."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    from .api import find

    try:
        find("load_general_plugins")()
    except Exception as exc:  # noqa: BLE001 - a plugin's own error: kept, and quoted below
        _LOAD_ERRORS.append(f"{type(exc).__name__}: {exc}")
    # the factory's registry: get_connector_class_by_name would also import the class, whose own errors
    # (any type) must not read as "not registered"
    if connector.name in KVConnectorFactory._registry:
        return
    failed = _LOAD_ERRORS[0] if _LOAD_ERRORS else _import_error(connector.origin)
    happened = (f"loading vLLM's plugins raised {failed}" if _LOAD_ERRORS else
                f"vLLM could not import the plugin ({failed}; vLLM logs that and goes on)" if failed else
                "vLLM's load_general_plugins ran its plugins without error")
    raise PluginLoadError(f"{connector.name}: {happened}, and {connector.name} is not registered after it "
                          f"(kvconform read it from {connector.origin.describe()}'s source)")
