"""Run the conformance suite in a process of its own (forked from a warm Python: tests/warm_python/) against the
project's broken connectors.

Results are read back from JUnit XML so the assertions see exactly what a CI user would. The self-tests that only
select tests and connectors share one run (tests/shared_run/); a test that needs a run of its own (other options,
an environment, an order) calls ``run_suite``.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from kvconform.conformance.reliability.library_copies import MAY_CRASH_AT_EXIT
from kvconform.conformance.session.suite_command import NO_CACHE, SuiteCommand
from kvconform.reports.identity import connector_in_nodeid
from kvconform.reports.junit import JunitCase, read_junit_file
from tests.load import stretched
from tests.warm_python import run_pytest

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
    status, cases, output = run_suite_cases(tmp, args)
    return status, [outcome_of(case) for case in cases], output


def run_suite_cases(tmp: Path, args: list[str], timeout_s: float = RUN_TIMEOUT_S) -> tuple[int, list[JunitCase], str]:
    """The run's status, its JUnit cases and its output; ``timeout_s`` on a quiet machine, stretched under load."""
    junit = tmp / "junit.xml"
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = SuiteCommand("cpu", plugins=(NO_CACHE,), options=("-q", "-o", "junit_family=xunit1"), junitxml=junit,
                           extra=args)
    proc = run_pytest(command.argv(), tmp, env, stretched(timeout_s))
    cases = read_junit_file(junit).cases if junit.exists() else []
    output = proc.stdout + proc.stderr
    failed = any(case.junit_outcome in ("failed", "error") for case in cases)
    return pytest_status(proc.returncode, failed, output), cases, output


def outcome_of(case: JunitCase) -> Outcome:
    """An xfail counts as skipped here: these tests ask whether a check ran and caught the bug."""
    return Outcome(case.junit_id, case.junit_outcome, _message(case))


def pytest_status(returncode: int, failed: bool, output: str) -> int:
    """The status pytest returned (``failed``: whether any test failed or errored). A serial run that built a NIXL
    agent where the system's libnl is loaded too ends with SIGSEGV after pytest has returned
    (conformance/reliability/library_copies.py); where the run said so before it ended, pytest's status is what its
    JUnit records: 1 if any test failed, else 0."""
    if returncode == -signal.SIGSEGV and MAY_CRASH_AT_EXIT in output:
        return int(failed)
    return returncode


def _message(case: JunitCase) -> str:
    return "" if case.junit_outcome == "passed" else f"{case.message}\n{case.text}"


def of_connector(results: list[Run], name: str) -> list[Run]:
    """The results (anything with a ``nodeid``) of the tests that ran connector ``name``."""
    return [result for result in results if connector_in_nodeid(result.nodeid, [name]) == name]
