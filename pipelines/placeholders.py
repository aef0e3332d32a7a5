"""The values of a generated pipeline that are still defaults to check: one line each, for whoever uploads it.

The lanes file writes what differs between Buildkite installations (agent queues,
images, the keys of image build steps) as ``${KVCONFORM_X:-default}``: pipeline
upload takes ``KVCONFORM_X`` from the uploading job's environment, else the default,
which is vLLM CI's value as far as we could read it (no vLLM CI agent was available
to check it). A pipeline that runs on a default nobody checked waits on a queue no
agent serves or pulls an image nobody pushes; naming each one, with the lanes-file
key and the variable that sets it, lets a CI owner see what is left to set. A
variable set in the generating environment (the bootstrap job, which also uploads)
is no longer a default and is not named.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .steps import IMAGE_ENV

if TYPE_CHECKING:
    from .lanes import LanesConfig

_REFERENCE = re.compile(r"\$\{(KVCONFORM_[A-Z0-9_]+):-")


def _agent_tags(step: dict[str, Any]) -> Iterable[Any]:
    return dict(step.get("agents", {})).values()


def _images(step: dict[str, Any]) -> Iterable[Any]:
    yield step.get("env", {}).get(IMAGE_ENV)
    for plugin in step.get("plugins", []):
        for settings in plugin.values() if isinstance(plugin, dict) else []:
            if isinstance(settings, dict):
                yield settings.get("image")


def _build_steps(step: dict[str, Any]) -> Iterable[Any]:
    return list(step.get("depends_on", []))


# What a default is, by where a command step uses it.
KINDS: tuple[tuple[str, Callable[[dict[str, Any]], Iterable[Any]]], ...] = (
    ("agent queue", _agent_tags),
    ("image", _images),
    ("image build step", _build_steps),
)


@dataclass(frozen=True)
class Placeholder:
    variable: str  # KVCONFORM_X, which sets it at upload
    default: str  # what upload uses when the variable is unset
    kind: str  # a KINDS name
    lanes_key: str  # where the lanes file writes it, e.g. variables.cuda_queue

    def line(self) -> str:
        return (f"placeholder: {self.lanes_key} = {self.default!r} ({self.kind}, a default: "
                f"set {self.variable} where the pipeline is uploaded)")


def _references(text: str) -> Iterator[tuple[str, str]]:
    """``(variable, default)`` of each ``${KVCONFORM_X:-default}`` in ``text``; defaults may nest ``${...}``."""
    for match in _REFERENCE.finditer(text):
        depth, at = 1, match.end()
        while at < len(text):
            if text.startswith("${", at):
                depth, at = depth + 1, at + 2
                continue
            if text[at] == "}":
                depth -= 1
                if depth == 0:
                    yield match.group(1), text[match.end():at]
                    break
            at += 1


def _command_steps(steps: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for step in steps:
        yield from _command_steps(step.get("steps", [])) if "group" in step else [step]


def _strings(data: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """``(dotted key path, string)`` for every string in a lanes file's data, in file order."""
    if isinstance(data, str):
        yield ".".join(path), data
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from _strings(value, (*path, str(key)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _strings(value, (*path, str(index)))


def _lanes_key(lanes_data: dict[str, Any], variable: str) -> str:
    """The first key of the lanes file that writes ``variable`` (``variables:`` come first)."""
    return next((path for path, text in _strings(lanes_data) if f"${{{variable}:-" in text), variable)


def placeholders(pipeline: dict[str, Any], config: LanesConfig, environment: Mapping[str, str]) -> list[Placeholder]:
    """The defaults ``pipeline`` still relies on, one per variable, in the order the pipeline first uses them.

    ``config``: the lanes file it was generated from, to name the key that writes each one.
    ``environment``: where the pipeline is generated; a variable set there is not a default.
    """
    lanes_data = config.model_dump()
    found: dict[str, Placeholder] = {}
    for step in _command_steps(pipeline["steps"]):
        for kind, values_of in KINDS:
            for value in values_of(step):
                for variable, default in _references(value) if isinstance(value, str) else []:
                    if variable not in found and not environment.get(variable):
                        found[variable] = Placeholder(variable, default, kind, _lanes_key(lanes_data, variable))
    return list(found.values())
