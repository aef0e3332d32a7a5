"""Where a line of a module sits: the function reports name it by, the live function a change there is swapped
into, and the lines whose coverage says a test reached it.

Names follow ``kvconform.conformance.coverage.measure``'s (the innermost function whose body holds the line, else
the one the line defines, else ``MODULE_LEVEL``), so a mutant and a missing line of the same code read the same.
A change inside a function's body is swapped into the live process by replacing the code of the *outermost*
function holding it (nested functions, lambdas and comprehensions are constants of that code); a change
anywhere else (module or class level, a ``def`` line's defaults or decorators) re-runs the module.

coverage.py records the lines a statement's code runs on, which for a statement spread over several lines need
not be the line a mutant sits on; so a mutant counts as reached where a test ran any line of its statement's
head (a simple statement whole; a compound one up to its body).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..coverage.measure import functions_of, holder


@dataclass(frozen=True)
class Place:
    function: str  # as reports name it, or MODULE_LEVEL
    swap: str | None  # the qualified name of the outermost function whose body holds the line; None: module level
    lines: range  # the statement head holding the line


def _head(node: ast.stmt | ast.excepthandler) -> range:
    """A statement's lines up to its body (all of it for a simple statement), decorators included."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    body = getattr(node, "body", None)
    if isinstance(body, list) and body:
        return range(first, max(first, body[0].lineno - 1) + 1)
    return range(first, (node.end_lineno or node.lineno) + 1)


class SourceIndex:
    """The functions and statement heads of one module's source."""

    def __init__(self, source: str) -> None:
        tree = ast.parse(source)
        self.functions = functions_of(tree)
        self.heads = [_head(node) for node in ast.walk(tree) if isinstance(node, (ast.stmt, ast.excepthandler))]

    def place(self, line: int) -> Place:
        swap = next((f.name for f in self.functions if f.outermost and f.body <= line <= f.last), None)
        heads = [h for h in self.heads if line in h]
        head = min(heads, key=len) if heads else range(line, line + 1)
        return Place(holder(self.functions, line), swap, head)
