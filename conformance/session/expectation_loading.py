"""Reading the expectations files: every entry validated, and any problem named by file, line and key.

A folder means its ``*.yaml`` (and ``*.yml``) files; each entry keeps where it was written
(``file:line``), which every message about it names. ``conformance/expectations/`` holds
kvconform's own files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import yaml
from pydantic import ValidationError

from .expectation_matching import Expectation
from .expectation_schema import Entry, ExpectationsFile
from .yaml_models import load_yaml_model

EXPECTATIONS_DIR = Path(__file__).resolve().parents[1] / "expectations"


class ExpectationError(Exception):
    """A malformed expectations file; the message is ``file:line: key: message``."""


def _display(path: Path) -> str:
    """The path as messages show it: relative to the working directory when inside it."""
    try:
        return os.path.relpath(path) if path.resolve().is_relative_to(Path.cwd().resolve()) else str(path)
    except (OSError, ValueError):
        return str(path)


def _entry_nodes(text: str) -> list[yaml.Node]:
    root = yaml.compose(text)
    if isinstance(root, yaml.MappingNode):
        for key, value in root.value:
            if key.value == "expectations" and isinstance(value, yaml.SequenceNode):
                nodes: list[yaml.Node] = value.value
                return nodes
    return []


def _line_of_key(node: yaml.Node, key: object) -> int:
    if isinstance(node, yaml.MappingNode):
        for k, _ in node.value:
            if k.value == key:
                line: int = k.start_mark.line + 1
                return line
    line = node.start_mark.line + 1
    return line


def load_file(path: Path) -> list[Expectation]:
    """The entries of one file; any problem is an ExpectationError naming file, line and key."""
    shown = Path(_display(path))
    data = load_yaml_model(shown, ExpectationsFile, ExpectationError)
    raw_entries = data.expectations or []
    nodes = _entry_nodes(shown.read_text())
    out = []
    for index, (raw, node) in enumerate(zip(raw_entries, nodes, strict=True)):  # one node per entry
        try:
            entry = Entry.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(["expectations", str(index), *(str(p) for p in first["loc"])])
            line = _line_of_key(node, first["loc"][0]) if first["loc"] else node.start_mark.line + 1
            message = first["msg"].removeprefix("Value error, ")
            raise ExpectationError(f"{shown}:{line}: {key}: {message}") from None
        out.append(Expectation(entry, data.platform, f"{shown}:{node.start_mark.line + 1}"))
    return out


def load_expectations(paths: Iterable[str | Path]) -> list[Expectation]:
    """Entries of every file named, a folder meaning its ``*.yaml`` files, in the order given."""
    out: list[Expectation] = []
    for path in map(Path, paths):
        if path.is_dir():
            files = sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
        elif path.is_file():
            files = [path]
        else:
            raise ExpectationError(f"{path}: no such expectations file or folder")
        for file in files:
            out.extend(load_file(file))
    return out
