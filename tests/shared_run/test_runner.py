"""The shared run hands each self-test its own outcomes and the status its own run would have ended with, and a
run that did not finish is failed for every reader, never run again (tests/shared_run/runner.py)."""

from __future__ import annotations

import json

import pytest

from tests.shared_run import runner
from tests.shared_run.plan import SelfTestRun, declared, group_key
from tests.suite_run import Outcome

FIRST = SelfTestRun("test_fill", ("DecodeBenchConnector",))
SECOND = SelfTestRun("test_contract", ("ExampleConnector",))


class Declaring:
    """Stands in for a collected self-test module: its constants are the runs it declares."""

    __name__ = "tests.checks.test_toy_catches"
    FIRST = FIRST
    SECOND = SECOND


def _suite(tmp_path) -> runner.SharedSuite:
    return runner.SharedSuite(declared([Declaring]), tmp_path)  # type: ignore[list-item]


def _given(suite: runner.SharedSuite, status: int, outcomes: dict[str, list[Outcome]]) -> None:
    (group,) = suite.groups
    suite._done[group_key(group)] = runner.GroupResults(status, "output", outcomes, set())


def test_each_run_gets_its_own_outcomes_and_status(tmp_path):
    suite = _suite(tmp_path)
    failed, passed = Outcome("test_fill::a", "failed", "x"), Outcome("test_contract::b", "passed", "")
    _given(suite, 1, {f"{Declaring.__name__}.FIRST": [failed], f"{Declaring.__name__}.SECOND": [passed]})
    assert suite.results(FIRST) == (1, [failed], "output")
    assert suite.results(SECOND) == (0, [passed], "output")


def test_a_run_without_tests_ends_as_pytest_ends_one_and_a_broken_group_keeps_its_status(tmp_path):
    suite = _suite(tmp_path)
    _given(suite, 1, {f"{Declaring.__name__}.FIRST": [], f"{Declaring.__name__}.SECOND": []})
    assert suite.results(FIRST)[0] == runner.NO_TESTS
    _given(suite, 4, {f"{Declaring.__name__}.FIRST": [], f"{Declaring.__name__}.SECOND": []})
    assert suite.results(SECOND)[0] == 4


def test_a_run_no_collected_module_declares_is_refused(tmp_path):
    with pytest.raises(LookupError, match="make it a module constant"):
        _suite(tmp_path).results(SelfTestRun("test_images", ("ExampleConnector",)))


def test_a_run_that_timed_out_fails_every_reader_and_is_not_run_again(tmp_path, monkeypatch):
    suite = _suite(tmp_path)
    (group,) = suite.groups
    folder = tmp_path / f"shared-suite-{group_key(group)}"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"timed_out": "Command '...' timed out after 600 seconds"}))
    monkeypatch.setattr(runner, "_run_group", pytest.fail)
    for run in (FIRST, SECOND):
        with pytest.raises(TimeoutError, match="did not finish: Command"):
            suite.results(run)
