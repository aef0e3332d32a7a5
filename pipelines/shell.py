"""Shell command lines for Buildkite steps, safe twice over.

A command passes through two interpreters: ``buildkite-agent pipeline upload``
first replaces ``$VAR`` and ``${VAR}`` with the uploading job's environment, then
the agent's shell runs what is left. Every dynamic word (a connector name, a
path, a wrapper argument) is therefore ``shlex.quote``d for the shell, and every
``$`` in a finished command is written ``$$`` so upload leaves it alone. Shell
syntax this module writes itself (a glob, ``$?``, a redirection) is marked
``Raw`` so it is the only thing that is not quoted.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .lanes import Wrapper


@dataclass(frozen=True)
class Raw:
    """Shell syntax written by the generator itself; never data from a config or a caller."""

    text: str


Word = str | Raw


def join(words: Iterable[Word]) -> str:
    """One command line: data words quoted, ``Raw`` words verbatim."""
    return " ".join(word.text if isinstance(word, Raw) else shlex.quote(word) for word in words)


def wrap(words: list[Word], wrapper: Wrapper | None) -> str:
    """``words`` as a command line, run through the lane's wrapper when it has one."""
    if wrapper is None:
        return join(words)
    if wrapper.command_as == "string":
        return join([*wrapper.argv, join(words)])
    return join([*wrapper.argv, *words])


def for_upload(command: str) -> str:
    """Escape ``$`` so pipeline upload passes the command to the agent's shell unchanged."""
    return command.replace("$", "$$")
