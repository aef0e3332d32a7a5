"""pytest's ``-k`` for one test, so that one suite run can give each of its connectors its own selection.

pytest applies ``-k`` to a whole run; the shared self-test run (tests/shared_run/runner.py) runs many self-tests'
connectors at once, each with the selection its self-test asks for. The grammar and the names matched are pytest's
documented ``-k``: ``and``, ``or``, ``not``, parentheses, and words matched case-insensitively as substrings of the
names of the test and its parents (the session and its root folder left out), its extra keywords, its function's
public attributes and its markers. tests/shared_run/test_keywords.py holds this to pytest's own ``-k``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection

import pytest

_TOKEN = re.compile(r"\s*(?:(?P<open>\()|(?P<close>\))|(?P<word>[\w:+\-.\[\]\\/]+))")
_OPERATORS = ("and", "or", "not")
# function attributes pytest does not match: its own marks, and functools.cache's
_NOT_KEYWORDS = frozenset({"pytestmark", "cache_parameters"})


class KeywordError(ValueError):
    """An expression pytest's ``-k`` would refuse."""


def _tokens(expression: str) -> list[str]:
    tokens, position = [], 0
    while expression[position:].strip():
        match = _TOKEN.match(expression, position)
        if match is None:
            raise KeywordError(f"-k {expression!r}: unexpected character at column {position + 1}")
        tokens.append(match.group(match.lastgroup or "word"))
        position = match.end()
    return tokens


# a parsed expression: ("word", w), ("not", e), ("and", a, b), ("or", a, b); () for the empty one
Tree = tuple


class _Parser:
    """Recursive descent over ``or`` of ``and`` of ``not``, as pytest's grammar nests them, into a Tree."""

    def __init__(self, expression: str) -> None:
        self.expression, self.tokens, self.at = expression, _tokens(expression), 0

    def _peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise KeywordError(f"-k {self.expression!r}: the expression ends too soon")
        self.at += 1
        return token

    def whole(self) -> Tree:
        if not self.tokens:
            return ()  # pytest: an empty -k selects everything
        tree = self._or()
        if self._peek() is not None:
            raise KeywordError(f"-k {self.expression!r}: unexpected {self._peek()!r}")
        return tree

    def _or(self) -> Tree:
        tree = self._and()
        while self._peek() == "or":
            self._take()
            tree = ("or", tree, self._and())
        return tree

    def _and(self) -> Tree:
        tree = self._not()
        while self._peek() == "and":
            self._take()
            tree = ("and", tree, self._not())
        return tree

    def _not(self) -> Tree:
        token = self._take()
        if token == "not":
            return ("not", self._not())
        if token == "(":
            tree = self._or()
            if self._take() != ")":
                raise KeywordError(f"-k {self.expression!r}: a parenthesis is not closed")
            return tree
        if token == ")" or token in _OPERATORS:
            raise KeywordError(f"-k {self.expression!r}: unexpected {token!r}")
        return ("word", token.lower())


@functools.cache
def _parsed(expression: str) -> Tree:
    """``expression`` parsed once: a shared run asks each of its selections of every collected test."""
    return _Parser(expression).whole()


def _holds(tree: Tree, lowered: Collection[str]) -> bool:
    return True if not tree else _EVALUATE[tree[0]](tree, lowered)


# a node's kind -> its value over a test's lowered names
_EVALUATE = {
    "word": lambda tree, names: any(tree[1] in name for name in names),
    "not": lambda tree, names: not _holds(tree[1], names),
    "and": lambda tree, names: _holds(tree[1], names) and _holds(tree[2], names),
    "or": lambda tree, names: _holds(tree[1], names) or _holds(tree[2], names),
}


def check(expression: str) -> None:
    """Raise KeywordError where pytest would refuse ``expression``."""
    _parsed(expression)


def matches(expression: str, names: Collection[str]) -> bool:
    """Whether ``-k expression`` selects a test whose matchable names are ``names``."""
    return selects(expression, lowered(names))


def lowered(names: Collection[str]) -> list[str]:
    """``names`` as ``selects`` takes them: ``-k`` matches regardless of case."""
    return [name.lower() for name in names]


def selects(expression: str, lowered_names: Collection[str]) -> bool:
    """``matches`` over names already ``lowered``: one test's names serve every selection of a shared run."""
    return _holds(_parsed(expression), lowered_names)


def item_names(item: pytest.Item) -> set[str]:
    """The names ``-k`` matches ``item`` by."""
    names = {node.name for node in item.listchain()
             if not isinstance(node, pytest.Session)
             and not (isinstance(node, pytest.Directory) and isinstance(node.parent, pytest.Session))}
    names.update(item.listextrakeywords())
    function = getattr(item, "function", None)
    if function is not None:
        names.update(name for name in vars(function) if not name.startswith("_") and name not in _NOT_KEYWORDS)
    names.update(mark.name for mark in item.iter_markers())
    return names
