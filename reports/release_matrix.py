"""The release report's matrix: per platform, a row per connector x check, a column per vLLM release.

A cell's state in a release is what the ordinary matrix shows for it: its worst outcome (``outcomes.py``), or
``not run`` where every test of it could not start. A row *differs* when its state differs between any two releases
that have it; a release whose run has no test of that connector and check (a connector only one release registers,
a check new in one) is *missing* there: shown and listed as such, never counted as a change of outcome. Each row
that differs carries the tests behind it, as ``kvconform compare`` lists them, across all the releases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from kvconform.check_table import COLUMN_ORDER

from .compare import changed_ids, outcome_line, outcomes_of
from .matrix import LAST_CHECKS, Matrix, build_matrix, cell_count_parts
from .model import CaseResult, Cell
from .outcomes import OUTCOMES
from .releases import ReleaseRun
from .skips import all_not_run
from .verdict import caveats, verdict

FORMAT: Final = "kvconform-releases"
VERSION: Final = 1
MISSING: Final = "missing"  # a release whose run has no test of the row's connector and check
NOT_RUN: Final = "not run"  # every test of the cell could not start (an earlier step of its connector failed)
MARKS: Final = {**{name: o.mark for name, o in OUTCOMES.items()}, NOT_RUN: "NOT RUN", MISSING: MISSING}


@dataclass(frozen=True)
class ReleaseCell:
    """One release's cell of a row: its state (an outcome name or ``not run``), and the matrix's cell behind it."""

    state: str
    cell: Cell
    not_run: int  # of its skips, those whose check could not start

    def count_parts(self) -> list[str]:
        """``["1 failed", "11 passed"]``: the cell's outcomes with their counts, as every report words them."""
        return cell_count_parts(self.cell, self.not_run)


@dataclass(frozen=True)
class ReleaseRow:
    platform: str
    connector: str
    check: str
    cells: dict[str, ReleaseCell | None]  # release label -> its cell; None: missing from that release's run
    changed_tests: list[str]  # a row that differs: each test whose outcomes differ, ``id: 0.32.0 passed, ...``

    def state(self, release: str) -> str:
        cell = self.cells[release]
        return cell.state if cell else MISSING

    @property
    def differs(self) -> bool:
        return _differ(self.cells)

    @property
    def missing_from(self) -> list[str]:
        return [release for release, cell in self.cells.items() if cell is None]

    def states_text(self) -> str:
        """``0.31.0 PASS, 0.32.0 PASS, 0.33.0 FAIL, 0.34.0 missing``."""
        return ", ".join(f"{release} {MARKS[self.state(release)]}" for release in self.cells)


@dataclass(frozen=True)
class ReleaseMatrix:
    releases: list[ReleaseRun]  # oldest first: the columns
    platforms: list[str]
    rows: list[ReleaseRow]  # by platform, connector (those with a row that differs first), check

    @property
    def labels(self) -> list[str]:
        return [run.label for run in self.releases]

    def rows_on(self, platform: str) -> list[ReleaseRow]:
        return [row for row in self.rows if row.platform == platform]

    def differing(self) -> list[ReleaseRow]:
        return [row for row in self.rows if row.differs]

    def missing(self) -> list[ReleaseRow]:
        """Rows some release's run lacks (and at least one has)."""
        return [row for row in self.rows if row.missing_from]


def _differ(cells: dict[str, ReleaseCell | None]) -> bool:
    """Whether the state differs between any two releases that have the cell (a missing one is no state)."""
    return len({cell.state for cell in cells.values() if cell}) > 1


def _check_key(check: str) -> tuple[bool, int, str]:
    """Checks in the order a connector meets them (as ``matrix.py`` orders its columns), collection errors last."""
    rank = COLUMN_ORDER.index(check) if check in COLUMN_ORDER else len(COLUMN_ORDER)
    return check in LAST_CHECKS, rank, check


def _cell(matrix: Matrix, key: tuple[str, str, str]) -> ReleaseCell | None:
    cell: Cell | None = matrix.cells.get(key)
    if cell is None:
        return None
    return ReleaseCell(state=NOT_RUN if all_not_run(matrix, cell) else cell.status, cell=cell,
                       not_run=matrix.not_run(cell))


def _changed_tests(labels: list[str], tests: list[list[CaseResult]]) -> list[str]:
    found = [outcomes_of(group) for group in tests]
    return [outcome_line(key, [(label, run.get(key)) for label, run in zip(labels, found, strict=True)], MISSING)
            for key in changed_ids(found)]


def build_release_matrix(releases: list[ReleaseRun]) -> ReleaseMatrix:
    """The rows of every platform any release ran, each with every release's cell."""
    labels = [run.label for run in releases]
    matrices = [build_matrix(run.results) for run in releases]
    platforms = list(dict.fromkeys(p for matrix in matrices for p in matrix.platforms))
    keys = {key for matrix in matrices for key in matrix.cells}
    rows = []
    for key in keys:
        cells = {label: _cell(matrix, key) for label, matrix in zip(labels, matrices, strict=True)}
        changed = _changed_tests(labels, [m.tests.get(key, []) for m in matrices]) if _differ(cells) else []
        rows.append(ReleaseRow(*key, cells=cells, changed_tests=changed))
    changing = {(row.platform, row.connector) for row in rows if row.differs}
    rows.sort(key=lambda row: (platforms.index(row.platform), (row.platform, row.connector) not in changing,
                               row.connector == "-", row.connector, _check_key(row.check)))
    return ReleaseMatrix(releases=releases, platforms=platforms, rows=rows)


def counts_json(cell: ReleaseCell | None) -> dict[str, Any] | None:
    if cell is None:
        return None
    return {"state": cell.state, "counts": cell.cell.counts, **({"not_run": cell.not_run} if cell.not_run else {})}


def to_json(matrix: ReleaseMatrix) -> dict[str, Any]:
    """``releases.json``: the releases (oldest first), per platform how many rows differ, and every row."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "releases": [{"label": run.label, "source": run.source, "vllm": run.recorded("vllm"),
                      "vllm_package": run.recorded("vllm_package"), "torch": run.recorded("torch"),
                      "verdict": verdict(run.results).stated, "totals": run.results.totals,
                      "notes": caveats(run.results)}
                     for run in matrix.releases],
        "platforms": [{"platform": p, "rows": len(rows), "differ": sum(r.differs for r in rows),
                       "missing": sum(bool(r.missing_from) for r in rows)}
                      for p in matrix.platforms for rows in [matrix.rows_on(p)]],
        "rows": [{"platform": row.platform, "connector": row.connector, "check": row.check,
                  "differs": row.differs, "missing_from": row.missing_from,
                  "releases": {label: counts_json(cell) for label, cell in row.cells.items()},
                  "changed_tests": row.changed_tests} for row in matrix.rows],
    }


def platform_summary(matrix: ReleaseMatrix, platform: str) -> str:
    """``cpu: 3 of 120 connector x check rows differ between releases, 2 missing from some``."""
    rows = matrix.rows_on(platform)
    differ, missing = sum(r.differs for r in rows), sum(bool(r.missing_from) for r in rows)
    return (f"{platform}: {differ} of {len(rows)} connector x check rows differ between releases"
            + (f", {missing} missing from some" if missing else ""))


def summary(matrix: ReleaseMatrix) -> str:
    """``vLLM 0.31.0, 0.32.0, 0.33.0, 0.34.0; cpu: 3 of 120 ... differ ...``: the report in one line."""
    several = "" if len(matrix.releases) > 1 else " (one release: nothing to compare)"
    return "; ".join([f"vLLM {', '.join(matrix.labels)}{several}",
                      *(platform_summary(matrix, p) for p in matrix.platforms)])
