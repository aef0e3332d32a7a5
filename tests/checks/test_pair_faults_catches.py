"""The pair checks fail each deliberately broken NixlConnector, for the right reason, and pass the real one.

A shared run covers the tests of conformance/test_pair_faults.py for the unmodified
NixlConnector and the broken copies (tests/checks/nixl_broken.py, given
NixlConnector's profile by the YAML beside it). Each broken copy must fail the tests
that target its bug, with words that name it, and pass the others: it is broken one way.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import REPO, of_connector

pytestmark = pytest.mark.skipif(importlib.util.find_spec("nixl") is None,
                                reason="NixlConnector needs package nixl, which is not installed here")

PROFILES = REPO / "tests" / "checks" / "nixl_broken.yaml"

# connector class -> {a test it must fail: words each of those failures must carry}; its other tests must pass
BROKEN_PAIRS = {
    "SwallowedReadErrorConnector": {"test_pair_load_failure": [
        "SwallowedReadErrorConnector", "neither raised nor reported a load error",
        "reported req-0 received (finished_recving)", "failed_recving"]},
    "DoneOnPostingConnector": {
        "test_pair_slow_transport": ["DoneOnPostingConnector", "did not yet hold the producer's bytes",
                                     "reported the read done before it completed"],
        # reporting a read done when it starts also reports reads that then fail
        "test_pair_load_failure": ["DoneOnPostingConnector"]},
    "ExpiryFinishConnector": {"test_pair_slow_transport": [
        "ExpiryFinishConnector", "the producer released", "when its lease expired", "num_kv_expired_reqs"]},
}
TESTS_PER_CONNECTOR = 5  # test_pair_load_failure: 2 faults x 2 policies; test_pair_slow_transport
# Each pair test builds two NIXL agents (seconds each on a loaded machine): the unmodified connector runs them
# all; each broken copy runs its target test(s) and one it must pass (it is broken one way only).
# test_pair_unreleasable_read and test_pair_vanished_producer have their broken copies in test_nixl_pull_catches.py
SELECTION = ("(test_pair_load_failure or test_pair_slow_transport) and (NixlConnector or slow_transport"
             " or (SwallowedReadErrorConnector and (read-error-fail or post-error-recompute))"
             " or (ExpiryFinishConnector and post-error-recompute))")
SELECTED = {"SwallowedReadErrorConnector": 3, "DoneOnPostingConnector": 1, "ExpiryFinishConnector": 2}


RUN = SelfTestRun.of_broken(SELECTION, "NixlConnector", "tests.checks.nixl_broken", BROKEN_PAIRS, profiles=[PROFILES])


pair_run = results_of(RUN)


def test_suite_exits_nonzero_on_broken_pairs(pair_run):
    returncode, outcomes, output = pair_run
    assert returncode == 1, output[-3000:]  # pytest's status (suite_run.pytest_status)
    assert outcomes, "the suite reported no tests"
    assert any(o.outcome == "failed" for o in outcomes), output[-3000:]


def test_unmodified_nixl_connector_passes_the_same_checks(pair_run):
    _, outcomes, _ = pair_run
    mine = of_connector(outcomes, "NixlConnector")
    assert len(mine) == TESTS_PER_CONNECTOR, [o.nodeid for o in outcomes]
    assert all(o.outcome == "passed" for o in mine), [(o.nodeid, o.outcome, o.message[:500]) for o in mine]


@pytest.mark.parametrize("name", list(BROKEN_PAIRS))
def test_broken_pair_fails_for_its_bug(pair_run, name):
    _, outcomes, _ = pair_run
    mine = of_connector(outcomes, name)
    assert len(mine) == SELECTED[name], [o.nodeid for o in outcomes]
    assert any(o.outcome == "failed" for o in mine), [(o.nodeid, o.outcome) for o in mine]
    for outcome in mine:
        words = next((w for test, w in BROKEN_PAIRS[name].items() if test in outcome.nodeid), None)
        if words is None:
            assert outcome.outcome == "passed", (outcome.nodeid, outcome.outcome, outcome.message[:800])
            continue
        assert outcome.outcome == "failed", (outcome.nodeid, outcome.outcome, outcome.message[:800])
        for word in words:
            assert word in outcome.message, (word, outcome.message[:1500])
