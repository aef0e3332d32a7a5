"""``kvconform gate``: the PR gate. Which connectors a vLLM change touches, then test them.

``--dry-run`` says what the change selects, ``--run`` runs exactly those
conformance tests here and gives a verdict, ``--emit-pipeline`` writes the
Buildkite steps that run them on every platform each connector claims.
The selection itself lives in ``pipelines.gate``; this module is the command
around it, the pytest run and the verdict.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import platforms
from conformance.cli import UserError
from pipelines.gate import GateError, Selection, select_change

# flag -> the attribute argparse stores it under; exactly one must be given.
MODES: dict[str, str] = {"--dry-run": "dry_run", "--run": "run_tests", "--emit-pipeline": "emit_pipeline"}

JUNIT_FILE = "junit.xml"  # the verdict is read from here
JSON_FILE = "results.json"  # the suite's own results, kept for ``kvconform report``

FAILING = ("failed", "error")
NOT_EXERCISED = ("skipped",)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", required=True, type=Path, metavar="PATH", help="the vLLM checkout (a git repository)")
    parser.add_argument("--base", required=True, metavar="REV", help="the revision the change is based on")
    parser.add_argument("--head", default="HEAD", metavar="REV", help="the changed revision (default: HEAD)")
    parser.add_argument("--platform", choices=platforms.CHOICES, default=None,
                        help="--run: the platform to test on (default: auto); "
                             "--emit-pipeline: only this platform's steps (default: every claimed platform)")
    modes = parser.add_argument_group("mode (exactly one)")
    modes.add_argument("--dry-run", dest="dry_run", action="store_true", help="say what the change selects; run nothing")
    modes.add_argument("--run", dest="run_tests", action="store_true",
                       help="run the selected conformance tests here; exit 1 unless they all pass")
    modes.add_argument("--emit-pipeline", dest="emit_pipeline", action="store_true",
                       help="write the Buildkite pipeline for the selected connectors")
    parser.add_argument("--json", action="store_true", help="--dry-run: print the selection as JSON")
    parser.add_argument("-o", "--output", type=Path, metavar="FILE", help="--emit-pipeline: write here, not stdout")
    parser.add_argument("--config", type=Path, metavar="FILE", help="--emit-pipeline: the lanes config")
    parser.add_argument("--results", type=Path, metavar="DIR",
                        help=f"--run: keep the run's {JUNIT_FILE} and {JSON_FILE} here (default: a temporary folder)")


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
    from conformance.profiles import profile_for

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


@dataclass(frozen=True)
class TestResult:
    """One test's outcome, as the run's JUnit file records it."""

    nodeid: str
    connector: str | None
    outcome: str  # passed, failed, error, skipped, xfailed, xpassed
    message: str = ""


MAX_WORKER_RESTARTS = 16


def pytest_command(platform: str, connectors: list[str], results: Path) -> list[str]:
    """The conformance run for ``connectors`` on ``platform``: an argument list, never a shell line.

    Connector names come from the checkout's factory, so they are passed glued to
    their option (``--connector=NAME``) and can never be read as an option themselves.
    """
    return [sys.executable, "-m", "pytest", "--pyargs", "conformance", f"--platform={platform}",
            *(f"--connector={name}" for name in connectors), "-p", "no:cacheprovider", "-rs",
            # a worker process, so a connector that crashes it fails its test and the run goes on
            "-n", "1", f"--max-worker-restart={MAX_WORKER_RESTARTS}",
            f"--junitxml={results / JUNIT_FILE}", f"--kvconform-json={results / JSON_FILE}"]


def _connector_in_id(nodeid: str, connectors: list[str]) -> str | None:
    """The connector a test id is parametrized with (``test_x[cpu-CPU_ATTN-ExampleConnector]``)."""
    params = nodeid.rpartition("[")[2].rstrip("]").split("-") if nodeid.endswith("]") else []
    return next((name for name in connectors if name in params), None)


MESSAGE_LIMIT = 240  # a verdict line, not a traceback: the run's own output has the rest


def _one_line(text: str) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= MESSAGE_LIMIT else line[:MESSAGE_LIMIT - 3] + "..."


_JUNIT_OUTCOME = {"failure": "failed", "error": "error", "skipped": "skipped"}
CONNECTOR_PROPERTY = "kvconform.connector"  # set by the suite's results plugin; "-" when a test has none


def read_junit(path: Path, connectors: list[str]) -> list[TestResult] | None:
    """Each test's outcome and connector; None when the file is missing or unreadable.

    The connector is the suite's own label (a JUnit property) when present, else
    the connector named among the test id's parameters.
    """
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    results = []
    for case in root.iter("testcase"):
        nodeid = f"{case.get('classname', '')}::{case.get('name', '')}"
        labels = {p.get("name"): p.get("value") for p in case.iter("property")}
        label = labels.get(CONNECTOR_PROPERTY)
        connector = label if label in connectors else _connector_in_id(nodeid, connectors)
        outcome, message = "passed", ""
        for child in case:
            kind = _JUNIT_OUTCOME.get(child.tag)
            if kind is None or outcome in FAILING:  # a failure or error outranks a later skip
                continue
            outcome = "xfailed" if kind == "skipped" and child.get("type") == "pytest.xfail" else kind
            message = _one_line(child.get("message") or "")
        results.append(TestResult(nodeid, connector, outcome, message))
    return results


def judge(results: list[TestResult] | None, connectors: list[str], platform: str, exit_status: int) -> list[str]:
    """Why the gate fails; empty when it passes.

    A test may pass, fail as expected (xfail) or be skipped, but each changed
    connector must be exercised: one whose every test was skipped is a coverage
    gap on a platform it claims, and fails the gate.
    """
    if results is None:
        return [f"pytest exited with status {exit_status} and wrote no results"]
    problems = [f"{r.outcome.upper()} {r.nodeid}" + (f": {r.message}" if r.message else "")
                for r in results if r.outcome in FAILING]
    for name in connectors:
        own = [r for r in results if r.connector == name]
        if not own:
            problems.append(f"{name}: no test ran on {platform}")
        elif all(r.outcome in NOT_EXERCISED for r in own):
            reasons = sorted({r.message for r in own if r.message}) or ["no reason given"]
            problems.append(f"{name}: every test skipped on {platform}: {'; '.join(reasons)}")
    if exit_status not in (0, 5) and not problems:
        problems.append(f"pytest exited with status {exit_status} (see its output above)")
    return problems


@contextmanager
def _results_folder(chosen: Path | None):
    """The folder the run writes to; a kept one loses its old results, so they are never judged twice."""
    if chosen is None:
        with tempfile.TemporaryDirectory(prefix="kvconform-gate-") as tmp:
            yield Path(tmp)
        return
    try:
        chosen.mkdir(parents=True, exist_ok=True)
        for name in (JUNIT_FILE, JSON_FILE):
            (chosen / name).unlink(missing_ok=True)
    except OSError as exc:
        raise UserError(f"--results {chosen}: cannot use it: {exc.strerror}") from None
    yield chosen.resolve()


def run_tests(selection: Selection, args: argparse.Namespace) -> int:
    if not selection.connectors:
        print("kvconform gate: nothing to run: the change touches no connector")
        return 0
    try:
        spec, _ = platforms.resolve(args.platform or "auto")
    except platforms.PlatformError as exc:
        raise UserError(str(exc)) from None
    here = [name for name in selection.connectors if spec.name in claimed_platforms(name)]
    for name in selection.connectors:
        if name not in here:
            print(f"kvconform gate: {name} claims {', '.join(claimed_platforms(name))}; not run on {spec.name}")
    if not here:
        print(f"kvconform gate: nothing to run on {spec.name}")
        return 0
    print(f"kvconform gate: testing {', '.join(here)} on {spec.name}", flush=True)
    with _results_folder(args.results) as folder:
        # The results folder is the working directory: nothing from the checkout or
        # the caller's folder (conftest.py, pytest.ini) can join the run.
        status = subprocess.run(pytest_command(spec.name, here, folder), cwd=folder, check=False).returncode
        problems = judge(read_junit(folder / JUNIT_FILE, here), here, spec.name, status)
    if problems:
        print(f"kvconform gate: FAIL ({len(problems)} problem(s)):")
        for line in problems:
            print(f"  {line}")
        return 1
    print(f"kvconform gate: PASS: {', '.join(here)} on {spec.name}")
    return 0


# --- --emit-pipeline ---------------------------------------------------------------------


def _is_wait(step) -> bool:
    return step == "wait" or (isinstance(step, dict) and "wait" in step)


def merge_pipelines(pipelines: list[dict]) -> dict:
    """One pipeline from per-platform ones, each shaped ``[test steps..., wait, report steps...]``.

    Concatenating them would put one platform's wait before the next platform's
    tests and serialise the platforms; instead every test step comes first, then
    one wait, then every report step. Step keys must stay unique.
    """
    tests, reports = [], []
    for pipeline in pipelines:
        steps = list(pipeline.get("steps", []))
        cut = next((i for i, step in enumerate(steps) if _is_wait(step)), len(steps))
        tests += steps[:cut]
        reports += steps[cut + 1:]
    wait = next((s for p in pipelines for s in p.get("steps", []) if _is_wait(s)), None)
    merged = {key: value for key, value in (pipelines[0] if pipelines else {}).items() if key != "steps"}
    merged["steps"] = [*tests, *([wait] if wait is not None and reports else []), *reports]
    keys = _step_keys(merged["steps"])
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise UserError(f"the merged pipeline repeats step keys: {', '.join(duplicates)}")
    return merged


def _step_keys(steps: list) -> list[str]:
    keys: list[str] = []
    for step in steps:
        if isinstance(step, dict):
            keys += [step["key"]] if "key" in step else []
            keys += _step_keys(step.get("steps", []))
    return keys


def pipeline_for(selection: Selection, platform: str | None, config: Path | None) -> dict:
    """The selected connectors on every platform each claims (or only ``platform``), one build per platform."""
    from pipelines.generate import build_pipeline
    from pipelines.lanes import LanesError

    wanted = [platform] if platform not in (None, "auto") else list(platforms.PLATFORMS)
    per_platform = {p: [c for c in selection.connectors if p in claimed_platforms(c)] for p in wanted}
    try:
        return merge_pipelines([build_pipeline([p], names, config_path=config)
                                for p, names in per_platform.items() if names])
    except LanesError as exc:
        raise UserError(str(exc)) from None


def emit_pipeline(selection: Selection, args: argparse.Namespace) -> int:
    from pipelines.generate import render_yaml

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
