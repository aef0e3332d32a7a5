"""``summary.md``: a Buildkite annotation (``buildkite-agent annotate --style ... < summary.md``).

Failures come first because that is what the reader of a red build wants.
Buildkite renders HTML inside Markdown, so every piece of test text is escaped;
annotations are capped at 1 MiB, so long lists are cut with a pointer to index.html.
"""

from __future__ import annotations

import html
import re

from reports.matrix import build_matrix, cell_counts, failures, totals_line
from reports.model import Results
from reports.outcomes import OUTCOMES
from reports.render_terminal import run_line

FAILURES_SHOWN = 50
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|#~])")


def text(value: str) -> str:
    """Test-provided text made inert: HTML escaped, Markdown punctuation escaped, one line."""
    one_line = " ".join(str(value).split())
    return _MARKDOWN_SPECIAL.sub(r"\\\1", html.escape(one_line, quote=False))


def verdict(results: Results) -> tuple[str, str]:
    """(Buildkite annotation style, headline): a run that tested nothing is not a success."""
    if any(OUTCOMES[o].failing for o in results.totals):
        return "error", "❌ failing"
    if not results.tests:
        return "warning", "⚠️ no tests ran"
    if any(r.stale_expectations for r in results.runs):
        return "warning", "⚠️ passing, with stale expectations"
    return "success", "✅ passing"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def render(results: Results) -> str:
    matrix = build_matrix(results)
    lines = [f"## kvconform conformance: {verdict(results)[1]}", "", totals_line(results, emoji=True), ""]

    failing = failures(results)
    if failing:
        lines += [f"### Failures ({len(failing)})", ""]
        rows = [[f"{OUTCOMES[t.outcome].emoji} {t.outcome}", text(t.platform), text(t.connector), text(t.check),
                 text(t.nodeid), text(t.message)] for t in failing[:FAILURES_SHOWN]]
        lines += _table(["outcome", "platform", "connector", "check", "test", "message"], rows)
        if len(failing) > FAILURES_SHOWN:
            lines.append(f"\n… and {len(failing) - FAILURES_SHOWN} more: see index.html")
        lines.append("")

    for platform in matrix.platforms:
        checks = matrix.checks_on(platform)
        rows = []
        for connector in matrix.connectors_on(platform):
            cells = [matrix.cell(platform, connector, k) for k in checks]
            rows.append([text(connector),
                         *(f"{OUTCOMES[c.status].emoji} {cell_counts(c)}" if c else "–" for c in cells)])
        heading = f"### {text(run_line(platform, results.runs))}"
        lines += [heading, "", *_table(["connector", *map(text, checks)], rows), ""]

    stale = [(run, s) for run in results.runs for s in run.stale_expectations]
    if stale:
        lines += ["### Stale expectations", "",
                  "These entries matched no test: remove them or fix their selectors.", ""]
        lines += [f"- {text(s.where)} ({text(run.platform)}): {text(s.expect)} {text(s.selector)}"
                  for run, s in stale]
        lines.append("")
    return "\n".join(lines)
