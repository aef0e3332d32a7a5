"""The release report's ``summary.md`` (a Buildkite annotation, like the run report's).

What changed comes first: the releases with their verdicts, then per platform the rows that differ between releases
(each release's outcomes with their counts), the rows missing from some release, and the whole matrix folded below
them with each changed row marked. Test text is made inert as in the run report (``render_markdown.text``).
"""

from __future__ import annotations

from .release_matrix import MARKS, MISSING, ReleaseCell, ReleaseMatrix, ReleaseRow, platform_summary, summary
from .render_markdown import markdown_table, text
from .verdict import caveats

CHANGED, MISSING_FROM = "**changed**", "missing from"


def _cell(cell: ReleaseCell | None) -> str:
    """``**FAIL** 1 failed · 11 passed``, or ``missing``."""
    if cell is None:
        return MISSING
    return f"**{MARKS[cell.state]}** {' · '.join(cell.count_parts())}"


def _releases(matrix: ReleaseMatrix) -> list[str]:
    rows = [[text(run.label), text(run.facts()), text(run.source)] for run in matrix.releases]
    notes = [f"> **{text(run.label)}: {text(note)}**" for run in matrix.releases for note in caveats(run.results)]
    return [*markdown_table(["release", "run", "results"], rows), "", *notes, *([""] if notes else [])]


def _changed(matrix: ReleaseMatrix, platform: str) -> list[str]:
    rows = [row for row in matrix.rows_on(platform) if row.differs]
    if not rows:
        return [f"### {text(platform)}: no row differs between releases", ""]
    table = [[text(row.connector), text(row.check), *(_cell(row.cells[label]) for label in matrix.labels)]
             for row in rows]
    return [f"### {text(platform)}: what changed ({len(rows)})", "",
            *markdown_table(["connector", "check", *map(text, matrix.labels)], table), ""]


def _missing(matrix: ReleaseMatrix, platform: str) -> list[str]:
    rows = [row for row in matrix.rows_on(platform) if row.missing_from]
    if not rows:
        return []
    table = [[text(row.connector), text(row.check), text(", ".join(row.missing_from)),
              *(_cell(row.cells[label]) for label in matrix.labels)] for row in rows]
    return [f"### {text(platform)}: missing from some releases ({len(rows)})", "",
            "No test of the connector and check in that release's run: listed, not counted as a change.", "",
            *markdown_table(["connector", "check", MISSING_FROM, *map(text, matrix.labels)], table), ""]


def _mark(row: ReleaseRow) -> str:
    return CHANGED if row.differs else f"{MISSING_FROM} {text(', '.join(row.missing_from))}" if row.missing_from else ""


def _whole(matrix: ReleaseMatrix, platform: str) -> list[str]:
    table = [[_mark(row), text(row.connector), text(row.check),
              *(MARKS[row.state(label)] for label in matrix.labels)] for row in matrix.rows_on(platform)]
    return [f"<details><summary>{text(platform_summary(matrix, platform))}: every row</summary>", "",
            *markdown_table(["", "connector", "check", *map(text, matrix.labels)], table), "", "</details>", ""]


def render(matrix: ReleaseMatrix) -> str:
    lines = [f"## kvconform release report: vLLM {text(', '.join(matrix.labels))}", "", text(summary(matrix)), "",
             *_releases(matrix)]
    for platform in matrix.platforms:
        lines += [*_changed(matrix, platform), *_missing(matrix, platform), *_whole(matrix, platform)]
    return "\n".join(lines)
