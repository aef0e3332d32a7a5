"""Lint files into findings: parse, check, drop what an inline comment allows.

A file that cannot be read or parsed is a finding (KVC000), not a traceback: a
connector that does not parse is a result the lint reports like any other.
A finding's ``key`` (rule, file, enclosing function, call) says what it is without
its line, so an expectation can pin it across edits and vLLM releases.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .checker import MODULE_SCOPE, Hit, check_tree
from .rules import RULES
from .suppressions import allowed_rules

UNPARSEABLE = "KVC000"


@dataclass(frozen=True, order=True)
class Finding:
    """One finding; the field order is the report's sort order."""

    path: str
    line: int
    col: int
    rule: str
    severity: str
    message: str
    fix: str
    function: str = MODULE_SCOPE  # the enclosing definition, qualified: ``Class.method``
    call: str = ""  # what the code calls there, as source: ``torch.cuda.Stream.priority_range``

    @classmethod
    def from_hit(cls, path: Path, hit: Hit) -> Finding:
        rule = RULES[hit.rule]
        return cls(str(path), hit.line, hit.col, rule.id, rule.severity,
                   rule.message.format(detail=hit.detail), rule.fix, hit.function, hit.call)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def key(self) -> dict[str, str]:
        """What the finding is, without where: the form an expectation pins (``findings:`` entries)."""
        return {"rule": self.rule, "file": self.path, "function": self.function, "call": self.call}

    def render(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.rule} {self.severity}: {self.message} (fix: {self.fix})"


def _unparseable(error: Exception) -> Hit:
    if isinstance(error, SyntaxError):
        return Hit(UNPARSEABLE, error.lineno or 1, error.offset or 1, f"syntax error: {error.msg}")
    if isinstance(error, OSError):
        return Hit(UNPARSEABLE, 1, 1, f"cannot read: {error.strerror or error}")
    return Hit(UNPARSEABLE, 1, 1, f"{type(error).__name__}: {error}")


def lint_source(data: bytes, path: Path) -> list[Finding]:
    """The findings in one module's bytes (reported under ``path``), inline suppressions applied."""
    try:
        tree = ast.parse(data, filename=str(path))
    except (SyntaxError, ValueError) as error:  # ValueError: null bytes, an unknown encoding
        return [Finding.from_hit(path, _unparseable(error))]
    return lint_tree(tree, data, path)


def lint_tree(tree: ast.Module, data: bytes, path: Path, aliases: dict[str, str] | None = None) -> list[Finding]:
    """The findings in ``tree``, parsed from ``data``, inline suppressions applied (``aliases``: as check_tree)."""
    source = data.decode(_encoding(data), errors="replace")
    allowed = allowed_rules(data)
    return [Finding.from_hit(path, hit) for hit in check_tree(tree, source, aliases)
            if hit.rule not in allowed.get(hit.line, ())]


# (path, mtime_ns, size) -> its findings. The suite lints one connector per test, and connectors share
# most of the vLLM files they run (NixlConnector, Pull and Push: the same 15), so each file is parsed
# and checked once per process; a file that changed on disk has another key and is read again.
_FILE_FINDINGS: dict[tuple[str, int, int], tuple[Finding, ...]] = {}


def lint_file(path: Path) -> list[Finding]:
    try:
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        if key not in _FILE_FINDINGS:
            _FILE_FINDINGS[key] = tuple(lint_source(path.read_bytes(), path))
    except OSError as error:
        return [Finding.from_hit(path, _unparseable(error))]
    return list(_FILE_FINDINGS[key])


def _encoding(data: bytes) -> str:
    return tokenize.detect_encoding(io.BytesIO(data).readline)[0]


def lint_files(files: list[Path], rules: frozenset[str] = frozenset(RULES)) -> list[Finding]:
    """Sorted findings of ``rules`` in ``files``."""
    return sorted(f for path in files for f in lint_file(path) if f.rule in rules)
