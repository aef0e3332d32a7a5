"""Which tests the reliability plugins watch, and how a problem found after one is reported.

They watch the tests that run a connector (``identity.connector_of``), as every
conformance test does (``identity.is_conformance``). Problems found once
the test is over (leaked threads, litter) fail its teardown, so the test shows as
an error naming the connector; when the test had failed already, its connector may
never have been shut down, so they are attached as a section instead of judged.
A check observes at the test's teardown and judges once the shutdowns the test left
running in the background have ended (``after_closes``; ``held_reports.py`` holds the reports meanwhile).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING

import pytest

from kvconform.reports.identity import connector_of

if TYPE_CHECKING:
    from ..connectors.selection import ConnectorParam
    from ..engine.closing import BackgroundClose

MakeReportWrapper = Callable[[pytest.Item, pytest.CallInfo[None]],
                             Generator[None, pytest.TestReport, pytest.TestReport]]

_CALL_PASSED_KEY = pytest.StashKey[bool]()
_FLAGGED_KEY = pytest.StashKey[bool]()
# the test's background closes (engine/closing.py), set by held_reports.py
CLOSES_KEY = pytest.StashKey["list[BackgroundClose]"]()
WAITING_KEY = pytest.StashKey[list[Callable[[], None]]]()  # what to run once they have ended


def runs_conformance_tests(session: pytest.Session) -> bool:
    """Whether this process collected any test that runs a connector, as the conformance tests do (an xdist
    controller collects none itself)."""
    return any(connector_of(item) for item in session.items)


def note_call(item: pytest.Item, report: pytest.TestReport) -> None:
    if report.when == "call":
        item.stash[_CALL_PASSED_KEY] = report.passed


def call_passed(item: pytest.Item) -> bool:
    return item.stash.get(_CALL_PASSED_KEY, False)


def report_left_behind(item: pytest.Item, report: pytest.TestReport, problem: str) -> None:
    """Fail a passed test's teardown with ``problem`` (one more line if already failed by us), else attach it."""
    if item.stash.get(_FLAGGED_KEY, False):
        report.longrepr = f"{report.longrepr}\n{problem}"
    elif report.passed and call_passed(item):
        item.stash[_FLAGGED_KEY] = True
        report.outcome = "failed"
        report.longrepr = problem
    else:
        report.sections.append(("kvconform: left behind", problem))


def closes_running(item: pytest.Item) -> list[BackgroundClose]:
    """The test's background closes that have not ended yet."""
    return [c for c in item.stash.get(CLOSES_KEY, []) if not c.done()]


def after_closes(item: pytest.Item, action: Callable[[], None]) -> None:
    """Run ``action`` once ``item``'s background closes have ended: now, when none is running."""
    if closes_running(item):
        item.stash.setdefault(WAITING_KEY, []).append(action)
    else:
        action()


def teardown_check(observe: Callable[[pytest.Item, ConnectorParam], Callable[[], Iterable[str]]]) -> MakeReportWrapper:
    """A ``pytest_runtest_makereport`` hook that reports every problem a conformance test left behind.

    ``observe(item, connector)`` runs at the test's teardown and returns the judge, which
    lists the problems once the test's background closes have ended (the shared shape of
    the threads and storage plugins: only the finding differs)."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        connector = connector_of(item)
        if connector is None:
            return report
        note_call(item, report)
        if call.when == "teardown":
            judge = observe(item, connector)

            def report_each() -> None:
                for problem in judge():
                    report_left_behind(item, report, problem)

            after_closes(item, report_each)
        return report

    return pytest_runtest_makereport
