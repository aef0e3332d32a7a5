"""A passed conformance test's temporary folder is removed as soon as the test is over.

Connectors store real KV there (on an accelerator lane, caches of gigabytes), and
pytest would keep every test's folder of the last three runs. A test that failed
or errored keeps its folder (under pytest's ``--basetemp``) for a look at what its
connector stored.
"""

from __future__ import annotations

import shutil
from collections.abc import Generator
from pathlib import Path

import pytest

from kvconform.reports.identity import connector_of

from .left_behind import after_closes, call_passed, note_call

_TMP_PATH_KEY = pytest.StashKey[Path]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    funcargs = getattr(item, "funcargs", None) or {}
    if connector_of(item) is not None and "tmp_path" in funcargs:
        item.stash[_TMP_PATH_KEY] = funcargs["tmp_path"]
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: sees the teardown report as the other plugins left it
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if connector_of(item) is None:
        return report
    note_call(item, report)
    if call.when == "teardown" and _TMP_PATH_KEY in item.stash:  # judged once its background closes ended
        after_closes(item, lambda: _remove_if_passed(item, report))
    return report


def _remove_if_passed(item: pytest.Item, report: pytest.TestReport) -> None:
    if report.passed and call_passed(item):
        shutil.rmtree(item.stash[_TMP_PATH_KEY], ignore_errors=True)
