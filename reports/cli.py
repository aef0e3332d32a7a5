"""``kvconform report RESULTS... --out DIR [--print-matrix]``: render runs into results.json, summary.md, index.html.

With ``--uncovered CONNECTOR`` it prints what of a connector's code no test ran (and, given a floor, why);
with ``--coverage-floor FILE`` it checks the run's connector coverage against a floor (exit 1 below it);
``--out`` is then optional. With ``--releases`` it writes the release report instead (``release_report.py``):
one run per vLLM release, side by side.

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

from . import release_report, render_html, render_markdown, render_terminal
from .coverage import CoverageLookupError, uncovered_text
from .coverage_floor import Floor, FloorError, check_floor, floor_text, load_floor, updated_floor
from .model import Results
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
                        help="JUnit XML or kvconform JSON (--kvconform-json) files; several are merged "
                             "(with --releases: one run per vLLM release, each [LABEL=]FILE)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="folder to write results.json, summary.md and index.html into (created if missing); "
                             "required unless --uncovered or --coverage-floor is given")
    parser.add_argument("--print-matrix", action="store_true",
                        help="also print the connector x check matrix of each platform and the verdict with what it "
                             "rests on (known findings and skip reasons as counts)")
    parser.add_argument("--details", action="store_true",
                        help="--print-matrix, with each known finding and every skip reason listed, not counted")
    parser.add_argument("--releases", action="store_true",
                        help="a release report: each RESULTS is one run of the suite on one vLLM release, keyed by "
                             "the vLLM it recorded (LABEL=FILE names a file's release); writes releases.json, "
                             "summary.md and index.html with a column per release, each row whose outcome differs "
                             "between releases marked; exit 0 once written, 2 on bad input")
    parser.add_argument("--exit-zero", action="store_true",
                        help="exit 0 even when tests failed or expectations matched nothing (still 2 on bad input)")
    coverage = parser.add_argument_group("connector coverage (results of a --kvconform-coverage run; "
                                         "docs/coverage.md)")
    coverage.add_argument("--uncovered", metavar="CONNECTOR",
                          help="print the lines and branches of CONNECTOR's modules that no test of it ran, "
                               "grouped by function (with --coverage-floor, also the lines FILE explains)")
    coverage.add_argument("--coverage-floor", type=Path, metavar="FILE",
                          help="exit 1 when a connector's module is covered less than FILE's floor says "
                               "(conformance/coverage/floor.yaml)")
    coverage.add_argument("--update-coverage-floor", action="store_true",
                          help="with --coverage-floor: rewrite FILE's figures from these results instead of "
                               "checking them")


def run(args: argparse.Namespace) -> int:
    if args.releases:
        return release_report.run(args)
    if args.update_coverage_floor and not args.coverage_floor:
        raise UserError("--update-coverage-floor rewrites the file --coverage-floor FILE names: give both")
    if args.out is None and not (args.uncovered or args.coverage_floor):
        raise UserError("--out DIR is required (the folder the report is written to), unless --uncovered "
                        "CONNECTOR or --coverage-floor FILE is given")
    try:
        results = read_all(args.results)
    except ReportInputError as exc:
        raise UserError(str(exc)) from None
    status = write_report(args, results) if args.out is not None else 0
    if args.uncovered:
        explain = _load_floor(args.coverage_floor).explained if args.coverage_floor else None
        try:
            print(uncovered_text(results, args.uncovered, explain))
        except CoverageLookupError as exc:
            raise UserError(str(exc)) from None
    if args.coverage_floor:
        status = max(status, _floor(args.coverage_floor, results, update=args.update_coverage_floor))
    return 0 if args.exit_zero else status


def _load_floor(path: Path) -> Floor:
    try:
        return load_floor(path)
    except FloorError as exc:
        raise UserError(str(exc)) from None


def _floor(path: Path, results: Results, update: bool) -> int:
    """Check ``results`` against the floor in ``path`` (print what fell below it), or rewrite it from them."""
    floor = _load_floor(path)
    if update:
        new = updated_floor(results, floor)
        try:
            path.write_text(floor_text(new), encoding="utf-8")
        except OSError as exc:
            raise UserError(f"{path}: cannot write the floor: {exc.strerror or exc}") from None
        print(f"kvconform report: wrote {path}: {sum(map(len, new.connectors.values()))} modules of "
              f"{len(new.connectors)} connectors, vLLM {new.vllm}")
        return 0
    check = check_floor(results, floor, str(path))
    for line in [*check.notes, *check.below, *check.stale]:
        print(f"kvconform coverage: {line}")
    if not check.below and not check.stale and not check.notes:
        print(f"kvconform coverage: every module at or above its floor ({path})")
    return check.exit_status


def write_report(args: argparse.Namespace, results: Results) -> int:
    """Write the report's files into ``--out``; the verdict's exit status."""
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
    return outcome.exit_status
