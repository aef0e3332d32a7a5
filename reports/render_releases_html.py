"""The release report's ``index.html``: per platform, a row per connector x check and a column per vLLM release.

In the run report's style and for the same reasons (``render_html``): one self-contained page, outcome badges on
the outcomes' colours, every piece of test text escaped. A row that differs between releases carries a CHANGED badge
and folds the tests behind the change (``kvconform compare``'s lines, across every release); a release that lacks
the row shows ``missing``. The page works without JS; the script only hides the rows that did not change.
"""

from __future__ import annotations

from html import escape

from .release_matrix import MARKS, MISSING, ReleaseCell, ReleaseMatrix, ReleaseRow, platform_summary, summary
from .render_html import counts_html, page_css
from .verdict import caveats

CHANGED_MARK = "CHANGED"

_CSS = """
tr.differs > th { border-left: 4px solid #c0392b; }
tr.missing > th { border-left: 4px solid #999; }
td.missing { color: #777; background: #f4f4f4; text-align: center; font-style: italic; }
.badge.changed { background: #fff; border-color: #c0392b; color: #c0392b; }
.badge.o-not-run { background: #d9d9d9; }
ul.changed-tests { margin: 0.3em 0 0 1em; padding: 0; font-size: 12px; }
"""

_SCRIPT = """
(function () {
  var box = document.getElementById('only-changed');
  box.addEventListener('change', function () {
    document.querySelectorAll('table.releases tbody tr').forEach(function (row) {
      row.hidden = box.checked && !row.classList.contains('differs') && !row.classList.contains('missing');
    });
  });
})();
"""


def _state_class(state: str) -> str:
    return "o-" + state.replace(" ", "-")


def _cell(cell: ReleaseCell | None) -> str:
    if cell is None:
        return f'<td class="missing">{MISSING}</td>'
    badge = f'<span class="badge {_state_class(cell.state)}">{escape(MARKS[cell.state])}</span>'
    return f'<td class="cell {_state_class(cell.state)}">{badge} {counts_html(cell.count_parts())}</td>'


def _row_header(row: ReleaseRow) -> str:
    """The connector and check, with the row's mark: CHANGED and the tests behind it (folded), or what lacks it."""
    notes = ""
    if row.differs:
        tests = "".join(f"<li><code>{escape(line)}</code></li>" for line in row.changed_tests)
        notes += (f'<details><summary><span class="badge changed">{CHANGED_MARK}</span> {len(row.changed_tests)} '
                  f'test{"s" if len(row.changed_tests) != 1 else ""}</summary><ul class="changed-tests">{tests}</ul>'
                  "</details>")
    if row.missing_from:
        notes += f'<div class="why">missing from {escape(", ".join(row.missing_from))}</div>'
    return f"<th>{escape(row.connector)}</th><th>{escape(row.check)}{notes}</th>"


def _row(row: ReleaseRow, labels: list[str]) -> str:
    kind = "differs" if row.differs else "missing" if row.missing_from else "same"
    return f'<tr class="{kind}">{_row_header(row)}{"".join(_cell(row.cells[label]) for label in labels)}</tr>'


def _table(matrix: ReleaseMatrix, platform: str) -> str:
    head = "".join(f"<th>{escape(label)}</th>" for label in matrix.labels)
    rows = "".join(_row(row, matrix.labels) for row in matrix.rows_on(platform))
    return (f"<h2>{escape(platform_summary(matrix, platform))}</h2>"
            f'<table class="releases" data-platform="{escape(platform)}"><thead><tr><th>connector</th><th>check</th>'
            f"{head}</tr></thead><tbody>{rows}</tbody></table>")


def _releases(matrix: ReleaseMatrix) -> str:
    rows = "".join(f"<tr><th>{escape(run.label)}</th><td>{escape(run.facts())}</td><td>{escape(run.source)}</td>"
                   f"<td>{'<br>'.join(escape(note) for note in caveats(run.results))}</td></tr>"
                   for run in matrix.releases)
    return (f'<table id="releases"><tr><th>release</th><th>run</th><th>results</th><th>notes</th></tr>{rows}'
            "</table>")


def render(matrix: ReleaseMatrix) -> str:
    tables = "".join(_table(matrix, platform) for platform in matrix.platforms)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>kvconform release report</title><style>{page_css()}{_CSS}</style></head>
<body>
<h1>kvconform release report: vLLM {escape(", ".join(matrix.labels))}</h1>
<p id="summary">{escape(summary(matrix))}</p>
{_releases(matrix)}
<p id="filters"><label><input type="checkbox" id="only-changed"> only rows that differ or are missing</label></p>
{tables}
<script>{_SCRIPT}</script>
</body></html>
"""
