"""The contract check fails each broken connector on exactly the calls that carry its bug, and says why."""

from __future__ import annotations

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

CONTRACT_TESTS = ("scheduler", "worker", "driven", "no_load", "finished_before_load", "unknown_requests",
                  "empty_registration")

# connector class -> (the contract tests it must fail, words each failure must carry); it must pass the rest
BROKEN_CONTRACT = {
    "BareIntClaimConnector": (
        {"scheduler", "driven", "no_load", "finished_before_load"},
        ["BareIntClaimConnector", "get_num_new_matched_tokens", "returned 0 (int)", "expected (int | None, bool)"]),
    "AsyncEmptyClaimConnector": (
        {"scheduler", "driven", "no_load", "finished_before_load"},
        ["AsyncEmptyClaimConnector", "get_num_new_matched_tokens", "returned (0, True)", "must be False"]),
    "DictMetadataConnector": (
        set(CONTRACT_TESTS) - {"empty_registration"},
        ["DictMetadataConnector", "build_connector_meta", "(dict)", "expected a KVConnectorMetadata instance"]),
    "ListFinishedConnector": (
        {"worker", "driven", "no_load", "finished_before_load", "unknown_requests"},
        ["ListFinishedConnector", "get_finished", "returned ([], [])", "expected (set[str] | None, set[str] | None)"]),
    "EchoFinishedConnector": (
        {"driven", "finished_before_load", "unknown_requests"},
        ["EchoFinishedConnector", "get_finished", "as finished loading"]),
    "EmptyRegistrationCrashConnector": (
        {"empty_registration"},
        ["EmptyRegistrationCrashConnector", "register_kv_caches({})", "StopIteration"]),
}


def _test_name(outcome) -> str:
    """``scheduler`` from ``...::test_contract_scheduler[cpu-CPU_ATTN-X]``."""
    return outcome.nodeid.split("::")[-1].split("[")[0].removeprefix("test_contract_")


RUN = SelfTestRun.of_broken("test_contract", "ExampleConnector", "tests.checks.contract_broken", BROKEN_CONTRACT)


contract_run = results_of(RUN)


def test_suite_exits_nonzero_on_broken_connectors(contract_run):
    returncode, outcomes, output = contract_run
    assert returncode == 1, output[-3000:]
    assert len(outcomes) == len(CONTRACT_TESTS) * (1 + len(BROKEN_CONTRACT)), [o.nodeid for o in outcomes]


def test_unmodified_example_connector_passes_every_contract_test(contract_run):
    _, outcomes, _ = contract_run
    mine = of_connector(outcomes, "ExampleConnector")
    assert sorted(map(_test_name, mine)) == sorted(CONTRACT_TESTS), [o.nodeid for o in mine]
    assert all(o.outcome == "passed" for o in mine), [(o.nodeid, o.outcome, o.message[:500]) for o in mine]


@pytest.mark.parametrize("name", list(BROKEN_CONTRACT))
def test_broken_connector_fails_where_its_bug_is(contract_run, name):
    _, outcomes, _ = contract_run
    must_fail, words = BROKEN_CONTRACT[name]
    mine = {_test_name(o): o for o in of_connector(outcomes, name)}
    assert sorted(mine) == sorted(CONTRACT_TESTS), list(mine)
    for test, outcome in mine.items():
        if test not in must_fail:
            assert outcome.outcome == "passed", (outcome.nodeid, outcome.outcome, outcome.message[:1500])
            continue
        assert outcome.outcome == "failed", (outcome.nodeid, outcome.outcome, outcome.message[:500])
        for word in words:
            assert word in outcome.message, (outcome.nodeid, word, outcome.message[:1500])
