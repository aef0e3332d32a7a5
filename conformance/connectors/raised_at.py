"""Where in a connector's own code an exception was raised, as ``my_pkg/core.py:42``.

A construction failure is reported once (``construction.py``), so its one line must say where to look. The
exception's innermost frame is often not the connector's: a pyo3 core raises from native code under the
connector's Python call, an ``assert`` fails in a helper of its package, and vLLM's factory and kvconform's probe
sit above it all. So the frame shown is the innermost one whose module belongs to the connector's top-level
package (the package of the class's module), and the innermost frame of all where none does. Modules are
recognised by their ``__name__``, not by file paths, which differ between an installed wheel and a checkout.
"""

from __future__ import annotations

import linecache
import traceback
from dataclasses import dataclass
from pathlib import PurePath
from types import FrameType


@dataclass(frozen=True)
class RaisedAt:
    """A frame of an exception's traceback: the file as its package spells it, the line, and its source."""

    path: str  # "my_pkg/core.py", or the file's full path when its module name does not map onto it
    line: int
    source: str  # the line's code, stripped; "" where the source cannot be read (a native module, -c)

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


def top_package(module: str) -> str:
    """The top-level package of a dotted module name: the connector's code is anything under it."""
    return module.partition(".")[0]


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _module_of(frame: FrameType) -> str:
    name = frame.f_globals.get("__name__")
    return name if isinstance(name, str) else ""


def shown_path(filename: str, module: str) -> str:
    """``filename`` from the top of the module's package (``my_pkg/core.py``) where the module's dotted name
    matches the file's folders; the file name unchanged otherwise (``__main__``, a module loaded by path)."""
    path = PurePath(filename)
    parts = module.split(".") if module else []
    tail = [*parts[:-1], path.name] if parts and path.stem == parts[-1] else [*parts, path.name]
    if parts and path.parts[-len(tail):] == tuple(tail):
        return "/".join(tail)
    return filename


def raised_at(exc: BaseException, package: str) -> RaisedAt | None:
    """The innermost frame of ``exc``'s traceback in ``package`` (a top-level package name), else its innermost
    frame; None when it carries no traceback (an exception made but never raised)."""
    frames = list(traceback.walk_tb(exc.__traceback__))
    if not frames:
        return None
    own = [(frame, line) for frame, line in frames if in_package(_module_of(frame), package)]
    frame, line = (own or frames)[-1]
    filename = frame.f_code.co_filename
    return RaisedAt(shown_path(filename, _module_of(frame)), line, linecache.getline(filename, line).strip())
