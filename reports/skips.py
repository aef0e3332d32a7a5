"""Skip reasons grouped per platform x connector x check, each distinct reason once with its count.

A full CPU run skips hundreds of tests (connectors whose packages are missing,
checks a profile rules out, block sizes a backend refuses). pytest's ``-rs``
lists them by source line, in no useful order; a reader wants to know, per
matrix cell, why it was not tested, which is a handful of distinct reasons.
Checks not run because an earlier step of their connector failed (``not_run.py``) are grouped
apart from the ordinary skips.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from kvconform.check_table import STATIC_CHECKS

from .matrix import Matrix
from .model import CaseResult, Cell, Results
from .not_run import is_not_run


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


def all_not_run(matrix: Matrix, cell: Cell) -> bool:
    """Whether the cell's worst outcome is a skip and every skip in it is a not-run one (its badge says so)."""
    return cell.status == "skipped" and matrix.not_run(cell) == cell.counts.get("skipped", 0) > 0


# Connectors whose packages the main environment leaves out, and where they run for real instead: the Makefile's
# TP_CONNECTORS (tests/reports/test_report_sections.py checks the two agree).
RUN_ELSEWHERE = {name: "make test-thirdparty"
                 for name in ("LMCacheMPConnector", "MooncakeStoreConnector", "MooncakeConnector")}


@dataclass(frozen=True)
class StaticOnly:
    """Why a connector's row shows only lint (or nothing) run, and the command that runs it for real, if any."""

    ran: str  # "only lint ran" | "no test ran"
    why: str  # the most common skip reason of its other checks
    command: str | None = None

    def text(self, quote: str = "`") -> str:
        elsewhere = f"; {quote}{self.command}{quote} runs it" if self.command else ""
        return f"{self.ran}: {self.why}{elsewhere}"


def static_only_notes(results: Results, matrix: Matrix) -> dict[str, StaticOnly]:
    """connector -> why only its source was checked (lint), for each connector no other test ran on.

    The why is the most common skip reason among its other checks (``needs package lmcache, which is not
    installed here``), and where it runs instead when it runs elsewhere; a reader of a row of skips
    otherwise opens every cell to learn that one package was missing.
    """
    ran: dict[str, set[str]] = {}
    reasons: dict[str, Counter[str]] = defaultdict(Counter)
    for test in results.tests:
        if test.outcome != "skipped":
            ran.setdefault(test.connector, set()).add(test.check)
        elif test.check not in STATIC_CHECKS:
            reasons[test.connector][short_reason(test).removeprefix(f"{test.connector} ")] += 1
    notes = {}
    for connector in matrix.connectors:
        if not ran.get(connector, set()) <= STATIC_CHECKS or not reasons[connector]:
            continue
        why = min(reasons[connector].items(), key=lambda item: (-item[1], item[0]))[0]
        notes[connector] = StaticOnly("only lint ran" if connector in ran else "no test ran", why,
                                      RUN_ELSEWHERE.get(connector))
    return notes


def reasons_by_cell(tests: list[CaseResult]) -> dict[tuple[str, str, str], Counter[str]]:
    """(platform, connector, check) -> Counter of skip reasons, for the skipped tests among ``tests``."""
    cells: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    for test in tests:
        if test.outcome == "skipped":
            cells[(test.platform, test.connector, test.check)][short_reason(test)] += 1
    return cells


def skip_groups(results: Results, matrix: Matrix) -> list[SkipGroup]:
    """Every (cell, reason) of an ordinary skip with its count, in the matrix's order; the most common reason
    first in a cell. Not-run skips are ``not_run_groups``'."""
    return _groups(results, matrix, lambda test: not is_not_run(test))


def not_run_groups(results: Results, matrix: Matrix) -> list[SkipGroup]:
    """Every (cell, reason) of a check not run because an earlier step of its connector failed, with its count."""
    return _groups(results, matrix, is_not_run)


def _groups(results: Results, matrix: Matrix, keep: Callable[[CaseResult], bool]) -> list[SkipGroup]:
    cells = reasons_by_cell([test for test in results.tests if keep(test)])
    groups = []
    for platform in matrix.platforms:
        for connector in matrix.connectors_on(platform):
            for check in matrix.checks_on(platform):
                reasons = cells.get((platform, connector, check), Counter())
                groups += [SkipGroup(platform, connector, check, reason, n)
                           for reason, n in sorted(reasons.items(), key=lambda item: (-item[1], item[0]))]
    return groups
