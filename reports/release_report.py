"""``kvconform report --releases RESULTS... --out DIR``: one run per vLLM release, side by side.

Each RESULTS is one release's run (``releases.py`` says how it is keyed, and what is bad input); the report is
written into DIR as ``releases.json``, ``summary.md`` and ``index.html`` (``release_matrix.py`` says what a
change is) and its summary printed: the releases, then each row that differs or is missing somewhere.
Exit status: 0 when the report is written, whatever changed (each release's own run has its verdict); 2 when an
input cannot be read, is not one run of one release, or the report cannot be written.
"""

from __future__ import annotations

import argparse
import json

from kvconform.errors import UserError

from . import render_releases_html, render_releases_markdown, render_releases_terminal
from .readers import ReportInputError
from .release_matrix import ReleaseMatrix, build_release_matrix, summary, to_json
from .releases import read_releases

# file name -> renderer of its text
OUTPUTS = {
    "releases.json": lambda matrix: json.dumps(to_json(matrix), indent=2) + "\n",
    "summary.md": render_releases_markdown.render,
    "index.html": render_releases_html.render,
}
# the run report's options that mean nothing across releases
RUN_ONLY_OPTIONS = {"uncovered": "--uncovered", "coverage_floor": "--coverage-floor",
                    "update_coverage_floor": "--update-coverage-floor", "details": "--details"}


def run(args: argparse.Namespace) -> int:
    given = [option for dest, option in RUN_ONLY_OPTIONS.items() if getattr(args, dest)]
    if given:
        raise UserError(f"{', '.join(given)}: a run report's option; --releases compares runs, give it alone")
    if args.out is None:
        raise UserError("--releases needs --out DIR (the folder the release report is written to)")
    try:
        matrix = build_release_matrix(read_releases(args.results))
    except ReportInputError as exc:
        raise UserError(str(exc)) from None
    write(matrix, args)
    print(render_releases_terminal.render(matrix, print_matrix=args.print_matrix))
    print(f"kvconform report: release report, {summary(matrix)}; "
          f"wrote {', '.join(str(args.out / name) for name in OUTPUTS)}")
    return 0


def write(matrix: ReleaseMatrix, args: argparse.Namespace) -> None:
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, render in OUTPUTS.items():
            (args.out / name).write_text(render(matrix), encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{args.out}: cannot write the release report: {exc.strerror or exc}") from None
