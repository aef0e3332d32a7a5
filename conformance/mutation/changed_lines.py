"""The lines a unified diff adds or changes, per file: what ``kvconform mutate --changed-lines`` mutates.

A connector's pull request can be mutated in minutes when only the lines it touches are. Those are the ``+``
lines of each hunk, numbered in the new file (``git diff`` or ``diff -u``): a removed line leaves nothing in the
new file to mutate, a deleted file nothing at all, and a renamed file is known by its new path. Each hunk is
read for exactly as many lines as its header announces, so a removed line that reads ``--- x`` is never taken
for a file header, and a diff cut short is an error, not a shorter list of lines. Errors are ``ValueError`` with
a one-line message naming the diff's line; the command turns them into exit 2.
"""

from __future__ import annotations

import re

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
DEV_NULL = "/dev/null"
GIT_HEADER = "diff --git "
# git's and C's escapes in a quoted path (``"b/t\303\251st.py"``); octal digits are handled apart
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_SHOWN = 60  # characters of an offending line a message quotes


def _quoted(line: str) -> str:
    return repr(line if len(line) <= _SHOWN else line[:_SHOWN] + "...")


def _unquote(text: str, lineno: int) -> str:
    """A path git wrote in C quotes (it does for non-ASCII and control characters), as text."""
    out = bytearray()
    i = 1
    while i < len(text):
        ch = text[i]
        if ch == '"':
            return out.decode("utf-8", errors="replace")
        if ch != "\\":
            out += ch.encode()
            i += 1
            continue
        octal = re.match(r"[0-7]{1,3}", text[i + 1:])
        if octal:
            out.append(int(octal.group(), 8) & 0xFF)
            i += 1 + len(octal.group())
        elif text[i + 1:i + 2] in _ESCAPES:
            out.append(_ESCAPES[text[i + 1]])
            i += 2
        else:
            raise ValueError(f"line {lineno}: bad escape in the quoted path {_quoted(text)}")
    raise ValueError(f"line {lineno}: unterminated quoted path {_quoted(text)}")


def _header_path(line: str, lineno: int) -> str:
    """The path of a ``---``/``+++`` line: unquoted, without diff's timestamp or git's tab after a name with a
    space."""
    rest = line[4:]
    if rest.startswith('"'):
        return _unquote(rest, lineno)
    path = rest.split("\t", 1)[0]
    if not path:
        raise ValueError(f"line {lineno}: file header without a path: {_quoted(line)}")
    return path


def _new_path(old: str, new: str, git_prefixed: bool | None) -> str | None:
    """The post-image path without git's ``b/``; None for a deleted file.

    A git diff says in its ``diff --git`` line whether it prefixes (``--no-prefix`` does not); a plain
    ``diff -ru a b`` prefixes when its old path starts with ``a/`` and its new one with ``b/``.
    """
    if new == DEV_NULL:
        return None
    prefixed = git_prefixed if git_prefixed is not None else (old == DEV_NULL or old.startswith("a/"))
    return new[2:] if prefixed and new.startswith("b/") else new


def _read_hunk(lines: list[str], start: int, path: str | None, changed: dict[str, set[int]]) -> int:
    """Read the hunk whose header is ``lines[start]``, record its added lines under ``path`` (unless None) and
    return the index of the line after it."""
    header = HUNK_HEADER.match(lines[start])
    if header is None:
        raise ValueError(f"line {start + 1}: malformed hunk header {_quoted(lines[start])}")
    old_left = int(header.group(2)) if header.group(2) is not None else 1
    new_left = int(header.group(4)) if header.group(4) is not None else 1
    new_line = int(header.group(3))
    i = start + 1
    while old_left or new_left:
        if i >= len(lines):
            raise ValueError(f"line {start + 1}: the hunk {_quoted(lines[start])} is cut short: {old_left} old and "
                             f"{new_left} new lines missing at the end of the diff")
        kind = lines[i][:1]
        if kind in (" ", ""):  # a context line; "" where an editor or mailer stripped its trailing space
            old_left, new_left, new_line = old_left - 1, new_left - 1, new_line + 1
        elif kind == "-":
            old_left -= 1
        elif kind == "+":
            if path is not None:
                changed.setdefault(path, set()).add(new_line)
            new_left, new_line = new_left - 1, new_line + 1
        elif kind != "\\":  # "\ No newline at end of file" counts as no line
            raise ValueError(f"line {i + 1}: {_quoted(lines[i])} inside the hunk that starts on line {start + 1}, "
                             f"which still expects {old_left} old and {new_left} new lines")
        if old_left < 0 or new_left < 0:
            raise ValueError(f"line {i + 1}: the hunk that starts on line {start + 1} has more lines than its header "
                             f"{_quoted(lines[start])} says")
        i += 1
    return i


def changed_lines(diff_text: str) -> dict[str, set[int]]:
    """Per file of a unified diff (its post-image path, without ``a/``/``b/``), the line numbers of the new file
    that the diff adds or changes; files with none are left out. An empty diff gives ``{}``."""
    lines = diff_text.split("\n")
    lines = [line.removesuffix("\r") for line in (lines[:-1] if lines[-1] == "" else lines)]
    changed: dict[str, set[int]] = {}
    git_prefixed: bool | None = None
    in_file, path, seen_diff = False, None, False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(GIT_HEADER):
            rest = line[len(GIT_HEADER):]
            git_prefixed = rest.startswith(("a/", '"a/'))
            in_file, seen_diff = False, True
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = _header_path(line, i + 1), _header_path(lines[i + 1], i + 2)
            path, in_file, seen_diff = _new_path(old, new, git_prefixed), True, True
            i += 2
            continue
        elif line.startswith(("--- ", "+++ ")):
            raise ValueError(f"line {i + 1}: a file header without its pair ('---' then '+++'): {_quoted(line)}")
        elif line.startswith("+") and in_file:  # an added line past its hunk's end: the header's count is wrong
            raise ValueError(f"line {i + 1}: an added line outside any hunk (a hunk header counts too few lines): "
                             f"{_quoted(line)}")
        elif line.startswith("@@@"):
            raise ValueError(f"line {i + 1}: a combined diff (of a merge) is not a unified diff; diff against one "
                             "parent")
        elif line.startswith("@@"):
            if not in_file:
                raise ValueError(f"line {i + 1}: hunk header before any '---'/'+++' file header")
            i = _read_hunk(lines, i, path, changed)
            continue
        i += 1
    if not seen_diff and any(line.strip() for line in lines):
        raise ValueError("not a unified diff: no 'diff --git' line and no '---'/'+++' file header")
    return changed
