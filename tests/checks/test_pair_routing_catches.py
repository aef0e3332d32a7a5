"""Pairs behind a router (conformance/test_pair_routing.py) fail each broken NixlConnector the routing exists for.

A shared run covers the routed pair round-trips: every routing for the unmodified NixlConnector (all pass), and
for each broken copy (tests/checks/nixl_broken.py) the routing that shows its bug. Under the same-id
round-trip of test_roundtrip each copy passes: only the routing exposes it.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import REPO, of_connector

pytestmark = pytest.mark.skipif(importlib.util.find_spec("nixl") is None,
                                reason="NixlConnector needs package nixl, which is not installed here")

PROFILES = REPO / "tests" / "checks" / "nixl_broken.yaml"
# broken copy -> (the routing that shows its bug, as a -k word of its test id; words its failure carries)
BROKEN_ROUTED = {
    "OwnIdNotifyConnector": ("routed-ids", ["the producer did not release its pages (finished_sending)",
                                        "producer holds req-0, req-1, req-2"]),
    "FrontTrimConnector": ("local", ["loaded wrong bytes", "of the consumer's cache differs from block"]),
    "LengthOnlyFinishConnector": ("stop", ["producer did not return kv_transfer_params for every request"]),
}
SELECTION = "test_pair_routed and (NixlConnector or " + " or ".join(
    f"({name} and {word})" for name, (word, _) in BROKEN_ROUTED.items()) + ")"


RUN = SelfTestRun.of_broken(SELECTION, "NixlConnector", "tests.checks.nixl_broken", BROKEN_ROUTED, profiles=[PROFILES])


routed_run = results_of(RUN)


def test_unmodified_nixl_connector_passes_every_routing(routed_run):
    _, outcomes, output = routed_run
    mine = of_connector(outcomes, "NixlConnector")
    assert len(mine) == 4, output[-3000:]
    assert all(o.outcome == "passed" for o in mine), [(o.nodeid, o.message[:800]) for o in mine]


@pytest.mark.parametrize("name", list(BROKEN_ROUTED))
def test_each_copy_fails_its_routing(routed_run, name):
    _, outcomes, output = routed_run
    mine = of_connector(outcomes, name)
    assert mine, output[-3000:]
    word, words = BROKEN_ROUTED[name]
    for outcome in mine:
        assert word in outcome.nodeid and outcome.outcome == "failed", (outcome.nodeid, outcome.message[:800])
        for expected in words:
            assert expected in outcome.message, (expected, outcome.message[:1500])
