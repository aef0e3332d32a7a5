"""``index.html``: the connector x platform x check matrix as one self-contained page.

No external assets (CI artifact viewers are often offline or sandboxed), so CSS
and JS are inline. The page is rendered on the server side and works without JS;
the script only filters. Every piece of test text goes through ``html.escape``:
failure messages are attacker-controllable (a connector's exception text).
"""

from __future__ import annotations

from html import escape

from reports.matrix import Matrix, build_matrix, cell_counts, failures, totals_line
from reports.model import CaseResult, Results
from reports.outcomes import ORDER, OUTCOMES

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
.badge { padding: 0 4px; border-radius: 3px; font-size: 12px; }
#filters label { margin-right: 1em; }
ul.tests { margin: 0.3em 0 0 1em; padding: 0; }
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


def _css() -> str:
    return _CSS + "".join(f".o-{o.name} {{ background: {o.colour}; }}\n" for o in OUTCOMES.values())


def _select(ident: str, label: str, values: list[str]) -> str:
    options = "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)
    return (f'<label>{escape(label)} <select id="{ident}"><option value="">all</option>{options}</select></label>')


def _test_item(test: CaseResult, show_where: bool = False) -> str:
    name = test.nodeid if show_where else (test.variant or test.nodeid)
    expected = ""
    if test.expected is not None:
        link = test.expected.link or ""
        expected = (f' <small>expected {escape(test.expected.expect)} by {escape(test.expected.where)}'
                    + (f' (<a href="{escape(link)}">{escape(link)}</a>)' if link.startswith(("http://", "https://"))
                       else "") + "</small>")
    body = f"<pre>{escape(test.details)}</pre>" if test.details else ""
    return (f'<li data-outcome="{escape(test.outcome)}" data-platform="{escape(test.platform)}" '
            f'data-check="{escape(test.check)}"><span class="badge o-{escape(test.outcome)}">{escape(test.outcome)}'
            f'</span> <code>{escape(name)}</code> {escape(test.message)}{expected}{body}</li>')


def _cell(matrix: Matrix, platform: str, connector: str, check: str) -> str:
    where = f'data-platform="{escape(platform)}" data-check="{escape(check)}"'
    cell = matrix.cell(platform, connector, check)
    if cell is None:
        return f'<td class="cell empty" {where}>–</td>'
    tests = "".join(_test_item(t) for t in matrix.tests.get((platform, connector, check), []))
    return (f'<td class="cell o-{escape(cell.status)}" {where} data-outcomes="{escape(" ".join(cell.counts))}">'
            f'<details><summary>{OUTCOMES[cell.status].emoji} {escape(cell_counts(cell))}</summary>'
            f'<ul class="tests">{tests}</ul></details></td>')


def _matrix(matrix: Matrix) -> str:
    groups = "".join(f'<th data-group="{escape(k)}" colspan="{len(matrix.platforms)}">{escape(k)}</th>'
                     for k in matrix.checks)
    subs = "".join(f'<th data-platform="{escape(p)}" data-check="{escape(k)}">{escape(p)}</th>'
                   for k in matrix.checks for p in matrix.platforms)
    rows = "".join(
        f'<tr><th>{escape(c)}</th>' + "".join(_cell(matrix, p, c, k) for k in matrix.checks for p in matrix.platforms)
        + "</tr>" for c in matrix.connectors)
    return (f'<table id="matrix"><thead><tr><th rowspan="2">connector</th>{groups}</tr><tr>{subs}</tr></thead>'
            f"<tbody>{rows}</tbody></table>")


def _runs(results: Results) -> str:
    columns = ("id", "platform", "device", "vllm", "vllm_package", "vllm_commit", "torch", "kvconform", "started",
               "source")
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


def render(results: Results) -> str:
    matrix = build_matrix(results)
    failing = failures(results)
    failure_list = "".join(_test_item(t, show_where=True) for t in failing)
    filters = (_select("f-platform", "platform", matrix.platforms) + _select("f-check", "check", matrix.checks)
               + _select("f-outcome", "outcome", [o for o in ORDER if o in results.totals]))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>kvconform results</title><style>{_css()}</style></head>
<body>
<h1>kvconform conformance results</h1>
<p id="totals">{escape(totals_line(results, emoji=True))}</p>
<h2>Runs</h2>{_runs(results)}
<h2>Matrix</h2>
<p id="filters">{filters}</p>
{_matrix(matrix)}
<h2>Failures ({len(failing)})</h2>
{f'<ul id="failures">{failure_list}</ul>' if failing else "<p>none</p>"}
{_stale(results)}
<script>{_SCRIPT}</script>
</body></html>
"""
