"""Platform guards: conditions under which a CUDA-only call is fine.

``torch.cuda.Stream()`` crashes a CPU build, but not inside
``if current_platform.is_cuda_alike():``.  A guard is a condition that is true
only on CUDA or ROCm (both are torch device type "cuda"); its polarity says which
branch it protects: the body of ``if is_cuda():``, the else branch (and the rest
of the block after an early exit) of ``if not is_cuda(): return``.

Guards exempt only the torch.cuda rules (KVC004, KVC005).  A device literal
(``.cuda()``, ``"cuda"``) stays wrong under a guard: on a machine with several
GPUs the default device need not be the destination tensor's (vLLM #42924).
"""

from __future__ import annotations

import ast
import enum
from collections.abc import Callable
from typing import Any

from .names import ends_with, resolved, static_prefix
from .rules import CUDA_DEVICE_STRING

# Names that are true only on CUDA-like platforms, as called predicates
# (``current_platform.is_cuda()``), properties (``tensor.is_cuda``) or module
# attributes (``torch.version.hip``).  Matched on the end of the resolved dotted
# name, so any receiver counts: current_platform, self.platform, a tensor.
CUDA_PREDICATES: tuple[str, ...] = (
    "is_cuda",
    "is_cuda_alike",
    "is_rocm",
    "has_device_capability",  # vLLM's platforms answer False off CUDA/ROCm
    "is_device_capability",
    "torch.cuda.is_available",
    "torch.version.cuda",
    "torch.version.hip",
)

# String methods that test a device name: ``str(device).startswith("cuda")``.
DEVICE_NAME_TESTS: tuple[str, ...] = ("startswith",)


class Polarity(enum.Enum):
    """Which outcome of a condition means "this is a CUDA-like platform"."""

    NONE = "none"  # not a platform guard
    TRUE = "true"  # the condition holds only on CUDA-like platforms
    FALSE = "false"  # the condition is false only on CUDA-like platforms: its negation is a guard

    def inverted(self) -> Polarity:
        return _INVERTED[self]


_INVERTED = {Polarity.NONE: Polarity.NONE, Polarity.TRUE: Polarity.FALSE, Polarity.FALSE: Polarity.TRUE}

# ``x == "cuda"`` is a guard; ``x != "cuda"`` is a guard's negation.
_COMPARISONS: dict[type[ast.cmpop], Polarity] = {
    ast.Eq: Polarity.TRUE,
    ast.Is: Polarity.TRUE,
    ast.NotEq: Polarity.FALSE,
    ast.IsNot: Polarity.FALSE,
}


def _is_cuda_string(node: ast.AST) -> bool:
    prefix = static_prefix(node)
    return prefix is not None and CUDA_DEVICE_STRING.fullmatch(prefix) is not None


def _name_polarity(node: ast.AST, aliases: dict[str, str]) -> Polarity:
    name = resolved(node, aliases)
    if name and any(ends_with(name, predicate) for predicate in CUDA_PREDICATES):
        return Polarity.TRUE
    return Polarity.NONE


def _call_polarity(node: ast.Call, aliases: dict[str, str]) -> Polarity:
    func = node.func
    if (isinstance(func, ast.Attribute) and func.attr in DEVICE_NAME_TESTS
            and node.args and _is_cuda_string(node.args[0])):
        return Polarity.TRUE
    return _name_polarity(func, aliases)


def _compare_polarity(node: ast.Compare, aliases: dict[str, str]) -> Polarity:
    if len(node.ops) != 1:
        return Polarity.NONE
    if _is_cuda_string(node.left) or _is_cuda_string(node.comparators[0]):
        return _COMPARISONS.get(type(node.ops[0]), Polarity.NONE)
    return Polarity.NONE


def _not_polarity(node: ast.UnaryOp, aliases: dict[str, str]) -> Polarity:
    if isinstance(node.op, ast.Not):
        return polarity(node.operand, aliases).inverted()
    return Polarity.NONE


def _boolop_polarity(node: ast.BoolOp, aliases: dict[str, str]) -> Polarity:
    """``a and guard`` holds only on CUDA; ``not guard or a`` fails only on CUDA (De Morgan)."""
    parts = [polarity(value, aliases) for value in node.values]
    if isinstance(node.op, ast.And):
        if Polarity.TRUE in parts:
            return Polarity.TRUE
        return Polarity.FALSE if all(p is Polarity.FALSE for p in parts) else Polarity.NONE
    if Polarity.FALSE in parts:
        return Polarity.FALSE
    return Polarity.TRUE if all(p is Polarity.TRUE for p in parts) else Polarity.NONE


# each judge takes the node type it is listed under: Any to the table
_POLARITY_BY_NODE: dict[type[ast.AST], Callable[[Any, dict[str, str]], Polarity]] = {
    ast.Call: _call_polarity,
    ast.Attribute: _name_polarity,
    ast.Name: _name_polarity,
    ast.Compare: _compare_polarity,
    ast.UnaryOp: _not_polarity,
    ast.BoolOp: _boolop_polarity,
}


def polarity(test: ast.AST, aliases: dict[str, str]) -> Polarity:
    """Whether ``test`` is a platform guard (TRUE), a guard's negation (FALSE), or neither."""
    judge = _POLARITY_BY_NODE.get(type(test))
    return judge(test, aliases) if judge else Polarity.NONE
