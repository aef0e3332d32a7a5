"""``kvconform report RESULTS... --out DIR [--print-matrix]``: render runs into results.json, summary.md, index.html.

RESULTS are JUnit XML files (from any pytest run, e.g. one per platform) and/or
the suite's own ``--kvconform-json`` files; they are merged into one matrix.
Exit status, so a CI step can key on it (``reports.verdict``): 0 when every test
passed, was skipped or failed as an expectation said; 1 when a test failed or
errored (an xfail that passes counts: its entry is out of date), when an
expectation matched no test, or when there were no tests; 2 when an input cannot
be read or the report cannot be written. ``--exit-zero`` makes 1 a 0 (a step that
must go on to annotate the build), never 2.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kvconform.errors import UserError

from . import render_html, render_markdown, render_terminal
from .readers import ReportInputError, read_all
from .verdict import verdict

# file name -> renderer of its text
OUTPUTS = {
    "results.json": lambda results: json.dumps(results.to_json(), indent=2) + "\n",
    "summary.md": render_markdown.render,
    "index.html": render_html.render,
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", metavar="RESULTS",
                        help="JUnit XML or kvconform JSON (--kvconform-json) files; several are merged")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="folder to write results.json, summary.md and index.html into (created if missing)")
    parser.add_argument("--print-matrix", action="store_true",
                        help="also print the connector x check matrix of each platform and the verdict with what it "
                             "rests on (known findings and skip reasons as counts)")
    parser.add_argument("--details", action="store_true",
                        help="--print-matrix, with each known finding and every skip reason listed, not counted")
    parser.add_argument("--exit-zero", action="store_true",
                        help="exit 0 even when tests failed or expectations matched nothing (still 2 on bad input)")


def run(args: argparse.Namespace) -> int:
    try:
        results = read_all(args.results)
    except ReportInputError as exc:
        raise UserError(str(exc)) from None
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, render in OUTPUTS.items():
            (args.out / name).write_text(render(results), encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{args.out}: cannot write the report: {exc.strerror or exc}") from None
    if args.print_matrix or args.details:
        print(render_terminal.render(results, details=args.details))
    outcome = verdict(results)
    print(f"kvconform report: {len(results.tests)} tests from {len(args.results)} file(s): {outcome.headline}; "
          f"wrote {', '.join(str(args.out / name) for name in OUTPUTS)}")
    return 0 if args.exit_zero else outcome.exit_status
