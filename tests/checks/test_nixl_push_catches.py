"""The NIXL push situations beyond the round-trip fail each broken copy made for them, and pass the real connector.

One subprocess runs the pairs whose halves meet in other orders or stop mid-WRITE (conformance/test_pair_push.py's
test_pair_orders: a consumer registered before the producer's prefill finished, request ids each engine suffixed, a
producer shut down with a WRITE in flight, malformed registrations beside the real ones), a WRITE the producer
cannot post (test_pair_write_failure) and the plain pair round-trip, for the unmodified NixlPushConnector (the
orders and the round-trip pass; its WRITE failure is a pinned finding, checked by the strict suite) and the broken
copies in tests/checks/nixl_push_broken.py. Each copy fails the situation made for it, with words that name its
mistake, and passes the others selected for it, the round-trip among them: its edit sits in code only its situation
runs (``kvconform report --uncovered NixlPushConnector`` listed it as never run before the situation existed).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

import pytest

from tests.suite_run import REPO, of_connector, run_broken

pytestmark = pytest.mark.skipif(importlib.util.find_spec("nixl") is None,
                                reason="NixlPushConnector needs package nixl, which is not installed here")

PROFILES = REPO / "tests" / "checks" / "nixl_push_broken.yaml"


@dataclass(frozen=True)
class Case:
    select: str  # a -k expression for the test, beside the connector's name
    nodeid_part: str  # what its node id contains
    outcome: str = "passed"
    words: list[str] = field(default_factory=list)  # what its failure must say


ROUNDTRIP = Case("(test_roundtrip and float16 and not bfloat16 and not mla)", "test_roundtrip[")
EARLY = Case("registered-before-prefill", "registered-before-prefill]")
SUFFIXED = Case("engine-suffixed-ids", "engine-suffixed-ids]")
SHUTDOWN = Case("shutdown-mid-write", "shutdown-mid-write]")
STRAY = Case("stray-notifications", "stray-notifications]")
WRITE_FAILURE = Case("write-post-error", "write-post-error]")
NOT_RELEASED = "the consumer did not finish receiving, or the producer did not release its pages"

CASES: dict[str, list[Case]] = {
    "NixlPushConnector": [EARLY, SUFFIXED, SHUTDOWN, STRAY, ROUNDTRIP],
    "EarlyRegistrationLostPushConnector": [
        Case(EARLY.select, EARLY.nodeid_part, "failed",
             ["EarlyRegistrationLostPushConnector", "registrations reached the producer before its prefills finished",
              NOT_RELEASED]),
        ROUNDTRIP],
    "ExactIdPushConnector": [
        Case(SUFFIXED.select, SUFFIXED.nodeid_part, "failed",
             ["ExactIdPushConnector", "suffixed the router's request ids", NOT_RELEASED]),
        EARLY, ROUNDTRIP],
    "FailedWriteNotifiedPushConnector": [
        Case(WRITE_FAILURE.select, WRITE_FAILURE.nodeid_part, "failed",
             ["FailedWriteNotifiedPushConnector", "posting the producer's WRITE", "reported req-0 received"]),
        EARLY, ROUNDTRIP],
    "InFlightHandlesDroppedPushConnector": [
        Case(SHUTDOWN.select, SHUTDOWN.nodeid_part, "failed",
             ["InFlightHandlesDroppedPushConnector", "still in flight", "never released (release_xfer_handle)"]),
        EARLY, ROUNDTRIP],
    "BatchLostOnBadRegistrationPushConnector": [
        Case(STRAY.select, STRAY.nodeid_part, "failed",
             ["BatchLostOnBadRegistrationPushConnector", "delivered two malformed registrations", NOT_RELEASED]),
        EARLY, ROUNDTRIP],
}
SELECTION = " or ".join(f"({name} and ({' or '.join(case.select for case in cases)}))"
                        for name, cases in CASES.items())
BROKEN = [name for name in CASES if name != "NixlPushConnector"]


@pytest.fixture(scope="module")
def push_run(tmp_path_factory):
    return run_broken(tmp_path_factory.mktemp("nixl-push"), SELECTION, "NixlPushConnector",
                      "tests.checks.nixl_push_broken", BROKEN, ("--profiles", str(PROFILES)))


@pytest.mark.parametrize("name", list(CASES))
def test_each_connector_meets_its_cases(push_run, name):
    _, outcomes, output = push_run
    mine = of_connector(outcomes, name)
    assert mine, output[-3000:]
    for outcome in mine:
        case = next((c for c in CASES[name] if c.nodeid_part in outcome.nodeid), None)
        assert case is not None, f"{outcome.nodeid} was not meant to run"
        assert outcome.outcome == case.outcome, (outcome.nodeid, outcome.outcome, outcome.message[:1500])
        for word in case.words:
            assert word in outcome.message, (word, outcome.message[:1500])
    ran = {case.nodeid_part for case in CASES[name] for o in mine if case.nodeid_part in o.nodeid}
    assert ran == {case.nodeid_part for case in CASES[name]}, [o.nodeid for o in mine]
