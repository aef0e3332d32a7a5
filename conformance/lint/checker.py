"""The AST check: walk a module once, tracking platform guards, and report each rule's pattern.

Each rule's pattern is one small matcher; ``MATCHERS`` says which node types each
matcher looks at.  The walk carries one fact down the tree, whether the code is
under a platform guard (``guards.py``), because only the torch.cuda rules depend
on where a call sits.  It also names where each hit sits and what it calls (the
enclosing ``Class.method`` and the called expression's source): what a hit is,
independently of its line, so an expectation pinned to it survives an unrelated
edit above it, or the same code in another vLLM release.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from .guards import Polarity, polarity
from .names import dotted, import_aliases, resolved, static_prefix
from .rules import (
    CUDA_DEVICE_STRING,
    HOST_DEVICE_STRING,
    MLA_METADATA_CLASS,
    TORCH_ACCELERATOR_DEVICE_INDEX,
    TORCH_CUDA_PROBES,
    TORCH_CUDA_SILENT,
)

SNIPPET_LIMIT = 60
MODULE_SCOPE = "<module>"  # the function of a hit outside any def or class


@dataclass(frozen=True)
class Hit:
    """A rule's pattern found at a 1-based line and column.

    ``function`` is the enclosing definition, qualified (``Class.method``, ``outer.inner``, or
    ``<module>``); ``call`` is the source of what the matched node calls (``torch.cuda.Stream``
    for ``torch.cuda.Stream()``), or of the whole node where it is no call (a comparison).
    The walk fills both in; a matcher gives the rest.
    """

    rule: str
    line: int
    col: int
    detail: str
    function: str = MODULE_SCOPE
    call: str = ""


@dataclass(frozen=True)
class Site:
    """What a matcher may know about where a node sits."""

    source: str
    aliases: dict[str, str]
    guarded: bool

    def resolve(self, node: ast.AST) -> str | None:
        return resolved(node, self.aliases)

    def snippet(self, node: ast.AST) -> str:
        text = " ".join((ast.get_source_segment(self.source, node) or ast.unparse(node)).split())
        return text if len(text) <= SNIPPET_LIMIT else text[: SNIPPET_LIMIT - 3] + "..."


def _at(node: ast.expr) -> tuple[int, int]:
    return node.lineno, node.col_offset + 1


def _at_method(func: ast.Attribute) -> tuple[int, int]:
    """Where ``.name`` of ``obj.name(...)`` starts: a long chain is reported at its method, not its head."""
    assert func.end_lineno is not None and func.end_col_offset is not None  # set on every parsed node
    return func.end_lineno, func.end_col_offset - len(func.attr) + 1


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def _matches(pattern: re.Pattern[str], node: ast.expr | None) -> bool:
    prefix = static_prefix(node) if node is not None else None
    return prefix is not None and pattern.fullmatch(prefix) is not None


def _method_name(call: ast.Call) -> str | None:
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


# --- one matcher per rule -------------------------------------------------------------------

def cuda_method(call: ast.Call, site: Site) -> Iterator[Hit]:
    """KVC001: ``tensor.cuda()``."""
    if isinstance(call.func, ast.Attribute) and call.func.attr == "cuda":
        yield Hit("KVC001", *_at_method(call.func), ".cuda()")


def cuda_torch_device(call: ast.Call, site: Site) -> Iterator[Hit]:
    """KVC002: ``torch.device("cuda")``, ``torch.device("cuda", i)``, ``torch.device(f"cuda:{i}")``."""
    if site.resolve(call.func) != "torch.device":
        return
    device_type = call.args[0] if call.args else _keyword(call, "type")
    if _matches(CUDA_DEVICE_STRING, device_type):
        yield Hit("KVC002", *_at(call), site.snippet(call))


def cuda_device_literal(call: ast.Call, site: Site) -> Iterator[Hit]:
    """KVC003: ``x.to("cuda", ...)`` and ``device="cuda:0"`` in any call."""
    if _method_name(call) == "to" and call.args and _matches(CUDA_DEVICE_STRING, call.args[0]):
        yield Hit("KVC003", *_at(call.args[0]), f"{site.snippet(call.args[0])} passed to .to()")
    device = _keyword(call, "device")
    if device is not None and _matches(CUDA_DEVICE_STRING, device):
        yield Hit("KVC003", *_at(device), f"device={site.snippet(device)}")


def torch_cuda_call(call: ast.Call, site: Site) -> Iterator[Hit]:
    """KVC004 / KVC005: a ``torch.cuda.*`` call outside a platform guard."""
    name = site.resolve(call.func)
    if site.guarded or not name or not name.startswith("torch.cuda."):
        return
    member = name.removeprefix("torch.cuda.").split(".")[0]
    if member in TORCH_CUDA_PROBES:
        return
    yield Hit("KVC005" if member in TORCH_CUDA_SILENT else "KVC004", *_at(call), name)


def accelerator_device_index(call: ast.Call, site: Site) -> Iterator[Hit]:
    """KVC008: ``torch.accelerator.current_device_index()`` (and its kin) outside a platform guard."""
    name = site.resolve(call.func)
    if site.guarded or not name or not name.startswith("torch.accelerator."):
        return
    if name.removeprefix("torch.accelerator.") in TORCH_ACCELERATOR_DEVICE_INDEX:
        yield Hit("KVC008", *_at(call), name)


def _mla_classes(nodes: Sequence[ast.expr]) -> Iterator[Hit]:
    for node in nodes:
        for cls in node.elts if isinstance(node, ast.Tuple) else [node]:
            name = dotted(cls)
            if name and MLA_METADATA_CLASS.fullmatch(name.rsplit(".", 1)[-1]):
                yield Hit("KVC006", *_at(cls), name.rsplit(".", 1)[-1])


def mla_isinstance(call: ast.Call, site: Site) -> Iterator[Hit]:
    """KVC006: ``isinstance(meta, MLACommonMetadata)`` (or issubclass, or a tuple of classes)."""
    if dotted(call.func) in ("isinstance", "issubclass") and len(call.args) == 2:
        yield from _mla_classes([call.args[1]])


def _is_type_of(node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        return dotted(node.func) == "type"
    return isinstance(node, ast.Attribute) and node.attr == "__class__"


def mla_type_compare(compare: ast.Compare, site: Site) -> Iterator[Hit]:
    """KVC006: ``type(meta) is MLACommonMetadata`` / ``meta.__class__ == FlashMLAMetadata``."""
    if _is_type_of(compare.left):
        yield from _mla_classes(compare.comparators)


def _is_host_device(node: ast.expr | None, site: Site) -> TypeGuard[ast.expr]:
    if isinstance(node, ast.Call) and site.resolve(node.func) == "torch.device" and node.args:
        node = node.args[0]
    return _matches(HOST_DEVICE_STRING, node)


def nonblocking_to_host(call: ast.Call, site: Site) -> Iterator[Hit]:
    """KVC007: ``x.to("cpu", non_blocking=True)``."""
    if not isinstance(call.func, ast.Attribute) or call.func.attr != "to":
        return
    non_blocking = _keyword(call, "non_blocking")
    device = call.args[0] if call.args else _keyword(call, "device")
    if isinstance(non_blocking, ast.Constant) and non_blocking.value is True and _is_host_device(device, site):
        yield Hit("KVC007", *_at_method(call.func), f".to({site.snippet(device)}, non_blocking=True)")


# A matcher takes the node type it is listed under (an ast.Call, an ast.Compare), which a dict's value type
# cannot say per key: the node is Any to the table.
Matcher = Callable[[Any, Site], Iterator[Hit]]

MATCHERS: dict[type[ast.AST], tuple[Matcher, ...]] = {
    ast.Call: (cuda_method, cuda_torch_device, cuda_device_literal, torch_cuda_call,
               accelerator_device_index, mla_isinstance, nonblocking_to_host),
    ast.Compare: (mla_type_compare,),
}

# --- the walk -------------------------------------------------------------------------------

_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def called(node: ast.AST) -> str:
    """What a matched node calls, as one line of source: a call's function, else the node itself."""
    return " ".join(ast.unparse(node.func if isinstance(node, ast.Call) else node).split())


class _Walker:
    def __init__(self, source: str, aliases: dict[str, str]):
        self.source = source
        self.aliases = aliases
        self.hits: list[Hit] = []
        self.scope: list[str] = []  # the names of the enclosing defs and classes, outermost first

    def visit(self, node: ast.AST, guarded: bool) -> None:
        site = Site(self.source, self.aliases, guarded)
        function = ".".join(self.scope) or MODULE_SCOPE
        for matcher in MATCHERS.get(type(node), ()):
            self.hits.extend(replace(hit, function=function, call=called(node)) for hit in matcher(node, site))
        branch = _HANDLERS.get(type(node))
        if branch:
            branch(self, node, guarded)
        else:
            self._fields(node, guarded)

    def _fields(self, node: ast.AST, guarded: bool) -> None:
        for value in (v for _, v in ast.iter_fields(node)):
            self._visit_any(value, guarded)

    def _definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, guarded: bool) -> None:
        """A def or class: what it holds is inside it (its decorators and defaults too, for simplicity)."""
        self.scope.append(node.name)
        try:
            self._fields(node, guarded)
        finally:
            self.scope.pop()

    def _visit_any(self, value: object, guarded: bool) -> None:
        if isinstance(value, ast.AST):
            self.visit(value, guarded)
        elif isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            self._block(value, guarded)
        elif isinstance(value, list):
            for item in value:
                self._visit_any(item, guarded)

    def _block(self, statements: list[ast.stmt], guarded: bool) -> None:
        """A block's later statements are guarded after ``if not is_cuda(): return`` or ``assert is_cuda()``."""
        for statement in statements:
            self.visit(statement, guarded)
            guarded = guarded or self._guards_rest(statement)

    def _guards_rest(self, statement: ast.stmt) -> bool:
        if isinstance(statement, ast.Assert):
            return polarity(statement.test, self.aliases) is Polarity.TRUE
        return (isinstance(statement, ast.If) and isinstance(statement.body[-1], _EXITS)
                and polarity(statement.test, self.aliases) is Polarity.FALSE)

    def _branch(self, node: ast.If | ast.While | ast.IfExp, guarded: bool) -> None:
        self.visit(node.test, guarded)
        found = polarity(node.test, self.aliases)
        self._visit_any(node.body, guarded or found is Polarity.TRUE)
        self._visit_any(node.orelse, guarded or found is Polarity.FALSE)

    def _bool_op(self, node: ast.BoolOp, guarded: bool) -> None:
        """``is_cuda() and torch.cuda.x()``: later operands run only when earlier ones allow."""
        protects = Polarity.TRUE if isinstance(node.op, ast.And) else Polarity.FALSE
        for value in node.values:
            self.visit(value, guarded)
            guarded = guarded or polarity(value, self.aliases) is protects


# Nodes the walk treats specially: branches carry the guard down, definitions name the scope.
_HANDLERS: dict[type[ast.AST], Callable[[_Walker, Any, bool], None]] = {  # each takes its key's node type
    ast.If: _Walker._branch,
    ast.While: _Walker._branch,
    ast.IfExp: _Walker._branch,
    ast.BoolOp: _Walker._bool_op,
    ast.FunctionDef: _Walker._definition,
    ast.AsyncFunctionDef: _Walker._definition,
    ast.ClassDef: _Walker._definition,
}


def _character_column(lines: list[str], hit: Hit) -> Hit:
    """The AST counts columns in UTF-8 bytes; a reader counts characters."""
    if hit.line > len(lines):
        return hit
    head = lines[hit.line - 1].encode("utf-8")[: hit.col - 1]
    return replace(hit, col=len(head.decode("utf-8", errors="replace")) + 1)


def check_tree(tree: ast.Module, source: str, aliases: dict[str, str] | None = None) -> list[Hit]:
    """Every rule's hits in a parsed module, in walk order; ``aliases``: its ``import_aliases``, when known."""
    walker = _Walker(source, import_aliases(tree) if aliases is None else aliases)
    walker._block(tree.body, guarded=False)
    lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # the AST's line breaks only
    return [_character_column(lines, hit) for hit in walker.hits]
