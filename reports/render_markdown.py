"""``summary.md``: a Buildkite annotation (``buildkite-agent annotate --style ... < summary.md``).

The verdict comes first with what it rests on (``exercised``: how many connectors' runtime checks
ran, the known findings), then the failures, because that is what the reader of a red build wants.
Buildkite renders HTML inside Markdown, so every piece of test text is escaped;
annotations are capped at 1 MiB, so long lists are cut with a pointer to index.html.
"""

from __future__ import annotations

import html
import re

from .exercised import exercised
from .findings import findings, link_text, where_text
from .matrix import build_matrix, cell_counts, failures, totals_line
from .model import Results
from .outcomes import OUTCOMES
from .render_terminal import run_line
from .skips import not_run_groups, skip_groups
from .verdict import caveats, verdict

FAILURES_SHOWN = 50
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|#~])")


def text(value: str) -> str:
    """Test-provided text made inert: HTML escaped, Markdown punctuation escaped, one line."""
    one_line = " ".join(str(value).split())
    return _MARKDOWN_SPECIAL.sub(r"\\\1", html.escape(one_line, quote=False))


def _link(url: str) -> str:
    """A tracking link as a Markdown link (``[worker.py:165](...)``, ``[#45080](...)``) when it is a web address;
    other text stays inert."""
    if url.startswith(("https://", "http://")) and not any(ch in url for ch in "()<> "):
        return f"[{text(link_text(url))}]({url})"
    return text(url) if url else "–"


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def _failures(results: Results) -> list[str]:
    failing = failures(results)
    if not failing:
        return []
    lines = [f"### Failures ({len(failing)})", ""]
    rows = [[f"**{OUTCOMES[t.outcome].mark}**", text(t.platform), text(t.connector), text(t.check),
             text(t.nodeid), text(t.shown_message)] for t in failing[:FAILURES_SHOWN]]
    lines += markdown_table(["outcome", "platform", "connector", "check", "test", "message"], rows)
    if len(failing) > FAILURES_SHOWN:
        lines.append(f"\n… and {len(failing) - FAILURES_SHOWN} more: see index.html")
    return lines + [""]


def _findings(results: Results) -> list[str]:
    found = findings(results)
    if not found:
        return []
    lines = [f"### Known findings ({len(found)})", "",
             "Each finding once, with the tests its expectation entries decided.", ""]
    rows = [[text(f.finding_class), f.expect, text(", ".join(f.connector_names())), text(f.checks_with_counts()),
             text(f.outcome_counts()), text(f.reason), _link(f.link), text(where_text(f.wheres))] for f in found]
    lines += markdown_table(["class", "expect", "connector", "checks (tests)", "outcome", "reason", "link", "entries"],
                            rows)
    return lines + [""]


def _matrices(results: Results) -> list[str]:
    matrix = build_matrix(results)
    lines: list[str] = []
    for platform in matrix.platforms:
        checks = matrix.checks_on(platform)
        rows = []
        for connector in matrix.connectors_on(platform):
            cells = [matrix.cell(platform, connector, k) for k in checks]
            rows.append([text(connector), *(cell_counts(c, matrix.not_run(c)) if c else "–" for c in cells)])
        lines += [f"### {text(run_line(platform, results.runs))}", "",
                  *markdown_table(["connector", *map(text, checks)], rows), ""]
    return lines


def _not_run(results: Results) -> list[str]:
    """Checks not run because an earlier step of their connector failed: open, not folded like the skips."""
    groups = not_run_groups(results, build_matrix(results))
    if not groups:
        return []
    rows = [[text(g.platform), text(g.connector), text(g.check), str(g.tests), text(g.reason)] for g in groups]
    return [f"### Not run ({sum(g.tests for g in groups)})", "",
            "Checks not run because an earlier step of the connector failed (see Failures).", "",
            *markdown_table(["platform", "connector", "check", "tests", "reason"], rows), ""]


def _skips(results: Results) -> list[str]:
    groups = skip_groups(results, build_matrix(results))
    if not groups:
        return []
    total = sum(g.tests for g in groups)
    rows = [[text(g.platform), text(g.connector), text(g.check), str(g.tests), text(g.reason)] for g in groups]
    return [f"<details><summary>Skipped: {total} tests, why, by connector x check</summary>", "",
            *markdown_table(["platform", "connector", "check", "tests", "reason"], rows), "", "</details>", ""]


def _stale(results: Results) -> list[str]:
    stale = [(run, s) for run in results.runs for s in run.stale_expectations]
    if not stale:
        return []
    return ["### Stale expectations", "", "These entries matched no test: remove them or fix their selectors.", "",
            *(f"- {text(s.where)} ({text(run.platform)}): {text(s.expect)} {text(s.selector)}" for run, s in stale),
            ""]


def render(results: Results) -> str:
    notes = caveats(results)
    lines = [f"## kvconform conformance: {text(verdict(results).stated)}", "",
             text(exercised(results).text()), "", totals_line(results), ""]
    lines += [*(f"> **{text(note)}**" for note in notes), ""] if notes else []
    lines += [*_failures(results), *_findings(results), *_matrices(results), *_not_run(results), *_skips(results),
              *_stale(results)]
    return "\n".join(lines)
