"""Errors and error lines every kvconform command shares; a leaf that imports nothing of kvconform.

It sits below all four packages so that ``reports``, ``pipelines`` and
``conformance`` can raise the same ``UserError`` without importing each other's
command modules (which is how import cycles between them started).
"""

from __future__ import annotations

ELLIPSIS = "..."


class UserError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def one_line(text: str, limit: int | None = None) -> str:
    """``text`` as one line: control characters (line breaks included) escaped, cut to ``limit`` characters.

    Text a pull request or a connector controls (file or connector names, an exception's
    message, a skip reason) may carry line breaks, which must not split an error in two or
    forge a log line; escaping keeps them visible instead of dropping them.
    """
    line = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text.strip())
    if limit is not None and len(line) > limit:
        return line[:limit - len(ELLIPSIS)] + ELLIPSIS
    return line
