"""Inline suppressions: ``# kvconform: allow[KVC004]`` or ``allow[KVC004, KVC005]`` on the finding's line.

Read from real comment tokens, so the same text inside a string literal suppresses nothing.
A suppression names its rules: there is no blanket form, so a new rule is never hidden by an old comment.
"""

from __future__ import annotations

import io
import re
import tokenize

ALLOW_COMMENT = re.compile(r"\bkvconform:\s*allow\[([^\]]*)\]")
# Bytes every suppression contains. Python source is in an ASCII-compatible encoding, so a file without
# them has no suppression, and tokenizing it (a third of the lint's time on vLLM's large modules) is skipped.
MARKER = b"kvconform:"


def allowed_rules(source: bytes) -> dict[int, frozenset[str]]:
    """line number -> the rule ids a comment on that line allows."""
    allowed: dict[int, frozenset[str]] = {}
    if MARKER not in source:
        return allowed
    try:
        for token in tokenize.tokenize(io.BytesIO(source).readline):
            if token.type != tokenize.COMMENT:
                continue
            ids = {rule.strip() for match in ALLOW_COMMENT.finditer(token.string)
                   for rule in match.group(1).split(",")}
            if ids - {""}:
                allowed[token.start[0]] = frozenset(ids - {""})
    except (tokenize.TokenError, SyntaxError):
        pass  # the file parsed as Python, so this is unreachable in practice; no suppressions then
    return allowed
