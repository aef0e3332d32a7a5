"""A connector's answers that trip an assert in vLLM's scheduler fail with the connector's mistake on the first line.

Each copy in vllm_assertions_broken.py breaks one contract vLLM checks with a bare ``assert``; the suite's
failure states it in connector terms, with the numbers, and names vLLM's assertion and its line
(conformance/engine/vllm_assertions.py). NextBlockDictConnector (dict_broken.py) loads into the wrong block:
the round-trip says where the producer's bytes went. DictConnector, unmodified, passes the same tests.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import BROKEN, REPO, of_connector

HERE = Path(__file__).resolve().parent
PROFILES = [REPO / "examples" / "dict_connector.yaml", HERE / "vllm_assertions_broken.yaml", HERE / "dict_broken.yaml"]
ALIGNED = "test_roundtrip_scenario and aligned-bs32 and not unaligned"  # a 128-token prompt, 4 blocks of 32
PEER_STORE = "test_workload_scenario and peer-store"  # a consumer whose own prefix cache holds part of a prompt
# connector -> (module, the test it fails, words its failure's first line carries)
CAUGHT = {
    "EveryTokenDictConnector": ("vllm_assertions_broken", ALIGNED, [
        "claimed 128 external tokens of a 128-token prompt (req-0, after 0 computed locally",
        "must leave at least the last token to compute", "(vLLM asserts num_new_tokens > 0, scheduler.py:"]),
    "LocalBlindDictConnector": ("vllm_assertions_broken", PEER_STORE, [
        "claimed 64 external tokens of a 90-token prompt (c2) after 32 computed locally: 96 in all, past the "
        "prompt's end", "ignores the 32 tokens computed locally",
        "(vLLM asserts num_computed_tokens <= request.num_tokens, scheduler.py:"]),
    # base.py's promise too: the contract oracle (conformance/engine/promises.py) fails it before vLLM asserts
    "AsyncNothingDictConnector": ("vllm_assertions_broken", ALIGNED, [
        "request req-0: get_num_new_matched_tokens(request req-0, 0) returned (0, True)",
        "the load-async flag is True for 0 tokens"]),
    "SendWithoutHoldDictConnector": ("vllm_assertions_broken", ALIGNED, [
        "get_finished reported req-0 as finished sending", "its request_finished returned False for req-0",
        "(vLLM asserts req_id in self.requests, scheduler.py:"]),
    "SyncLoadReportedDictConnector": ("vllm_assertions_broken", ALIGNED, [
        "get_finished reported req-0 as finished receiving", "(its claim for req-0 was (96, False))",
        "(vLLM asserts req_id in self.requests, scheduler.py:"]),
    "NextBlockDictConnector": ("dict_broken", ALIGNED, [
        "token 0 of 96 loaded wrong bytes: the bytes the producer saved for it are in the consumer's block 2 slot "
        "0: loaded one block late"]),
}


RUN = SelfTestRun(f"({ALIGNED}) or ({PEER_STORE})", (
    "examples.dict_connector:DictConnector", *(f"{BROKEN}.{module}:{name}" for name, (module, _, _) in CAUGHT.items())),
    tuple(PROFILES))


run = results_of(RUN)


def of_test(outcomes, name: str, selection: str):
    test = "test_roundtrip_scenario" if selection == ALIGNED else "test_workload_scenario"
    return [o for o in of_connector(outcomes, name) if o.nodeid.split("::")[1].startswith(test)]


@pytest.mark.parametrize("name", list(CAUGHT))
def test_the_first_line_states_the_mistake(run, name):
    _, outcomes, output = run
    _, selection, words = CAUGHT[name]
    failed = of_test(outcomes, name, selection)
    assert [o.outcome for o in failed] == ["failed"], output[-3000:]
    # the exception's first line, as the traceback prints it (JUnit's message attribute is cut short); where the
    # check found several independent failures (checks/verdicts.py), the first line of the one that carries them
    first_line = next((line for line in failed[0].message.splitlines()
                       if re.match(r"E\s+(kvconform\.|\(\d+\) \w+Failure at )", line) and words[0] in line), "")
    for phrase in words:
        assert phrase in first_line, (phrase, failed[0].message[:3000])


def test_vllms_assertion_follows_as_the_cause(run):
    _, outcomes, _ = run
    failed = of_test(outcomes, "EveryTokenDictConnector", ALIGNED)[0]
    assert "assert num_new_tokens > 0" in failed.message and "direct cause" in failed.message, failed.message[:3000]


def test_the_original_passes(run):
    _, outcomes, output = run
    mine = of_connector(outcomes, "DictConnector")
    assert mine and all(o.outcome == "passed" for o in mine), output[-3000:]
