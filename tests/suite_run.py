"""Run the conformance suite in a subprocess against the project's broken connectors.

One subprocess per selection (vLLM's import dominates the cost); results are read
back from JUnit XML so the assertions see exactly what a CI user would.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from kvconform.conformance.reliability.library_copies import MAY_CRASH_AT_EXIT
from kvconform.conformance.session.suite_command import NO_CACHE, SuiteCommand
from kvconform.reports.identity import connector_in_nodeid
from kvconform.reports.junit import JunitCase, read_junit_file
from tests.load import stretched

REPO = Path(__file__).resolve().parents[1]
Run = TypeVar("Run")  # a test's result: this module's Outcome, tests/reliability/suite.py's Case
BROKEN = "tests.checks"
# the whole subprocess on a quiet machine, stretched under load (tests/load.py): a fixed limit ended heavily loaded
# runs before they wrote their JUnit
RUN_TIMEOUT_S = 600


@dataclass
class Outcome:
    nodeid: str
    outcome: str  # passed / failed / skipped / error
    message: str


def run_suite(tmp: Path, args: list[str]) -> tuple[int, list[Outcome], str]:
    junit = tmp / "junit.xml"
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = SuiteCommand("cpu", plugins=(NO_CACHE,), options=("-q", "-o", "junit_family=xunit1"), junitxml=junit,
                           extra=args)
    proc = subprocess.run(
        command.argv(), cwd=tmp, env=env, capture_output=True, text=True, timeout=stretched(RUN_TIMEOUT_S))
    cases = read_junit_file(junit).cases if junit.exists() else []
    # an xfail counts as skipped here: these tests ask whether a check ran and caught the bug
    outcomes = [Outcome(case.junit_id, case.junit_outcome, _message(case)) for case in cases]
    output = proc.stdout + proc.stderr
    return pytest_status(proc.returncode, outcomes, output), outcomes, output


def pytest_status(returncode: int, outcomes: list[Outcome], output: str) -> int:
    """The status pytest returned. A serial run that built a NIXL agent where the system's libnl is loaded too
    ends with SIGSEGV after pytest has returned (conformance/reliability/library_copies.py); where the run said
    so before it ended, pytest's status is what its JUnit records: 1 if any test failed, else 0."""
    if returncode == -signal.SIGSEGV and MAY_CRASH_AT_EXIT in output:
        return int(any(o.outcome in ("failed", "error") for o in outcomes))
    return returncode


def _message(case: JunitCase) -> str:
    return "" if case.junit_outcome == "passed" else f"{case.message}\n{case.text}"


def run_broken(tmp: Path, select: str, original: str, module: str, broken: list[str],
               extra: tuple[str, ...] = ()) -> tuple[int, list[Outcome], str]:
    """One suite run of the ``-k select`` tests over the unmodified ``original`` and every broken copy ``broken``
    names in ``module`` (its dotted name: ``tests.checks.dict_broken``)."""
    args = ["-k", select, *extra, "--connector", original]
    for name in broken:
        args += ["--connector", f"{module}:{name}"]
    return run_suite(tmp, args)


def of_connector(results: list[Run], name: str) -> list[Run]:
    """The results (anything with a ``nodeid``) of the tests that ran connector ``name``."""
    return [result for result in results if connector_in_nodeid(result.nodeid, [name]) == name]
