"""The pytest plugins a forked child runs the conformance suite with: the baseline's recorder, a mutant's tests.

``Baseline`` records each test's outcome and duration on the unchanged code and, given a coverage.py
measurement, switches its dynamic context to the test's node id as the test sets up, so every line run from
there on is attributed to that test. ``MutantTests`` keeps only the tests that reached a mutant, in the order
given (fastest first), and remembers the first failure: with ``-x`` that ends the run.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kvconform.errors import one_line

if TYPE_CHECKING:
    from coverage import Coverage

# outcomes on the unchanged code that a mutant can turn red: a pass, and an expected failure that held
CAN_KILL = frozenset({"passed", "xfailed"})
MESSAGE_LIMIT = 200


def _outcome(report: pytest.TestReport) -> str | None:
    """A phase's outcome as the test's: ``failed`` for any failed phase, the call's otherwise, a setup's skip."""
    if report.failed:
        return "failed"
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        return ("xfailed" if report.skipped else "xpassed") if xfail else report.outcome
    if report.when == "setup" and report.skipped:
        return "xfailed" if xfail else "skipped"
    return None


def first_line(report: pytest.CollectReport | pytest.TestReport) -> str:
    """A failure's message in one line: its crash line where pytest has one, else the report's last line."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) or (report.longreprtext.strip().splitlines() or [""])[-1]
    return one_line(text.splitlines()[0] if text else "", MESSAGE_LIMIT)


class Baseline:
    """Each test's outcome and summed duration on the unchanged code; each test a coverage context."""

    def __init__(self, measuring: Coverage | None = None) -> None:
        self.measuring = measuring
        self.outcomes: dict[str, str] = {}
        self.durations: dict[str, float] = defaultdict(float)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if self.measuring is not None:
            self.measuring.switch_context(item.nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.durations[report.nodeid] += report.duration
        outcome = _outcome(report)
        if outcome is not None and self.outcomes.get(report.nodeid) != "failed":
            self.outcomes[report.nodeid] = outcome


class MutantTests:
    """Run only ``tests`` (node ids), in their order; the first failure, and which test runs now (``current``:
    a file rewritten as each test starts, so a child that dies still says where)."""

    def __init__(self, tests: list[str], current: Path) -> None:
        self.tests = tests
        self.current = current
        self.failure = ""
        self.missing: list[str] = []

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        order = {nodeid: index for index, nodeid in enumerate(self.tests)}
        kept = sorted((item for item in items if item.nodeid in order), key=lambda item: order[item.nodeid])
        dropped = [item for item in items if item.nodeid not in order]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept
        found = {item.nodeid for item in kept}
        self.missing = [nodeid for nodeid in self.tests if nodeid not in found]

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed and not self.failure:
            self.failure = f"collecting {report.nodeid or 'the suite'}: {first_line(report)}"

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.current.write_text(nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed and not self.failure:
            self.failure = f"{report.nodeid}: {first_line(report)}"
