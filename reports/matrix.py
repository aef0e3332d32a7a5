"""The connector x platform x check matrix every renderer draws: axes, their order, and cell text.

Order is part of the message: platforms as in the platform table (a platform's vLLM
releases side by side, when a report holds several), checks in the
order a connector meets them, connectors with a failing cell first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass

from kvconform.check_table import COLUMN_ORDER

from .identity import column_platform
from .model import CaseResult, Cell, Results
from .not_run import is_not_run
from .outcomes import ORDER, OUTCOMES, is_failing

# Checks in the check table's order; others follow alphabetically, collection errors last.
LAST_CHECKS = ("collection",)


def _platform_order() -> list[str]:
    from kvconform.platforms import PLATFORMS

    return list(PLATFORMS)


def _ordered(values: Iterable[str], preferred: Iterable[str], last: Container[str] = (),
             base: Callable[[str], str] = lambda v: v) -> list[str]:
    rank = {name: i for i, name in enumerate(preferred)}
    return sorted(set(values), key=lambda v: (v in last, rank.get(base(v), len(rank)), v))


@dataclass
class Matrix:
    platforms: list[str]
    checks: list[str]
    connectors: list[str]
    cells: dict[tuple[str, str, str], Cell]  # (platform, connector, check)
    tests: dict[tuple[str, str, str], list[CaseResult]]

    def cell(self, platform: str, connector: str, check: str) -> Cell | None:
        return self.cells.get((platform, connector, check))

    def checks_on(self, platform: str) -> list[str]:
        return [k for k in self.checks if any(key[0] == platform and key[2] == k for key in self.cells)]

    def not_run(self, cell: Cell) -> int:
        """How many of the cell's skipped tests were not run because an earlier step of the connector failed."""
        return sum(is_not_run(t) for t in self.tests.get((cell.platform, cell.connector, cell.check), []))

    def connectors_on(self, platform: str) -> list[str]:
        """The platform's connectors, those with a failing cell on this platform first."""
        present = [c for c in self.connectors if any(key[0] == platform and key[1] == c for key in self.cells)]
        failing = {key[1] for key, cell in self.cells.items() if key[0] == platform and is_failing(cell.status)}
        return sorted(present, key=lambda c: c not in failing)  # stable: keeps the global order otherwise


def build_matrix(results: Results) -> Matrix:
    cells = {(c.platform, c.connector, c.check): c for c in results.cells}
    tests: dict[tuple[str, str, str], list[CaseResult]] = defaultdict(list)
    for t in results.tests:
        tests[(t.platform, t.connector, t.check)].append(t)
    for group in tests.values():
        group.sort(key=lambda t: (-OUTCOMES[t.outcome].severity, t.nodeid))
    failing = {c.connector for c in results.cells if is_failing(c.status)}
    connectors = sorted({c.connector for c in results.cells}, key=lambda c: (c not in failing, c == "-", c))
    return Matrix(
        platforms=_ordered((c.platform for c in results.cells), _platform_order(), base=column_platform),
        checks=_ordered((c.check for c in results.cells), COLUMN_ORDER, LAST_CHECKS),
        connectors=connectors,
        cells=cells,
        tests=dict(tests),
    )


def cell_counts(cell: Cell, not_run: int = 0, separator: str = " · ") -> str:
    """``1 failed · 4 passed``: every outcome in the cell, worst first (the same words in every report)."""
    return separator.join(cell_count_parts(cell, not_run))


def _parts(counts: dict[str, int], not_run: int) -> list[str]:
    """One part per outcome, worst first; ``not_run`` of the skips counted apart, as ``N not run``, before the rest."""
    parts = []
    for outcome in ORDER:
        count = counts.get(outcome, 0)
        if outcome == "skipped" and not_run:
            parts.append(f"{not_run} not run")
            count -= not_run
        if count:
            parts.append(f"{count} {outcome}")
    return parts


def cell_count_parts(cell: Cell, not_run: int = 0) -> list[str]:
    """``["1 failed", "6 not run", "4 passed"]``: one part per outcome in the cell, worst first; ``not_run`` of its
    skips (``Matrix.not_run``) apart."""
    return _parts(cell.counts, not_run)


def failures(results: Results) -> list[CaseResult]:
    """Failing tests, worst first, then by platform, connector, check and id."""
    return sorted((t for t in results.tests if is_failing(t.outcome)),
                  key=lambda t: (-OUTCOMES[t.outcome].severity, t.platform, t.connector, t.check, t.nodeid))


def totals_parts(results: Results) -> list[str]:
    """``["2 failed", "71 not run", "28 skipped"]``: the run's totals, worst first, its not-run skips apart."""
    return _parts(results.totals, sum(is_not_run(t) for t in results.tests))


def totals_line(results: Results) -> str:
    """``2 failed, 71 not run, 28 skipped``."""
    return ", ".join(totals_parts(results)) or "no tests"
