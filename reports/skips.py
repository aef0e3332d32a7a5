"""Skip reasons grouped per platform x connector x check, each distinct reason once with its count.

A full CPU run skips hundreds of tests (connectors whose packages are missing,
checks a profile rules out, block sizes a backend refuses). pytest's ``-rs``
lists them by source line, in no useful order; a reader wants to know, per
matrix cell, why it was not tested, which is a handful of distinct reasons.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from .matrix import Matrix
from .model import CaseResult, Results


@dataclass(frozen=True)
class SkipGroup:
    platform: str
    connector: str
    check: str
    reason: str
    tests: int


def short_reason(test: CaseResult) -> str:
    """The skip message without a leading ``<connector>: `` (the group already names the connector)."""
    message = test.message or "no reason given"
    prefix = f"{test.connector}: "
    return message[len(prefix):] if message.startswith(prefix) and len(message) > len(prefix) else message


def reasons_by_cell(tests: list[CaseResult]) -> dict[tuple[str, str, str], Counter[str]]:
    """(platform, connector, check) -> Counter of skip reasons, for the skipped tests among ``tests``."""
    cells: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    for test in tests:
        if test.outcome == "skipped":
            cells[(test.platform, test.connector, test.check)][short_reason(test)] += 1
    return cells


def skip_groups(results: Results, matrix: Matrix) -> list[SkipGroup]:
    """Every (cell, reason) with its count, in the matrix's order; the most common reason first in a cell."""
    cells = reasons_by_cell(results.tests)
    groups = []
    for platform in matrix.platforms:
        for connector in matrix.connectors_on(platform):
            for check in matrix.checks_on(platform):
                reasons = cells.get((platform, connector, check), Counter())
                groups += [SkipGroup(platform, connector, check, reason, n)
                           for reason, n in sorted(reasons.items(), key=lambda item: (-item[1], item[0]))]
    return groups
