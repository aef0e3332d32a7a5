"""The connector registry as vLLM's ``factory.py`` declares it, read with ``ast``.

``KVConnectorFactory`` registers every built-in connector with
``register_connector(name, module_path, class_name)`` calls in that one file. Reading
the calls instead of importing the factory costs milliseconds, not vLLM's import
(seconds), and never runs code: the PR gate reads a pull request's factory this way,
and the pytest plugin validates ``--connector`` names this way in the xdist
controller, which never needs vLLM itself. The connectors vLLM plugins register
are read the same way (``plugins.py``).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import TypeGuard

FACTORY_MODULE = "vllm.distributed.kv_transfer.kv_connector.factory"
FACTORY_FILE = FACTORY_MODULE.replace(".", "/") + ".py"
REGISTRATION_ARGS = ("name", "module_path", "class_name")  # KVConnectorFactory.register_connector's parameters


class FactorySourceError(Exception):
    """The factory source cannot be read as a registry; the message says where and why."""


def string_args(call: ast.Call, names: tuple[str, ...]) -> tuple[str, ...] | None:
    values = dict(zip(names, call.args, strict=False))  # a call may pass fewer positionally
    values.update({kw.arg: kw.value for kw in call.keywords if kw.arg in names})
    values_of = [getattr(values.get(n), "value", None) for n in names]
    strings = tuple(s for s in values_of if isinstance(s, str))
    return strings if len(strings) == len(values_of) else None


def is_registration(node: ast.AST) -> TypeGuard[ast.Call]:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "register_connector")


def parse_registrations(source: str, where: str = FACTORY_FILE) -> dict[str, tuple[str, str]]:
    """name -> (module path, class name) of every ``register_connector(...)`` call, in source order."""
    try:
        tree = ast.parse(source, filename=where)
    except SyntaxError as exc:
        raise FactorySourceError(f"{where}:{exc.lineno}: cannot parse the connector factory: {exc.msg}") from None
    calls = sorted((n for n in ast.walk(tree) if is_registration(n)), key=lambda n: (n.lineno, n.col_offset))
    registry: dict[str, tuple[str, str]] = {}
    for call in calls:
        args = string_args(call, REGISTRATION_ARGS)
        if args:
            registry[args[0]] = (args[1], args[2])
    if not registry:
        raise FactorySourceError(f"{where}: registers no connectors (no register_connector calls)")
    return registry


def installed_factory_file() -> Path | None:
    """The installed vLLM's factory.py, found without importing vLLM."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))).parent / FACTORY_FILE
    return path if path.is_file() else None
