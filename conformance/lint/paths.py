"""Which files the lint reads: the PATHs given, directories walked for ``*.py``, or vLLM's connectors.

The default is found without importing vLLM (an import costs seconds and runs
platform detection): ``find_spec`` locates the package on disk only.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

CONNECTOR_PACKAGE = Path("distributed", "kv_transfer", "kv_connector")


class LintPathError(Exception):
    """A PATH that names nothing to lint, or no vLLM to find the default in."""


def default_connector_dir() -> Path:
    """The installed vLLM's ``kv_connector`` package directory."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise LintPathError("vLLM is not installed here; name the files or folders to lint")
    for location in spec.submodule_search_locations:
        candidate = Path(location, CONNECTOR_PACKAGE)
        if candidate.is_dir():
            return candidate
    raise LintPathError(f"the installed vLLM has no {CONNECTOR_PACKAGE} package; "
                        "name the files or folders to lint")


def _walk(directory: Path) -> list[Path]:
    """Every ``*.py`` under ``directory``, sorted; symlinked folders are not followed (no loops)."""
    found: list[Path] = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        found.extend(Path(root, name) for name in sorted(files) if name.endswith(".py"))
    return found


def python_files(paths: list[Path]) -> list[Path]:
    """The files to lint, in order, each once: a file as given (whatever its suffix), a folder's ``*.py``."""
    files: dict[Path, None] = {}
    for path in paths:
        if path.is_dir():
            files.update(dict.fromkeys(_walk(path)))
        elif path.exists():
            files[path] = None
        else:
            raise LintPathError(f"{path}: no such file or directory")
    return list(files)
