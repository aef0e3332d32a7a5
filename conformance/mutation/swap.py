"""Put a mutant into the running process: the mutated function's code swapped in, or the module re-run.

Swapping ``function.__code__`` changes every caller at once, wherever it holds the function (a bound method, a
decorator's wrapper, vLLM's factory) and costs no import. The live functions are found once, in the warm parent,
by scanning the heap for functions whose code comes from the connector's files (``LiveFunctions``); a forked
child inherits the table. Where a swap cannot be made (the change is outside any function's body, the function
does not exist yet or its closure differs) the module's mutated source runs in the module's own namespace, which
replaces its classes and functions for every later lookup by name.
"""

from __future__ import annotations

import gc
import types
import warnings
from collections import defaultdict
from collections.abc import Iterable

SWAPPED = "code"
RERUN = "module"


class LiveFunctions:
    """(file, qualified name) -> the function objects alive in this process whose code is that function's."""

    def __init__(self, files: Iterable[str]) -> None:
        wanted = set(files)
        self.table: dict[tuple[str, str], list[types.FunctionType]] = defaultdict(list)
        with warnings.catch_warnings():  # isinstance on a deprecated module's lazy attribute warns
            warnings.simplefilter("ignore")
            functions = [obj for obj in gc.get_objects() if isinstance(obj, types.FunctionType)]
        for function in functions:
            if function.__code__.co_filename in wanted:
                self.table[(function.__code__.co_filename, function.__code__.co_qualname)].append(function)

    def get(self, file: str, qualname: str) -> list[types.FunctionType]:
        return self.table.get((file, qualname), [])


def find_code(code: types.CodeType, qualname: str, first_line: int) -> types.CodeType | None:
    """The code object named ``qualname`` that starts on ``first_line``, among ``code``'s nested constants."""
    stack = [code]
    while stack:
        current = stack.pop()
        if current.co_qualname == qualname and current.co_firstlineno == first_line:
            return current
        stack.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return None


def _swap(compiled: types.CodeType, functions: list[types.FunctionType], qualname: str) -> bool:
    """Give each of ``functions`` its mutated code; False (nothing changed) where any cannot take it."""
    replacements = []
    for function in functions:
        new = find_code(compiled, qualname, function.__code__.co_firstlineno)
        if new is None or new.co_freevars != function.__code__.co_freevars:
            return False
        replacements.append((function, new))
    for function, new in replacements:
        function.__code__ = new
    return bool(replacements)


def apply(module: types.ModuleType, file: str, mutated_source: str, swap: str | None,
          live: LiveFunctions) -> str:
    """Make ``module`` (loaded from ``file``) run ``mutated_source``: SWAPPED where the function ``swap`` names took
    the mutated code, RERUN where the module's source ran again. The source must compile (``viable``); what the
    module's top level raises as it re-runs propagates."""
    compiled = compile(mutated_source, file, "exec", dont_inherit=True)  # not this module's __future__ flags
    if swap is not None and _swap(compiled, live.get(file, swap), swap):
        return SWAPPED
    exec(compiled, module.__dict__)  # noqa: S102  # the connector's own source, one operator's change in it
    return RERUN


def viable(mutated_source: str, file: str) -> str | None:
    """None where the mutated source compiles; else why not, in one line."""
    try:
        compile(mutated_source, file, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
