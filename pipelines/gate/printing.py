"""What the gate prints: the selection (``--dry-run``), and the lines of ``--run``.

``--run`` prints its selection, a line per connector when the run ends, and the
verdict with each failure's first line; pytest's own output (thousands of lines on
the real suite) goes to a log file the gate names (``suite_run``), so a passing
gate prints a few dozen lines at most. Where pytest wrote no results, the log's
last lines are shown, since they say why.

Every line starts with ``kvconform gate:`` (or is indented under one), names the
platform and the vLLM tested, and quotes file names and messages from the change
as one line each (``one_line``), so text a pull request controls cannot forge a
line of its own.
"""

from __future__ import annotations

import argparse
import shlex
from collections import Counter
from pathlib import Path

from kvconform.check_table import STATIC_CHECKS
from kvconform.errors import one_line
from kvconform.reports.exercised import UNCONSTRUCTED, is_construction_failure, ran_runtime_check
from kvconform.reports.outcomes import ORDER

from .judgement import GateOutcome
from .results import MESSAGE_LIMIT, GateCase
from .selection import Selection, claimed_platforms

MAX_LISTED = 12  # failing tests listed by name; the rest are counted
LOG_LINES_SHOWN = 15  # of a run that wrote no results: the end of its log


def _printable(text: str) -> str:
    """A file name as one terminal line: hostile names (newlines, escapes) are shown quoted."""
    return text if text.isprintable() else repr(text)


def _connector_lines(selection: Selection) -> list[str]:
    """Each selected connector, the platforms it claims, and the changed files that select it (three at most)."""
    lines = []
    for name in selection.connectors:
        via = f"wraps {', '.join(selection.wrapped[name])}; " if name in selection.wrapped else ""
        files = ", ".join(_printable(f) for f in selection.reasons[name][:3])
        more = f" and {len(selection.reasons[name]) - 3} more" if len(selection.reasons[name]) > 3 else ""
        lines.append(f"  {name} on {', '.join(claimed_platforms(name))}: {via}{files}{more}")
    return lines


def print_selection(selection: Selection, base: str, head: str) -> None:
    """The changed files, what each selects and why, and the connectors to test with the platforms they claim."""
    print(f"{len(selection.changed_files)} file(s) changed between {base} and {head}:")
    for match in selection.files:
        print(f"  {_printable(match.path)}: {match.why}")
    if not selection.connectors:
        print("no connector is touched: nothing to run")
        return
    print(f"connectors to test ({len(selection.connectors)}):")
    for line in _connector_lines(selection):
        print(line)


def print_run_selection(selection: Selection) -> None:
    """``--run``'s selection: the connectors and why, one line each (``--dry-run`` lists every changed file)."""
    print(f"kvconform gate: {len(selection.changed_files)} file(s) changed; {len(selection.connectors)} "
          "connector(s) selected (--dry-run lists every file):")
    for line in _connector_lines(selection):
        print(line)


def connector_line(name: str, platform: str, cases: list[GateCase]) -> str:
    """``ExampleConnector on cpu: 2 failed, 40 passed, 30 skipped; runtime checks ran: roundtrip, contract``; a
    connector that could not be built ran none of its checks: ``...; not run: could not be constructed``."""
    counts = Counter(case.outcome for case in cases)
    outcomes = ", ".join(f"{counts[o]} {o}" for o in ORDER if counts[o]) or "no tests"
    checks = sorted({case.check for case in cases if ran_runtime_check(case.result)})
    unconstructed = any(is_construction_failure(case.result) for case in cases)
    none_ran = UNCONSTRUCTED if unconstructed else "no runtime check ran"
    return (f"kvconform gate: {name} on {platform}: {outcomes}; "
            + (f"runtime checks ran: {', '.join(checks)}" if checks else none_ran))


def print_connectors(results: list[GateCase], connectors: list[str], platform: str) -> None:
    """A line per selected connector, as its platform's run ended: its tests' outcomes and the checks that ran."""
    for name in connectors:
        print(connector_line(name, platform, [case for case in results if case.connector == name]))


def print_log_tail(log: Path, why: str) -> None:
    """The last lines of the run's log, where the gate's own lines cannot say what went wrong."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError as exc:
        print(f"kvconform gate: cannot read the run's log {log}: {exc.strerror}")
        return
    shown = [line for line in lines if line.strip()][-LOG_LINES_SHOWN:]
    print(f"kvconform gate: {why}; the last {len(shown)} lines of {log}:")
    for line in shown:
        print(f"  | {one_line(line, MESSAGE_LIMIT)}")


def where_it_runs(connector: str) -> str:
    """The platforms a connector could run on, from its profile, and what it needs there."""
    from kvconform.conformance.connectors.profiles import profile_for

    profile = profile_for(connector)
    runtime = [check for check in profile.checks or [] if check not in STATIC_CHECKS]
    if not runtime:
        return f"its profile lists no runtime check on any platform ({profile.reason or 'no reason given'})"
    needs = f", with {', '.join(profile.requires.packages)} installed" if profile.requires.packages else ""
    return f"its profile runs {', '.join(runtime)} on {', '.join(claimed_platforms(connector))}{needs}"


def _rerun_command(args: argparse.Namespace, platform: str) -> str:
    words = ["kvconform", "gate", "--repo", str(args.repo), "--base", args.base, "--head", args.head,
             "--run", f"--platform={platform}"]
    return " ".join(shlex.quote(word) for word in words)


def report_not_exercised(connector: str, platform: str, why: str, args: argparse.Namespace) -> None:
    """Why ``connector`` was not exercised on ``platform``, where it could be, and the command that runs it there."""
    print(f"kvconform gate: {connector}: not exercised on {platform}: {one_line(why, MESSAGE_LIMIT)}")
    print(f"  {where_it_runs(connector)}")
    others = [p for p in claimed_platforms(connector) if p != platform]
    if others:
        print(f"  run it there: {_rerun_command(args, others[0])}"
              + (f" (or --platform={', '.join(others[1:])})" if others[1:] else ""))


def _list(lines: list[str], log: Path) -> None:
    for line in lines[:MAX_LISTED]:
        print(f"  {line}")
    if len(lines) > MAX_LISTED:
        print(f"  ... and {len(lines) - MAX_LISTED} more (see {log})")


def print_outcome(outcome: GateOutcome, here: list[str], platform: str, label: str, args: argparse.Namespace,
                  log: Path) -> None:
    """The verdict lines of a run of ``here`` on ``platform`` over the vLLM ``label`` names (``log``: its output)."""
    if outcome.failures:
        print(f"kvconform gate: FAIL on {platform} ({len(outcome.failures)} problem(s); {label}; each failure's "
              f"first line, the rest in {log}):")
        _list(outcome.failures, log)
    if outcome.on_base_too and outcome.base is not None:
        both, base = len(outcome.on_base_too), outcome.base
        if outcome.failures:
            print(f"kvconform gate: not counted against the change: {both} selected test(s) fail on the base "
                  f"too{base.why_broken()}; {base.does_not_run()}")
        else:
            print(f"kvconform gate: {base.does_not_run()}; {both} selected test(s) fail on the base too"
                  f"{base.why_broken()}")
        _list([problem.line for problem in outcome.on_base_too], log)
    if outcome.cannot_drive:
        lead = "" if outcome.failures else f"NO VERDICT on {platform}: "
        print(f"kvconform gate: {lead}kvconform cannot drive this vLLM ({label}); the checks that need what it "
              "lacks were not run (kvconform must be updated for this vLLM):")
        _list([one_line(line) for line in outcome.cannot_drive], log)
        if not outcome.failures:
            return  # every connector is not exercised for that one reason, said above
    for name, why in outcome.not_exercised.items():
        report_not_exercised(name, platform, why, args)
    passed = [n for n in here if n not in outcome.not_exercised]
    if passed and not outcome.failures and not outcome.on_base_too:
        print(f"kvconform gate: PASS: {', '.join(passed)} on {platform} ({label})")
