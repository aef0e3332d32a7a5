"""The warm parent: everything every mutant's run shares, loaded once before the first fork.

It imports the connector's own modules (and with them vLLM), then lets pytest collect the connector's
conformance tests once in-process, which imports the suite's test modules and its plugin as pytest names them;
a child's own collection then finds them loaded. Nothing here starts a test: a process that forks must hold
no other thread, and a test would start vLLM's. Last, it finds the live functions of the connector's files
(``swap.LiveFunctions``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from kvconform.errors import UserError

from ..coverage.measure import display_path
from ..session.suite_command import NO_CACHE, SuiteCommand
from .swap import LiveFunctions

PLATFORM = "cpu"


@dataclass(frozen=True)
class OwnModule:
    file: str
    path: str  # as reports show it: vllm/distributed/... or the third-party package's path
    name: str  # dotted


def own_module(file: Path) -> OwnModule:
    path = display_path(file)
    parts = path.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return OwnModule(str(file), path, ".".join(parts))


def suite_args(connector: str, extra: list[str]) -> list[str]:
    """pytest's arguments for the connector's conformance tests (``SuiteCommand``'s, less the Python that runs
    them), the user's own last."""
    command = SuiteCommand(PLATFORM, connectors=(connector,), plugins=(NO_CACHE,), options=("-q",), extra=extra)
    return command.argv()[len(command.python) + 2:]  # past "python -m pytest"


@dataclass
class Warm:
    modules: dict[str, ModuleType]  # file -> the imported module
    skipped: dict[str, str]  # file -> why it could not be imported
    live: LiveFunctions


def warm_up(own: list[OwnModule], args: list[str]) -> Warm:
    modules, skipped = {}, {}
    for module in own:
        try:
            modules[module.file] = importlib.import_module(module.name)
        except Exception as exc:  # a module the connector never imports here (an optional dependency)
            skipped[module.file] = f"{type(exc).__name__}: {exc}"
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        status = pytest.main([*args, "--collect-only"])
    if status != 0:
        raise UserError(f"the conformance suite does not collect with these arguments (pytest exit status "
                        f"{status}): pytest {' '.join(args)}")
    extra = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if extra:
        raise UserError(f"threads started while loading the suite ({', '.join(extra)}): a process with threads "
                        f"cannot fork mutants safely")
    return Warm(modules, skipped, LiveFunctions(modules))
