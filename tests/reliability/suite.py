"""Run the conformance suite in a process of its own, the way a user does (forked from a warm Python:
tests/warm_python/), and read its JUnit file back.

Unlike ``tests/suite_run.py`` this keeps what reliability tests need: the
order results arrived in (a crash must not stop later tests), each test's JUnit
properties, an environment of the test's own, and the subprocess's own deadline
(a hang of the whole run is a failure of the test, not of the machine).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kvconform.conformance.session.suite_command import NO_CACHE, SuiteCommand
from kvconform.reports.junit import read_junit_file
from tests.load import describe_load, stretched
from tests.suite_run import of_connector
from tests.warm_python import run_pytest

REPO = Path(__file__).resolve().parents[2]
MISBEHAVING = "tests.reliability.misbehaving_broken"
PROFILES = REPO / "tests" / "reliability" / "misbehaving_broken.yaml"
RUN_DEADLINE_S = 300  # the whole subprocess on a quiet machine (stretched under load: tests/load.py)


@dataclass
class Case:
    nodeid: str
    outcome: str  # passed / failed / error / skipped
    message: str
    properties: dict[str, str] = field(default_factory=dict)


@dataclass
class SuiteRun:
    returncode: int
    cases: list[Case]  # in the order the run reported them
    output: str

    def of(self, connector: str) -> list[Case]:
        return of_connector(self.cases, connector)

    @classmethod
    def from_json(cls, text: str) -> SuiteRun:
        data = json.loads(text)
        return cls(data["returncode"], [Case(**case) for case in data["cases"]], data["output"])


def no_expectations(tmp: Path) -> Path:
    """An expectations file with no entries: these runs judge raw outcomes, whatever the shipped files expect."""
    path = tmp / "no-expectations.yaml"
    path.write_text("platform: cpu\nexpectations: []\n")
    return path


def misbehaving(*names: str) -> list[str]:
    return ["--profiles", str(PROFILES), *(arg for name in names for arg in ("--connector", f"{MISBEHAVING}:{name}"))]


def _read_junit(path: Path) -> list[Case]:
    return [Case(case.junit_id, case.junit_outcome,
                 "" if case.junit_outcome == "passed" else f"{case.message}\n{case.text}", case.properties)
            for case in read_junit_file(path).cases]


def run_suite(tmp: Path, args: list[str], env: dict[str, str] | None = None) -> SuiteRun:
    junit = tmp / "junit.xml"
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # not our workers'
    full_env = {**inherited, **(env or {}), "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    deadline = stretched(RUN_DEADLINE_S)
    try:
        command = SuiteCommand("cpu", plugins=(NO_CACHE, "kvconform.conformance.reliability"),
                               options=("-q", "--kvconform-expectations", str(no_expectations(tmp)),
                                        "-o", "junit_family=xunit1"), junitxml=junit, extra=args)
        proc = run_pytest(command.argv(), tmp, full_env, deadline)
    except subprocess.TimeoutExpired as hung:
        raise AssertionError(f"the suite run did not finish within {deadline} s ({describe_load()} now): "
                             f"{' '.join(args)}\n"
                             f"{_text(hung.stdout)[-3000:]}{_text(hung.stderr)[-3000:]}") from None
    cases = _read_junit(junit) if junit.exists() else []
    return SuiteRun(proc.returncode, cases, proc.stdout + proc.stderr)


def _text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


def shared_run(tmp_path_factory, name: str, plan: Callable[[Path], tuple[list[str], dict[str, str]]]
               ) -> tuple[SuiteRun, Path]:
    """One suite run per test session, however many xdist workers ask for it, and the folder it ran in.

    Module fixtures are per worker under xdist, so a run shared by tests that land on
    different workers would run once on each; here the first asker runs it (``plan``
    gives the arguments and environment for its folder) under a file lock and the
    others read its result.
    """
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above every worker's own
    folder = root / f"reliability-{name}"
    with open(root / f"reliability-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        saved = folder / "run.json"
        if saved.exists():
            return SuiteRun.from_json(saved.read_text()), folder
        folder.mkdir(exist_ok=True)
        args, env = plan(folder)
        run = run_suite(folder, args, env)
        saved.write_text(json.dumps(asdict(run)))
        return run, folder
