"""A producer idle longer than the consumer's engine_ttl (conformance/test_pair_idle_producer.py) fails the broken copy
made for it, and the real NixlConnector passes.

A shared run covers the idle producer and the plain pair round-trip for the unmodified NixlConnector (both pass) and
IdleProducerKeptConnector (tests/checks/nixl_idle_broken.py), which fails the idle producer, naming the producer's
NIXL agent it kept, and passes the round-trip: its edit (the release of idle producers does nothing) changes nothing
a pair that never idles past engine_ttl does.
"""

from __future__ import annotations

import pytest

from tests.checks.cases import NEEDS_NIXL, ROUNDTRIP, Case, assert_meets_its_cases, selection
from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import REPO

pytestmark = NEEDS_NIXL

PROFILES = REPO / "tests" / "checks" / "nixl_idle_broken.yaml"

IDLE_PRODUCER = Case("test_pair_idle_producer", "test_pair_idle_producer[")

CASES: dict[str, list[Case]] = {
    "NixlConnector": [IDLE_PRODUCER, ROUNDTRIP],
    "IdleProducerKeptConnector": [
        Case(IDLE_PRODUCER.select, IDLE_PRODUCER.nodeid_part, "failed",
             ["IdleProducerKeptConnector", "engine_ttl 3 s", "still held producer A's NIXL agent(s)",
              "no remove_remote_agent on its transport"]),
        ROUNDTRIP],
}
SELECTION = selection(CASES)


RUN = SelfTestRun.of_broken(SELECTION, "NixlConnector", "tests.checks.nixl_idle_broken",
                            [name for name in CASES if name != "NixlConnector"], profiles=[PROFILES])


idle_run = results_of(RUN)


@pytest.mark.parametrize("name", list(CASES))
def test_each_connector_meets_its_cases(idle_run, name):
    _, outcomes, output = idle_run
    assert_meets_its_cases(outcomes, output, name, CASES[name])
