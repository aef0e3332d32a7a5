"""``kvconform gate``: the PR gate's command. Which connectors a vLLM change touches, then test them.

``--dry-run`` says what the change selects (``selection``), ``--run`` runs exactly
those conformance tests here (``suite_run``) and gives a verdict (``judgement``),
which blames the change only for what fails on head and not over its base
(``base_comparison``); ``--emit-pipeline`` writes the Buildkite steps that run them
on every platform each connector claims (``emitted_pipeline``). This module wires
the three modes to the command line.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from kvconform import platforms
from kvconform.errors import UserError, one_line

from .base_comparison import base_to_compare, rerun_keyword
from .judgement import EXIT_BUILD_NEEDED, EXIT_NOT_EXERCISED, EXIT_PASS, PYTEST_USAGE_ERROR, GateOutcome, judge
from .overlay import installed_build
from .printing import (
    print_connectors,
    print_log_tail,
    print_outcome,
    print_run_selection,
    print_selection,
    report_not_exercised,
)
from .repository import GateError
from .selection import Selection, claimed_platforms, select_change
from .suite_run import BASE_FOLDER, JSON_FILE, JUNIT_FILE, run_suite
from .tested_vllm import CannotTest, WrongVllm, tested_vllm

# flag -> the attribute argparse stores it under; exactly one must be given.
MODES: dict[str, str] = {"--dry-run": "dry_run", "--run": "run_tests", "--emit-pipeline": "emit_pipeline"}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", required=True, type=Path, metavar="PATH", help="the vLLM checkout (a git repository)")
    parser.add_argument("--base", required=True, metavar="REV", help="the revision the change is based on")
    parser.add_argument("--head", default="HEAD", metavar="REV", help="the changed revision (default: HEAD)")
    parser.add_argument("--platform", choices=platforms.CHOICES, type=platforms.choice, default=None,
                        help="--run: the platform to test on (default: auto); "
                             "--emit-pipeline: only this platform's steps (default: every claimed platform)")
    modes = parser.add_argument_group("mode (exactly one)")
    modes.add_argument("--dry-run", dest="dry_run", action="store_true",
                       help="say what the change selects; run nothing")
    modes.add_argument("--run", dest="run_tests", action="store_true",
                       help="run the selected conformance tests here; exit 1 unless they all pass")
    modes.add_argument("--emit-pipeline", dest="emit_pipeline", action="store_true",
                       help="write the Buildkite pipeline for the selected connectors")
    parser.add_argument("--json", action="store_true", help="--dry-run: print the selection as JSON")
    parser.add_argument("-o", "--output", type=Path, metavar="FILE", help="--emit-pipeline: write here, not stdout")
    parser.add_argument("--config", type=Path, metavar="FILE", help="--emit-pipeline: the lanes config")
    parser.add_argument("--results", type=Path, metavar="DIR",
                        help=f"--run: keep the run's {JUNIT_FILE} and {JSON_FILE} here (default: a temporary folder)")
    tested = parser.add_argument_group("--run: which vLLM is tested (default: the checkout's head commit, "
                                       "its Python over the installed build's compiled parts)")
    tested.add_argument("--vllm-python", type=Path, metavar="PATH",
                        help="run the tests with this Python, whose vLLM is built from the change (a CI image)")
    tested.add_argument("--installed", action="store_true",
                        help="test the vLLM installed here, not the checkout (the verdict says so)")
    parser.add_argument("-k", dest="keyword", metavar="EXPR",
                        help="--run: only the selected connectors' tests matching EXPR (pytest -k)")


def _mode(args: argparse.Namespace) -> str:
    chosen = [flag for flag, attr in MODES.items() if getattr(args, attr, False)]
    if len(chosen) != 1:
        given = " and ".join(chosen) if chosen else "none"
        raise UserError(f"choose exactly one of {', '.join(MODES)} (given: {given})")
    return chosen[0]


def run(args: argparse.Namespace) -> int:
    mode = _mode(args)
    if args.json and mode != "--dry-run":
        raise UserError("--json goes with --dry-run")
    try:
        selection = select_change(args.repo, args.base, args.head)
    except GateError as exc:
        raise UserError(str(exc)) from None
    return HANDLERS[mode](selection, args)


# --- --dry-run ---------------------------------------------------------------------------


def dry_run(selection: Selection, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(selection.as_json(), indent=2))
    else:
        print_selection(selection, args.base, args.head)
    return 0


# --- --run -------------------------------------------------------------------------------


def _source(args: argparse.Namespace) -> str:
    if args.installed and args.vllm_python:
        raise UserError("--installed and --vllm-python exclude each other")
    return "installed" if args.installed else "python" if args.vllm_python else "checkout"


def run_tests(selection: Selection, args: argparse.Namespace) -> int:
    source = _source(args)
    if not selection.connectors:
        print("kvconform gate: nothing to run: the change touches no connector")
        return EXIT_PASS
    try:
        spec, _ = platforms.resolve(args.platform or "auto")
    except platforms.PlatformError as exc:
        raise UserError(str(exc)) from None
    print_run_selection(selection)
    here = [name for name in selection.connectors if spec.name in claimed_platforms(name)]
    elsewhere = tuple(name for name in selection.connectors if name not in here)
    for name in elsewhere:
        report_not_exercised(name, spec.name, f"it claims only {', '.join(claimed_platforms(name))}", args)
    if not here:
        return EXIT_NOT_EXERCISED
    try:
        with tested_vllm(source, args.repo, selection.head, list(selection.changed_files), args.vllm_python) as vllm:
            print(f"kvconform gate: testing {', '.join(here)} on {spec.name} ({vllm.label})", flush=True)
            run = run_suite(vllm, spec.name, here, args.results, args.keyword)
            if not run.results:
                print_log_tail(run.log, f"pytest exited with status {run.status} and ran no test")
            if run.status == PYTEST_USAGE_ERROR and not run.results:
                print("kvconform gate: NO VERDICT: pytest stopped before any test (status 4; its ERROR line above "
                      "says why: vLLM cannot run here, or the run's input is wrong); no connector was tested")
                return EXIT_BUILD_NEEDED
            print_connectors(run.results or [], here, spec.name)
            outcome = replace(judge(run.results, here, run.status), elsewhere=elsewhere,
                              cannot_drive=tuple(run.cannot_drive))
        if source == "checkout" and outcome.problems:
            outcome = _against_base(outcome, selection, spec.name, here, args)
    except CannotTest as exc:
        print(f"kvconform gate: BUILD NEEDED: {one_line(str(exc))}")
        return EXIT_BUILD_NEEDED
    except WrongVllm as exc:
        raise UserError(str(exc)) from None
    except GateError as exc:
        raise UserError(str(exc)) from None
    print_outcome(outcome, here, spec.name, vllm.label, args, run.log)
    return outcome.verdict.exit_status


def _against_base(outcome: GateOutcome, selection: Selection, platform: str, connectors: list[str],
                  args: argparse.Namespace) -> GateOutcome:
    """The head run's problems, with those that fail over the change's base too set apart (``base_comparison``).

    Only where the base's ``vllm/`` is not the installed build: there the head's
    failing tests run again over the base, an overlay of its Python as the head's is."""
    base = base_to_compare(args.repo, selection.fork, installed_build())
    if base is None:
        return outcome
    print(f"kvconform gate: {len(outcome.problems)} problem(s) on head {selection.head[:12]}, whose base "
          f"{base.commit[:12]} is not the installed build ({base.differing} file(s) of it differ): running them "
          "over the base too, so that the change is blamed only for what it broke", flush=True)
    kept = args.results / BASE_FOLDER if args.results is not None else None
    try:
        with tested_vllm("checkout", args.repo, base.commit, []) as vllm:
            run = run_suite(vllm, platform, connectors, kept, rerun_keyword(outcome.problems, args.keyword))
    except CannotTest as exc:
        return outcome.against(replace(base, broken=one_line(str(exc))))
    if run.results is None:
        return outcome.against(replace(base, broken=f"over the base, pytest exited with status {run.status} "
                                                    f"and wrote no results (see {run.log})"))
    failing = frozenset(problem.test for problem in judge(run.results, connectors, run.status).problems)
    return outcome.against(replace(base, failing=failing))


# --- --emit-pipeline ---------------------------------------------------------------------


def emit_pipeline(selection: Selection, args: argparse.Namespace) -> int:
    from .emitted_pipeline import emit_pipeline  # the generator and its lanes config: only this mode needs them

    return emit_pipeline(selection, args)


HANDLERS = {"--dry-run": dry_run, "--run": run_tests, "--emit-pipeline": emit_pipeline}
