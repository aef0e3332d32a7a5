"""``index.html``: the connector x platform x check matrix as one self-contained page.

No external assets (CI artifact viewers are often offline or sandboxed), so CSS
and JS are inline. The page is rendered on the server side and works without JS;
the script only filters. The page reads top down in the order a reader asks: the
verdict, the matrix (what was tested and how it went), the failures, then the known
findings as a compact table (a link reads ``file.py:165`` or ``#45080``, long reasons
fold). Every piece of test text goes through ``html.escape``:
failure messages are attacker-controllable (a connector's exception text).
"""

from __future__ import annotations

import re
from collections import Counter
from html import escape

from .coverage import html_section as coverage_html
from .exercised import exercised
from .findings import Finding, findings, is_web_link, link_text, where_text
from .matrix import Matrix, build_matrix, cell_count_parts, failures, totals_parts
from .model import EXCEPTION_LINE, CaseResult, Results
from .not_run import NOT_RUN_MARK, NOT_RUN_PREFIX
from .outcomes import ORDER, OUTCOMES
from .skips import (
    SkipGroup,
    StaticOnly,
    all_not_run,
    not_run_groups,
    reasons_by_cell,
    skip_groups,
    static_only_notes,
)
from .verdict import caveats, verdict

# pytest's long tracebacks mark the error's lines with "E   " and end on "path:line: ErrorType".
_ERROR_LINE = re.compile(r"^E(?:\s|$)")
_LOCATION_LINE = re.compile(r"^\S+:\d+: \S")
ERROR_LINES_SHOWN = 12
REASON_SHOWN = 90  # characters of a finding's reason shown before the rest is folded
# The findings table's columns and widths (None: the rest of the page's width, the reason's)
FINDING_COLUMNS = (("class", "4.5em"), ("expect", "4.5em"), ("connector", "14.5em"), ("checks (tests)", "8.5em"),
                   ("outcome", "7em"), ("reason", None), ("link", "15em"), ("entries", "14em"))

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.5em; }
table { border-collapse: collapse; } th, td { border: 1px solid #bbb; padding: 3px 6px; vertical-align: top; }
th { background: #f2f2f2; text-align: left; }
td.cell { min-width: 7em; } td.empty { color: #999; text-align: center; }
td.dim { opacity: 0.25; }
details summary { cursor: pointer; }
pre { white-space: pre-wrap; max-height: 24em; overflow: auto; background: #fafafa; border: 1px solid #ddd;
      padding: 4px; font-size: 12px; }
.badge { padding: 0 4px; border-radius: 3px; font-size: 12px; font-weight: bold; border: 1px solid #888; }
pre.error { border-color: #d88; background: #fff4f4; max-height: 12em; }
details.trace > summary { color: #555; font-size: 12px; }
p.message { margin: 0.2em 0; }
#findings td, #skips td, #not-run td { max-width: 40em; }
#findings { width: 100%; table-layout: fixed; } #findings td { overflow-wrap: anywhere; }
#findings td.entries { font-size: 12px; }
th .why { font-weight: normal; font-size: 12px; color: #555; max-width: 22em; }
#filters label { margin-right: 1em; }
ul.tests { margin: 0.3em 0 0 1em; padding: 0; }
span.count { white-space: nowrap; }
"""

_SCRIPT = """
(function () {
  function value(id) { return document.getElementById(id).value; }
  function apply() {
    var p = value('f-platform'), k = value('f-check'), o = value('f-outcome');
    var matrix = document.getElementById('matrix');
    matrix.querySelectorAll('th[data-platform], td[data-platform]').forEach(function (el) {
      el.hidden = (p && el.dataset.platform !== p) || (k && el.dataset.check !== k);
      if (el.tagName === 'TD') {
        var outcomes = (el.dataset.outcomes || '').split(' ');
        el.classList.toggle('dim', !!o && outcomes.indexOf(o) < 0);
        el.querySelectorAll('li[data-outcome]').forEach(function (li) {
          li.hidden = !!o && li.dataset.outcome !== o;
        });
      }
    });
    matrix.querySelectorAll('th[data-group]').forEach(function (th) {
      var visible = 0;
      matrix.querySelectorAll('th[data-platform][data-check]').forEach(function (sub) {
        if (sub.dataset.check === th.dataset.group && !sub.hidden) { visible += 1; }
      });
      th.hidden = visible === 0;
      th.colSpan = Math.max(visible, 1);
    });
    matrix.querySelectorAll('tbody tr').forEach(function (row) {
      var shown = false;
      row.querySelectorAll('td[data-outcomes]').forEach(function (td) {
        if (!td.hidden && (!o || td.dataset.outcomes.split(' ').indexOf(o) >= 0)) { shown = true; }
      });
      row.hidden = !shown;
    });
    document.querySelectorAll('#failures li').forEach(function (li) {
      li.hidden = (p && li.dataset.platform !== p) || (k && li.dataset.check !== k) ||
                  (o && li.dataset.outcome !== o);
    });
  }
  ['f-platform', 'f-check', 'f-outcome'].forEach(function (id) {
    document.getElementById(id).addEventListener('change', apply);
  });
})();
"""


def page_css() -> str:
    return _CSS + "".join(f".o-{o.name} {{ background: {o.colour}; }}\n" for o in OUTCOMES.values())


def _select(ident: str, label: str, values: list[str]) -> str:
    options = "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)
    return (f'<label>{escape(label)} <select id="{ident}"><option value="">all</option>{options}</select></label>')


def error_text(details: str) -> str:
    """The error itself from a pytest traceback: its ``E`` lines and the line that says where.

    pytest prints a failing test's arguments and source first and the error last,
    so the page shows this first and folds the whole traceback below it.
    """
    lines = details.splitlines()
    errors = [ln[1:].strip() for ln in lines if _ERROR_LINE.match(ln)][:ERROR_LINES_SHOWN]
    if not errors:  # not pytest's format (a plain Python traceback): its last exception line
        errors = [ln.strip() for ln in lines if EXCEPTION_LINE.match(ln.strip())][-1:]
    where = next((ln for ln in reversed(lines) if _LOCATION_LINE.match(ln)), "")
    return "\n".join([*errors, *([where] if where else [])])


def _expected(test: CaseResult) -> str:
    if test.expected is None:
        return ""
    e = test.expected
    link = e.link or ""
    anchor = f" ({_link(link)})" if is_web_link(link) else ""
    kind = f"{escape(e.finding_class)} finding, " if e.finding_class else ""
    return f' <small class="expected">{kind}expected {escape(e.expect)} by {escape(e.where)}{anchor}</small>'


def _test_item(test: CaseResult, show_where: bool = False) -> str:
    """One test: outcome mark, name, its one-line message; then the error, and the traceback folded."""
    name = test.nodeid if show_where else (test.variant or test.nodeid)
    body = ""
    if test.details:
        error = error_text(test.details)
        body = ((f'<pre class="error">{escape(error)}</pre>' if error else "")
                + f'<details class="trace"><summary>full traceback</summary><pre>{escape(test.details)}</pre>'
                  "</details>")
    return (f'<li data-outcome="{escape(test.outcome)}" data-platform="{escape(test.platform)}" '
            f'data-check="{escape(test.check)}"><span class="badge o-{escape(test.outcome)}">'
            f'{escape(OUTCOMES[test.outcome].mark)}</span> <code>{escape(name)}</code>{_expected(test)}'
            f'<p class="message">{escape(test.shown_message)}</p>{body}</li>')


def _skipped_item(reason: str, count: int, platform: str, check: str) -> str:
    """Skipped tests of a cell, one item per distinct reason; those not run (an earlier step failed) say so."""
    mark = NOT_RUN_MARK if reason.startswith(NOT_RUN_PREFIX) else OUTCOMES["skipped"].mark
    return (f'<li data-outcome="skipped" data-platform="{escape(platform)}" data-check="{escape(check)}">'
            f'<span class="badge o-skipped">{mark}</span> {count} test{"s" if count > 1 else ""}: '
            f"{escape(reason)}</li>")


def _cell(matrix: Matrix, platform: str, connector: str, check: str) -> str:
    where = f'data-platform="{escape(platform)}" data-check="{escape(check)}"'
    cell = matrix.cell(platform, connector, check)
    if cell is None:
        return f'<td class="cell empty" {where}>–</td>'
    tests = matrix.tests.get((platform, connector, check), [])
    items = "".join(_test_item(t) for t in tests if t.outcome != "skipped")
    skipped: Counter[str] = reasons_by_cell(tests).get((platform, connector, check), Counter())
    items += "".join(_skipped_item(reason, n, platform, check) for reason, n in skipped.most_common())
    mark = NOT_RUN_MARK if all_not_run(matrix, cell) else OUTCOMES[cell.status].mark
    return (f'<td class="cell o-{escape(cell.status)}" {where} data-outcomes="{escape(" ".join(cell.counts))}">'
            f'<details><summary><span class="badge o-{escape(cell.status)}">{mark}</span> '
            f'{counts_html(cell_count_parts(cell, matrix.not_run(cell)))}</summary><ul class="tests">{items}</ul>'
            "</details></td>")


def counts_html(parts: list[str], separator: str = " · ") -> str:
    """``4 xfailed · 22 passed`` with each count kept on one line with its word: a narrow cell breaks between the
    parts, never inside one (``4`` / ``xfailed``)."""
    return separator.join(f'<span class="count">{escape(part)}</span>' for part in parts)


def _link(link: str) -> str:
    """A web address as a short link (``file.py:165``, ``#45080``), the address in its target and tooltip."""
    return f'<a href="{escape(link)}" title="{escape(link)}">{escape(link_text(link))}</a>'


def _connector_header(connector: str, note: StaticOnly | None) -> str:
    """The row's connector, and for one that only had lint here, why (folded when long) and what runs it."""
    if note is None:
        return f"<th>{escape(connector)}</th>"
    elsewhere = f"; <code>{escape(note.command)}</code> runs it" if note.command else ""
    return (f'<th>{escape(connector)}<div class="why">{escape(note.ran)}: {_folded(note.why)}{elsewhere}</div>'
            "</th>")


def _matrix(matrix: Matrix, notes: dict[str, StaticOnly]) -> str:
    groups = "".join(f'<th data-group="{escape(k)}" colspan="{len(matrix.platforms)}">{escape(k)}</th>'
                     for k in matrix.checks)
    subs = "".join(f'<th data-platform="{escape(p)}" data-check="{escape(k)}">{escape(p)}</th>'
                   for k in matrix.checks for p in matrix.platforms)
    rows = "".join(
        "<tr>" + _connector_header(c, notes.get(c))
        + "".join(_cell(matrix, p, c, k) for k in matrix.checks for p in matrix.platforms) + "</tr>"
        for c in matrix.connectors)
    return (f'<table id="matrix"><thead><tr><th rowspan="2">connector</th>{groups}</tr><tr>{subs}</tr></thead>'
            f"<tbody>{rows}</tbody></table>")


def _runs(results: Results) -> str:
    columns = ("id", "platform", "device", "vllm", "vllm_package", "vllm_note", "vllm_commit", "torch", "kvconform",
               "started", "source")
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    rows = "".join("<tr>" + "".join(f"<td>{escape(str(getattr(r, c) or ''))}</td>" for c in columns) + "</tr>"
                   for r in results.runs)
    return f"<table id=\"runs\"><tr>{head}</tr>{rows}</table>"


def _stale(results: Results) -> str:
    items = "".join(f"<li><code>{escape(s.where)}</code> ({escape(r.platform)}): {escape(s.expect)} "
                    f"<code>{escape(s.selector)}</code></li>" for r in results.runs for s in r.stale_expectations)
    if not items:
        return ""
    return ("<h2>Stale expectations</h2><p>These entries matched no collected test: remove them or fix their "
            f"selectors.</p><ul>{items}</ul>")


def _folded(text: str) -> str:
    """Text longer than ``REASON_SHOWN`` characters as its start, the whole of it one click away."""
    if len(text) <= REASON_SHOWN:
        return escape(text)
    start = text[:REASON_SHOWN].rsplit(" ", 1)[0]
    return f"<details><summary>{escape(start)} …</summary>{escape(text)}</details>"


def _finding_row(f: Finding) -> str:
    cells = (escape(f.finding_class), escape(f.expect), escape(", ".join(f.connector_names())),
             counts_html(f.check_parts(), ", "), counts_html(f.outcome_parts()),
             _folded(f.reason))
    link = _link(f.link) if is_web_link(f.link) else escape(f.link)
    return ("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + f'<td class="link">{link}</td>'
            + f'<td class="entries"><code>{escape(where_text(f.wheres))}</code></td></tr>')


def _findings(results: Results) -> str:
    found = findings(results)
    if not found:
        return ""
    columns = "".join(f'<col style="width: {w}">' if w else "<col>" for _, w in FINDING_COLUMNS)
    head = "".join(f"<th>{h}</th>" for h, _ in FINDING_COLUMNS)
    rows = "".join(_finding_row(f) for f in found)
    return (f"<h2>Known findings ({len(found)})</h2><p>Each finding once, with the tests its expectation entries "
            f'decided.</p><table id="findings"><colgroup>{columns}</colgroup><tr>{head}</tr>{rows}</table>')


def _group_table(ident: str, groups: list[SkipGroup]) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("platform", "connector", "check", "tests", "reason"))
    rows = "".join(f"<tr><td>{escape(g.platform)}</td><td>{escape(g.connector)}</td><td>{escape(g.check)}</td>"
                   f"<td>{g.tests}</td><td>{escape(g.reason)}</td></tr>" for g in groups)
    return f'<table id="{ident}"><tr>{head}</tr>{rows}</table>'


def _not_run(results: Results, matrix: Matrix) -> str:
    """Checks not run because an earlier step of their connector failed: shown open, before the skips."""
    groups = not_run_groups(results, matrix)
    if not groups:
        return ""
    return (f"<h2>Not run ({sum(g.tests for g in groups)})</h2><p>Checks not run because an earlier step of the "
            f"connector failed (see Failures).</p>{_group_table('not-run', groups)}")


def _skips(results: Results, matrix: Matrix) -> str:
    groups = skip_groups(results, matrix)
    if not groups:
        return ""
    total = sum(g.tests for g in groups)
    return (f"<h2>Skipped ({total})</h2><details><summary>why, by connector x check</summary>"
            f"{_group_table('skips', groups)}</details>")


def render(results: Results) -> str:
    matrix = build_matrix(results)
    failing = failures(results)
    failure_list = "".join(_test_item(t, show_where=True) for t in failing)
    filters = (_select("f-platform", "platform", matrix.platforms) + _select("f-check", "check", matrix.checks)
               + _select("f-outcome", "outcome", [o for o in ORDER if o in results.totals]))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>kvconform results</title><style>{page_css()}</style></head>
<body>
<h1>kvconform conformance results: {escape(verdict(results).stated)}</h1>
<p id="exercised">{escape(exercised(results).text())}</p>
<p id="totals">{counts_html(totals_parts(results), ", ") or "no tests"}</p>
{"".join(f'<p class="caveat"><strong>{escape(c)}</strong></p>' for c in caveats(results))}
<h2>Matrix</h2>
<p id="filters">{filters}</p>
{_matrix(matrix, static_only_notes(results, matrix))}
{coverage_html(results)}
<h2>Failures ({len(failing)})</h2>
{f'<ul id="failures">{failure_list}</ul>' if failing else "<p>none</p>"}
{_findings(results)}
{_not_run(results, matrix)}
{_skips(results, matrix)}
{_stale(results)}
<h2>Runs</h2>{_runs(results)}
<script>{_SCRIPT}</script>
</body></html>
"""
