"""Where kvconform's own code looks up each name of ``api.PLACES``: the line a finding about that name points at.

When the installed vLLM keeps a name in none of the places ``api.py`` knows, the session says so once, before
any test (``engine/shapes.py``), with the kvconform line that needs the name, so a maintainer sees what to fix
and where it bites. That line is read off kvconform's sources, not declared beside the table: every lookup is a
call with the name as a string literal (``vllm_api.find("init_none_hash")``, ``optional(...)``,
``has_field(...)``), so one pass over the ``conformance/`` sources finds them all, and a new lookup needs no
second edit. Files are read in path order; a name's first lookup is its location. A name looked up only
through its fields (``has_field("KVCacheConfig.hash_block_size")``) is located at the first of those; one
looked up nowhere literally, at its entry in the table. Paths are shown as a checkout names them, also from
a wheel (``conformance/engine/requests.py:34``).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

CONFORMANCE_ROOT = Path(__file__).resolve().parents[1]  # conformance/, whose parent names its files
TABLE = Path(__file__).resolve().with_name("api.py")
# a lookup by a string literal: ``api.find("x")``, ``vllm_api.optional('x')``, ``has_field("X.f")``; not
# ``text.find("x")`` (a method of something else)
_LOOKUP = re.compile(r"""(?<![\w.])(?:\w*api\.)?(?:find|optional|has_field)\(\s*(["'])(?P<name>[^"'\n]+)\1""")


def checkout_path(path: Path) -> str:
    """``path`` as the checkout names it (``conformance/engine/scheduler.py``), also for a wheel's copy."""
    root = CONFORMANCE_ROOT.parent
    shown = path.relative_to(root) if path.is_relative_to(root) else path
    if shown.parts and shown.parts[0] == "kvconform":  # a wheel's layout: name the checkout's folder
        shown = Path(*shown.parts[1:])
    return shown.as_posix()


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []  # an unreadable file looks nothing up


@cache
def first_lookups() -> dict[str, str]:
    """Each name kvconform's sources look up by a literal -> ``path:line`` of its first lookup."""
    found: dict[str, str] = {}
    for path in sorted(CONFORMANCE_ROOT.rglob("*.py")):
        if path == TABLE:
            continue
        for number, text in enumerate(_lines(path), start=1):
            for match in _LOOKUP.finditer(text):
                found.setdefault(match["name"], f"{checkout_path(path)}:{number}")
    return found


def lookup_location(name: str) -> str:
    """``path:line`` of kvconform's first lookup of ``name`` (or of a field of it), else of its table entry."""
    lookups = first_lookups()
    if name in lookups:
        return lookups[name]
    of_a_field = next((where for looked_up, where in lookups.items() if looked_up.startswith(name + ".")), None)
    if of_a_field is not None:  # lookups keep the order they were found in: the first is the earliest
        return of_a_field
    entry = next((number for number, text in enumerate(_lines(TABLE), start=1) if f'"{name}"' in text), None)
    return checkout_path(TABLE) + (f":{entry}" if entry else "")

