"""Every mutation cosmic-ray's operators make in one source file (type annotations aside), found in one walk.

cosmic-ray numbers an operator's mutations (its *occurrences*) in a pre-order walk of parso's tree, and its
``MutationVisitor.mutate_code(source, operator, occurrence)`` re-parses and re-walks the whole file for each
one: quadratic in a module's size. Here one parse and one walk find every position; each is mutated where it
stands, the mutated node's text taken, and the node's subtree put back as it was. The mutated file is then the
original text with that node's span (its prefix included, as parso writes it) replaced, which is what
``mutate_code`` returns for the same occurrence (tests/mutation/test_generate.py holds the two equal).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .operators import operators

CONTEXT_LINES = 3  # of a mutant's unified diff


@dataclass(frozen=True)
class Edit:
    """One mutant's change: the text between two offsets of the source replaced."""

    start: int
    end: int
    text: str

    def apply(self, source: str) -> str:
        return source[:self.start] + self.text + source[self.end:]


@dataclass(frozen=True)
class Candidate:
    """A mutation of one module, before it is run: where it is, which operator made it, and its change."""

    module: str  # the module's path as reports show it
    line: int  # where the operator's position starts
    operator: str
    occurrence: int  # cosmic-ray's: the operator's n-th position in the file
    edit: Edit

    @property
    def id(self) -> str:
        return f"{self.module}:{self.line}:{self.operator}:{self.occurrence}"

    def diff(self, source: str) -> str:
        """The unified diff of the change, ``CONTEXT_LINES`` lines of context, the module's path on both sides."""
        before = source.splitlines(keepends=True)
        after = self.edit.apply(source).splitlines(keepends=True)
        lines = difflib.unified_diff(before, after, f"a/{self.module}", f"b/{self.module}", n=CONTEXT_LINES)
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _offsets(source: str) -> list[int]:
    """The offset of each line's start, in parso's numbering of lines (1-based; ``\\n``, ``\\r\\n``, ``\\r``)."""
    from parso.utils import split_lines

    starts = [0, 0]
    for line in split_lines(source, keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _nodes(tree: Any) -> Iterator[Any]:
    """parso's tree in pre-order, as cosmic-ray walks it."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(getattr(node, "children", ())))


def _snapshot(node: Any) -> list[tuple[Any, str, Any]]:
    """What an operator may change in ``node``'s subtree: each inner node's children, each leaf's text."""
    saved: list[tuple[Any, str, Any]] = []
    for inner in _nodes(node):
        if hasattr(inner, "children"):
            saved.append((inner, "children", list(inner.children)))
        else:
            saved += [(inner, "value", inner.value), (inner, "prefix", inner.prefix)]
    return saved


def _restore(saved: list[tuple[Any, str, Any]]) -> None:
    for node, attribute, value in saved:
        setattr(node, attribute, value)


def _annotations(nodes: list[Any]) -> set[int]:
    """The ids of every node inside a type annotation (a parameter's, a return's, an annotated assignment's)."""
    roots = []
    for node in nodes:
        if node.type in ("funcdef", "param"):
            roots.append(getattr(node, "annotation", None))
        elif node.type == "annassign":
            roots.append(node.children[1])
    return {id(inner) for root in roots if root is not None for inner in _nodes(root)}


def candidates(source: str, module: str) -> list[Candidate]:
    """Every mutation of ``source`` (the module shown as ``module``), by operator, then by occurrence, except
    those inside type annotations (never run under ``from __future__ import annotations``, and elsewhere only
    evaluated as the module loads, where a wrong one breaks the import rather than a check); a change that
    leaves the text as it was is no mutant. Occurrences keep cosmic-ray's numbers, annotations counted."""
    import parso

    tree = parso.parse(source)  # type: ignore[no-untyped-call]
    starts = _offsets(source)
    nodes = list(_nodes(tree))
    annotations = _annotations(nodes)
    found = []
    for name, operator in operators():
        occurrence = 0
        for node in nodes:
            positions = list(operator.mutation_positions(node))
            if id(node) in annotations:
                occurrence += len(positions)
                continue
            for index, (start_pos, _) in enumerate(positions):
                line, column = node.get_start_pos_of_prefix()
                span_start = starts[line] + column
                span_end = starts[node.end_pos[0]] + node.end_pos[1]
                saved = _snapshot(node)
                try:
                    mutated = operator.mutate(node, index)
                    text = "" if mutated is None else mutated.get_code(include_prefix=True)
                except (AttributeError, IndexError, TypeError):
                    # an operator that offers a position it cannot change (cosmic-ray 8.7's ExceptionReplacer on
                    # a dotted name in an except tuple): no mutant there; the occurrence is still counted
                    text = source[span_start:span_end]
                finally:
                    _restore(saved)
                if text != source[span_start:span_end]:
                    found.append(Candidate(module, start_pos[0], name, occurrence, Edit(span_start, span_end, text)))
                occurrence += 1
    return found
