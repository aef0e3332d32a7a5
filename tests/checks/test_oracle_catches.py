"""The contract oracle judges every answer in every check that drives vLLM's scheduler, not only test_contract's.

Each copy in tests/checks/oracle_broken.py breaks a promise of base.py only in a situation a workload reaches
(a request that decoded several tokens, a second finished request): test_contract, which asks each method once,
passes both; the workload check fails both naming the step, the request, the channel and the value, through
conformance/engine/promises.py that its drivers install. ExampleConnector, unmodified, passes everything selected.
"""

from __future__ import annotations

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import REPO, of_connector

PROFILES = REPO / "tests" / "checks" / "oracle_broken.yaml"
WORKLOAD = "test_workload_scenario and decode-after-hit"  # a consumer request decodes 6 tokens; others finish too

# connector class -> words the workload's failure must carry: the step, the request, the channel and the value
BROKEN_ORACLE = {
    "PairsParamsConnector": [
        "PairsParamsConnector (kv_both, scheduler side), step 5 (update_from_output), request c0: "
        "request_finished(request c0, [", "returned (False, [('decoded_tokens', 6)]) (tuple[bool, list])",
        "expected (bool, dict[str, Any] | None): the transfer params are a list"],
    "ListRecvingConnector": [
        "ListRecvingConnector (kv_both, worker side), step 1 (the worker's step), requests p0, p1: "
        "get_finished({'p0', 'p1'}) returned (None, []) (tuple[NoneType, list])",
        "expected (set[str] | None, set[str] | None): the finished-receiving ids: a list, not a set"],
}

RUN = SelfTestRun.of_broken(f"({WORKLOAD}) or test_contract", "ExampleConnector", "tests.checks.oracle_broken",
                            BROKEN_ORACLE, profiles=[PROFILES])


oracle_run = results_of(RUN)


def _workload(outcomes, name: str):
    return [o for o in of_connector(outcomes, name) if "::test_workload_scenario[" in o.nodeid]


def test_unmodified_example_connector_passes(oracle_run):
    _, outcomes, output = oracle_run
    mine = of_connector(outcomes, "ExampleConnector")
    assert _workload(outcomes, "ExampleConnector"), output[-3000:]
    assert all(o.outcome == "passed" for o in mine), [(o.nodeid, o.outcome, o.message[:1500]) for o in mine]


@pytest.mark.parametrize("name", list(BROKEN_ORACLE))
def test_test_contract_alone_passes_the_copy(oracle_run, name):
    _, outcomes, output = oracle_run
    contract = [o for o in of_connector(outcomes, name) if "::test_contract_" in o.nodeid]
    assert contract and all(o.outcome == "passed" for o in contract), (
        output[-3000:], [(o.nodeid, o.outcome, o.message[:1500]) for o in contract])


@pytest.mark.parametrize("name", list(BROKEN_ORACLE))
def test_the_workload_fails_it_naming_step_request_channel_and_value(oracle_run, name):
    _, outcomes, output = oracle_run
    mine = _workload(outcomes, name)
    assert [o.outcome for o in mine] == ["failed"], output[-3000:]
    for words in BROKEN_ORACLE[name]:
        assert words in mine[0].message, (words, mine[0].message[:1500])
