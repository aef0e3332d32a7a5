"""``kvconform gate``: the PR gate. Which connectors a vLLM change touches, then test them.

``--dry-run`` says what the change selects, ``--run`` runs exactly those
conformance tests here and gives a verdict, ``--emit-pipeline`` writes the
Buildkite steps that run them on every platform each connector claims.
The selection itself lives in ``pipelines.gate``; this module is the command
around it, the pytest run and the verdict, which blames the change only for what
fails on head and not over its base (``pipelines.gate_base``).

The run imports the suite's modules with ``--import-mode=append``, pytest's own
option. The overlay of the change's vLLM is first on ``PYTHONPATH``
(``pipelines.gate_source``), and pytest's default mode, ``prepend``, puts each test
module's package root at ``sys.path[0]``: from an editable install that root is the
checkout, which holds no ``vllm/``, but from a wheel it is the site-packages folder
kvconform went into, which holds the installed vLLM wherever the two were installed
together (a venv, an image's system Python, ``--user`` beside a ``--user`` vLLM). That
folder would come before the overlay in the xdist worker (xdist starts it with the
controller's ``sys.path``) and in every engine process vLLM starts from the worker
(multiprocessing's spawn hands the child its parent's ``sys.path``; fork copies it).
``append`` adds the root only where ``sys.path`` lacks it, at its end, so the path of
every process stays as the interpreter built it, overlay first, however kvconform is
installed; test module names, and so test ids, are those of ``prepend`` (both derive
them from the package root), where ``importlib`` mode would rename them. The check
that every process imported the vLLM under test stays: a process that imports
another still ends the gate with no verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvconform import platforms
from kvconform.errors import UserError, one_line

from .gate import GateError, Selection, select_change
from .gate_base import RUN, Base, Problem, base_to_compare, rerun_keyword, split
from .gate_source import CannotTest, TestedVllm, WrongVllm, read_imports, tested_vllm
from .held_run import OUT_FD, HeldRun
from .overlay import installed_build

# flag -> the attribute argparse stores it under; exactly one must be given.
MODES: dict[str, str] = {"--dry-run": "dry_run", "--run": "run_tests", "--emit-pipeline": "emit_pipeline"}

JUNIT_FILE = "junit.xml"  # the verdict is read from here
JSON_FILE = "results.json"  # the suite's own results, kept for ``kvconform report``
BASE_FOLDER = "base"  # --results DIR: the run over the change's base (where there is one) keeps its files here

FAILING = ("failed", "error")


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


# --- which platforms ---------------------------------------------------------------------


def claimed_platforms(connector: str) -> tuple[str, ...]:
    """The platforms a connector claims (its profile's ``requires.platforms``; none listed: all)."""
    from kvconform.conformance.connectors.profiles import profile_for

    claimed = profile_for(connector).requires.platforms
    return tuple(p for p in platforms.PLATFORMS if claimed is None or p in claimed)


def _printable(text: str) -> str:
    """A file name as one terminal line: hostile names (newlines, escapes) are shown quoted."""
    return text if text.isprintable() else repr(text)


# --- --dry-run ---------------------------------------------------------------------------


def dry_run(selection: Selection, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(selection.as_json(), indent=2))
        return 0
    print(f"{len(selection.changed_files)} file(s) changed between {args.base} and {args.head}:")
    for match in selection.files:
        print(f"  {_printable(match.path)}: {match.why}")
    if not selection.connectors:
        print("no connector is touched: nothing to run")
        return 0
    print(f"connectors to test ({len(selection.connectors)}):")
    for name in selection.connectors:
        via = f"wraps {', '.join(selection.wrapped[name])}; " if name in selection.wrapped else ""
        files = ", ".join(_printable(f) for f in selection.reasons[name][:3])
        more = f" and {len(selection.reasons[name]) - 3} more" if len(selection.reasons[name]) > 3 else ""
        print(f"  {name} on {', '.join(claimed_platforms(name))}: {via}{files}{more}")
    return 0


# --- --run -------------------------------------------------------------------------------

# The gate's exit statuses (documented in the README's "PR gate"): a verdict is 0, 1 or 3;
# 2 and 4 mean no verdict could be given.
EXIT_PASS = 0  # every selected connector was exercised here and passed (or failed as expected)
EXIT_FAIL = 1  # a test failed or errored, or pytest itself did
EXIT_NO_VERDICT = 2  # bad input, or a test process imported another vLLM than the one under test
EXIT_NOT_EXERCISED = 3  # nothing failed, but a selected connector ran no runtime check here
EXIT_BUILD_NEEDED = 4  # the change cannot be tested with the installed build (compiled sources, import error),
# or what fails on head fails over the change's base too: the checkout does not run over the installed build;
# or vLLM cannot run here at all (pytest's status 4 before any test: conformance/plugin/preflight.py)
PYTEST_USAGE_ERROR = 4  # pytest's status for a run stopped before any test

# Checks that drive the connector at runtime: only these exercise it. ``lint`` reads its source.
RUNTIME_CHECKS: dict[str, str] = {
    "roundtrip": "save then load through the connector, byte for byte",
    "fill": "the connector fills the blocks it was asked to",
    "contract": "the connector API as vLLM's scheduler and worker call it",
    "load_failure": "a failed load is reported, never silent",
    "shared_store": "an engine of another configuration over the same store never gets this one's KV",
    "scheduler_half": "the scheduler half in vLLM's Scheduler, its worker's reports fed back as vLLM's runner does",
    "engine": "vLLM's engine end to end",
    "workload": "server-like workloads through vLLM's scheduler",
}
EXERCISED = ("passed", "xfailed")  # ran, and passed or matched its expectation


@dataclass(frozen=True)
class TestResult:
    """One test's outcome, as the run's JUnit file records it."""

    nodeid: str
    connector: str | None
    outcome: str  # passed, failed, error, skipped, xfailed, xpassed
    message: str = ""
    check: str = ""


MAX_WORKER_RESTARTS = 16
IMPORT_MODE = "--import-mode=append"


def pytest_command(platform: str, connectors: list[str], results: Path, python: str = sys.executable,
                   keyword: str | None = None) -> list[str]:
    """The conformance run for ``connectors`` on ``platform``: an argument list, never a shell line.

    Connector names come from the checkout's factory, so they are passed glued to
    their option (``--connector=NAME``) and can never be read as an option themselves.
    """
    return [python, "-m", "pytest", "--pyargs", "kvconform.conformance", f"--platform={platform}",
            *(f"--connector={name}" for name in connectors), "-p", "no:cacheprovider", "-rs",
            IMPORT_MODE,  # the overlay stays first on sys.path however kvconform is installed (see above)
            *(["-k", keyword] if keyword else []),
            # a worker process, so a connector that crashes it fails its test and the run goes on
            "-n", "1", f"--max-worker-restart={MAX_WORKER_RESTARTS}",
            f"--junitxml={results / JUNIT_FILE}", f"--kvconform-json={results / JSON_FILE}"]


def _connector_in_id(nodeid: str, connectors: list[str]) -> str | None:
    """The connector a test id is parametrized with (``test_x[cpu-CPU_ATTN-ExampleConnector]``)."""
    params = nodeid.rpartition("[")[2].rstrip("]").split("-") if nodeid.endswith("]") else []
    return next((name for name in connectors if name in params), None)


MESSAGE_LIMIT = 240  # a verdict line, not a traceback: the run's own output has the rest
MAX_LISTED = 12  # failing tests listed by name; the rest are counted


def read_junit(path: Path, connectors: list[str]) -> list[TestResult] | None:
    """Each test's outcome, connector and check; None when the file is missing or unreadable.

    Connector and check are the suite's own labels (JUnit properties) when present,
    else read off the test's name the way ``kvconform report`` reads it.
    """
    from kvconform.reports.identity import from_test_name
    from kvconform.reports.junit import JunitError, read_junit_file
    from kvconform.reports.model import first_line

    try:
        document = read_junit_file(path)
    except (OSError, JunitError):
        return None
    results = []
    for case in document.cases:
        identity = from_test_name(case.name, case.properties)
        nodeid = case.junit_id
        connector = identity.connector if identity.connector in connectors else _connector_in_id(nodeid, connectors)
        # a verdict line: the message's first line, the report's (a failure's message goes on with the assert's own
        # lines; one that ends in a colon, "exited with status 1:", gets the line that says why, or "(no output)")
        message = one_line(first_line(case.message), MESSAGE_LIMIT)
        results.append(TestResult(nodeid, connector, case.outcome, message, identity.check))
    return results


@dataclass
class Verdict:
    """What the run showed: the change's failures (exit 1), failures over its base too (exit 4), and connectors
    it did not exercise (exit 3)."""

    problems: list[Problem]  # the change's
    not_exercised: dict[str, str]  # connector -> why (the skip reasons)
    on_base_too: list[Problem] = field(default_factory=list)  # failing over the change's base too: not counted
    base: Base | None = None  # the base they were compared with (None: it is the installed build, or not run)

    @property
    def failures(self) -> list[str]:
        return [problem.line for problem in self.problems]

    @property
    def status(self) -> int:
        return (EXIT_FAIL if self.problems else EXIT_BUILD_NEEDED if self.on_base_too
                else EXIT_NOT_EXERCISED if self.not_exercised else EXIT_PASS)

    def against(self, base: Base) -> Verdict:
        """This verdict with the problems ``base`` has too set apart."""
        change, both = split(self.problems, base)
        return replace(self, problems=change, on_base_too=both, base=base)


def judge(results: list[TestResult] | None, connectors: list[str], platform: str, exit_status: int) -> Verdict:
    """The verdict on ``connectors``, from each test's result.

    A test may pass, fail as expected (xfail) or be skipped; any other outcome
    fails the gate. A connector passes only when at least one runtime check ran
    here and passed or failed as expected: lint alone, or only skips, is not
    exercised, which is neither a pass nor a failure.
    """
    if results is None:
        return Verdict([Problem(RUN, None, f"pytest exited with status {exit_status} and wrote no results")], {})
    problems = [_problem(r) for r in results if r.outcome in FAILING]
    not_exercised = {}
    for name in connectors:
        own = [r for r in results if r.connector == name]
        if any(r.outcome in FAILING for r in own):
            continue
        if not any(r.check in RUNTIME_CHECKS and r.outcome in EXERCISED for r in own):
            not_exercised[name] = _why_not_exercised(own)
    if exit_status not in (0, 5) and not problems:
        problems.append(Problem(RUN, None, f"pytest exited with status {exit_status} (see its output above)"))
    return Verdict(problems, not_exercised)


def _problem(result: TestResult) -> Problem:
    message = f": {result.message}" if result.message else ""
    return Problem(result.nodeid, result.connector, f"{result.outcome.upper()} {result.nodeid}{message}")


def _why_not_exercised(own: list[TestResult]) -> str:
    if not own:
        return "no test of it ran"
    reasons = sorted({r.message for r in own if r.outcome == "skipped" and r.message})
    ran = sorted({r.check for r in own if r.outcome in EXERCISED})
    parts = [f"only {', '.join(ran)} ran (no runtime check)"] if ran else []
    return "; ".join(parts + reasons) or "every test skipped without a reason"


def where_it_runs(connector: str) -> str:
    """The platforms a connector could run on, from its profile, and what it needs there."""
    from kvconform.conformance.connectors.profiles import profile_for

    profile = profile_for(connector)
    runtime = [check for check in profile.checks or [] if check in RUNTIME_CHECKS]
    if not runtime:
        return f"its profile lists no runtime check on any platform ({profile.reason or 'no reason given'})"
    needs = f", with {', '.join(profile.requires.packages)} installed" if profile.requires.packages else ""
    return f"its profile runs {', '.join(runtime)} on {', '.join(claimed_platforms(connector))}{needs}"


def _rerun_command(args: argparse.Namespace, platform: str) -> str:
    words = ["kvconform", "gate", "--repo", str(args.repo), "--base", args.base, "--head", args.head,
             "--run", f"--platform={platform}"]
    return " ".join(shlex.quote(word) for word in words)


def _report_not_exercised(connector: str, platform: str, why: str, args: argparse.Namespace) -> None:
    print(f"kvconform gate: {connector}: not exercised on {platform}: {one_line(why, MESSAGE_LIMIT)}")
    print(f"  {where_it_runs(connector)}")
    others = [p for p in claimed_platforms(connector) if p != platform]
    if others:
        print(f"  run it there: {_rerun_command(args, others[0])}"
              + (f" (or --platform={', '.join(others[1:])})" if others[1:] else ""))


@contextmanager
def _results_folder(chosen: Path | None) -> Iterator[Path]:
    """The folder the run writes to; a kept one loses its old results, so they are never judged twice."""
    if chosen is None:
        with tempfile.TemporaryDirectory(prefix="kvconform-gate-") as tmp:
            yield Path(tmp)
        return
    try:
        chosen.mkdir(parents=True, exist_ok=True)
        for name in (JUNIT_FILE, JSON_FILE):  # a base run's, from an earlier gate, would be read as this one's
            (chosen / name).unlink(missing_ok=True)
            (chosen / BASE_FOLDER / name).unlink(missing_ok=True)
    except OSError as exc:
        raise UserError(f"--results {chosen}: cannot use it: {exc.strerror}") from None
    yield chosen.resolve()


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
    here = [name for name in selection.connectors if spec.name in claimed_platforms(name)]
    elsewhere = [name for name in selection.connectors if name not in here]
    for name in elsewhere:
        _report_not_exercised(name, spec.name, f"it claims only {', '.join(claimed_platforms(name))}", args)
    if not here:
        return EXIT_NOT_EXERCISED
    try:
        with tested_vllm(source, args.repo, selection.head, list(selection.changed_files), args.vllm_python) as vllm:
            print(f"kvconform gate: testing {', '.join(here)} on {spec.name} ({vllm.label})", flush=True)
            results, status = _run(vllm, spec.name, here, args.results, args.keyword)
            if status == PYTEST_USAGE_ERROR and not results:
                print("kvconform gate: NO VERDICT: pytest stopped before any test (status 4; its ERROR line above "
                      "says why: vLLM cannot run here, or the run's input is wrong); no connector was tested")
                return EXIT_BUILD_NEEDED
            verdict = judge(results, here, spec.name, status)
        if source == "checkout" and verdict.problems:
            verdict = _against_base(verdict, selection, spec.name, here, args)
    except CannotTest as exc:
        print(f"kvconform gate: BUILD NEEDED: {one_line(str(exc))}")
        return EXIT_BUILD_NEEDED
    except WrongVllm as exc:
        raise UserError(str(exc)) from None
    except GateError as exc:
        raise UserError(str(exc)) from None
    return _print_verdict(verdict, here, elsewhere, spec.name, vllm.label, args)


def _terminal_look() -> tuple[list[str], dict[str, str]]:
    """pytest writes to a pipe the gate relays (``held_run``): the options and environment that give it the colours
    and line width it would have on the gate's terminal (none where the gate's output is no terminal either)."""
    if not os.isatty(OUT_FD):
        return [], {}
    try:
        return ["--color=yes"], {"COLUMNS": str(os.get_terminal_size(OUT_FD).columns)}
    except OSError:
        return ["--color=yes"], {}


def _run(vllm: TestedVllm, platform: str, connectors: list[str], kept: Path | None,
         keyword: str | None) -> tuple[list[TestResult] | None, int]:
    """Run the selected tests over ``vllm`` (results kept in ``kept``, if given): each test's result and the run's
    exit status."""
    with _results_folder(kept) as folder:
        # The results folder is the working directory: nothing from the checkout or
        # the caller's folder (conftest.py, pytest.ini, a vllm/ folder) can join the run.
        probing = vllm.start_probe(folder)
        command = pytest_command(platform, connectors, folder, vllm.python, keyword)
        options, env = _terminal_look()
        run = HeldRun([*command, *options], folder, {**vllm.env, **env})
        try:
            probe = vllm.probe_record(probing)
        except BaseException:
            run.stop()
            raise
        run.release()
        status = run.wait()
        if kept is None:  # pytest just named a file that is about to be removed
            print(f"kvconform gate: the {JUNIT_FILE} named above is temporary and removed when the gate ends; "
                  f"--results DIR keeps {JUNIT_FILE} and {JSON_FILE}", flush=True)
        results = read_junit(folder / JUNIT_FILE, connectors)
        if results:  # a failure from another vLLM would mislead as much as a pass
            vllm.verify(read_imports(folder / JSON_FILE), probe)
    return results, status


def _against_base(verdict: Verdict, selection: Selection, platform: str, connectors: list[str],
                  args: argparse.Namespace) -> Verdict:
    """The head run's problems, with those that fail over the change's base too set apart (``gate_base``).

    Only where the base's ``vllm/`` is not the installed build: there the head's
    failing tests run again over the base, an overlay of its Python as the head's is."""
    base = base_to_compare(args.repo, selection.fork, installed_build())
    if base is None:
        return verdict
    print(f"kvconform gate: {len(verdict.problems)} problem(s) on head {selection.head[:12]}, whose base "
          f"{base.commit[:12]} is not the installed build ({base.differing} file(s) of it differ): running them "
          "over the base too, so that the change is blamed only for what it broke", flush=True)
    kept = args.results / BASE_FOLDER if args.results is not None else None
    try:
        with tested_vllm("checkout", args.repo, base.commit, []) as vllm:
            results, status = _run(vllm, platform, connectors, kept, rerun_keyword(verdict.problems, args.keyword))
    except CannotTest as exc:
        return verdict.against(replace(base, broken=one_line(str(exc))))
    if results is None:
        return verdict.against(replace(base, broken=f"over the base, pytest exited with status {status} "
                                                    "and wrote no results"))
    failing = frozenset(problem.test for problem in judge(results, connectors, platform, status).problems)
    return verdict.against(replace(base, failing=failing))


def _list(lines: list[str]) -> None:
    for line in lines[:MAX_LISTED]:
        print(f"  {line}")
    if len(lines) > MAX_LISTED:
        print(f"  ... and {len(lines) - MAX_LISTED} more (see the run's output above)")


def _print_verdict(verdict: Verdict, here: list[str], elsewhere: list[str], platform: str, label: str,
                   args: argparse.Namespace) -> int:
    if verdict.failures:
        print(f"kvconform gate: FAIL on {platform} ({len(verdict.failures)} problem(s); {label}):")
        _list(verdict.failures)
    if verdict.on_base_too and verdict.base is not None:
        both, base = len(verdict.on_base_too), verdict.base
        if verdict.failures:
            print(f"kvconform gate: not counted against the change: {both} selected test(s) fail on the base "
                  f"too{base.why_broken()}; {base.does_not_run()}")
        else:
            print(f"kvconform gate: {base.does_not_run()}; {both} selected test(s) fail on the base too"
                  f"{base.why_broken()}")
        _list([problem.line for problem in verdict.on_base_too])
    for name, why in verdict.not_exercised.items():
        _report_not_exercised(name, platform, why, args)
    passed = [n for n in here if n not in verdict.not_exercised]
    if passed and not verdict.failures and not verdict.on_base_too:
        print(f"kvconform gate: PASS: {', '.join(passed)} on {platform} ({label})")
    status = verdict.status
    if status == EXIT_PASS and elsewhere:
        status = EXIT_NOT_EXERCISED
    return status


# --- --emit-pipeline ---------------------------------------------------------------------


def pipeline_for(selection: Selection, platform: str | None, config: Path | None) -> dict[str, Any]:
    """The selected connectors on every platform each claims (or only ``platform``), with one report step."""
    from .generate import selected_pipeline
    from .lanes import LanesError

    wanted = list(platforms.PLATFORMS) if platform is None or platform == "auto" else [platform]
    per_platform = {p: [c for c in selection.connectors if p in claimed_platforms(c)] for p in wanted}
    try:
        return selected_pipeline(per_platform, config)
    except LanesError as exc:
        raise UserError(str(exc)) from None


def emit_pipeline(selection: Selection, args: argparse.Namespace) -> int:
    from .generate import render_yaml

    pipeline = pipeline_for(selection, args.platform, args.config)
    text = render_yaml(pipeline)
    if args.output is None:
        sys.stdout.write(text)
    else:
        try:
            args.output.write_text(text)
        except OSError as exc:
            raise UserError(f"-o {args.output}: cannot write: {exc.strerror}") from None
    if not pipeline["steps"]:
        where = f" on {args.platform}" if args.platform not in (None, "auto") else ""
        print(f"kvconform gate: no selected connector runs{where}: the pipeline has no steps", file=sys.stderr)
    return 0


HANDLERS = {"--dry-run": dry_run, "--run": run_tests, "--emit-pipeline": emit_pipeline}
