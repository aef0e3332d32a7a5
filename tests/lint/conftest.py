"""Fixtures for the lint's tests: lint a snippet of source without touching disk."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kvconform.conformance.lint import lint_source


@pytest.fixture
def lint():
    """``lint(source) -> [(rule, line), ...]`` for a dedented snippet."""

    def run(source: str) -> list[tuple[str, int]]:
        findings = lint_source(textwrap.dedent(source).encode(), Path("snippet.py"))
        return [(f.rule, f.line) for f in findings]

    return run


@pytest.fixture
def rules_in(lint):
    """``rules_in(source) -> [rule, ...]``: just the rule ids found."""
    return lambda source: [rule for rule, _ in lint(source)]
