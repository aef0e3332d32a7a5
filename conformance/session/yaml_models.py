"""kvconform's YAML data files loaded into pydantic models: a typo is an error naming the file, line and key.

The connector profiles (``connectors.yaml``), the expectations and the gate's lanes are read
through ``load_yaml_model``, so a malformed file of any of them reads the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

# libyaml's parser where PyYAML was built with it: connectors.yaml and the expectations are parsed in every test
# process and xdist controller, and the pure-Python parser is several times slower (benchmarks/README.md)
FAST_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _line_of(text: str, keys: tuple[int | str, ...]) -> int | None:
    """Best-effort line of the last string key of a validation error's location."""
    names = [k for k in keys if isinstance(k, str)]
    for name in reversed(names):
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip().startswith(f"{name}:"):
                return number
    return None


def safe_load_yaml(text: str) -> Any:
    """``yaml.safe_load``'s document, parsed by libyaml; a document it rejects is parsed again by PyYAML's
    own parser, whose error (message and line) is the one reported: libyaml words and places them otherwise."""
    try:
        return yaml.load(text, Loader=FAST_SAFE_LOADER)
    except yaml.YAMLError:
        return yaml.safe_load(text)


ModelT = TypeVar("ModelT", bound=BaseModel)


def load_yaml_model(path: Path, model: type[ModelT], error: type[Exception]) -> ModelT:
    """Load ``path`` into ``model``; any problem is ``error`` with file, line and key."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}") from None
    try:
        data = safe_load_yaml(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise error(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        line = _line_of(text, first["loc"])
        where = f"{path}:{line}" if line else str(path)
        raise error(f"{where}: {key}: {first['msg']}") from None
