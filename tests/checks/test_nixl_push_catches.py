"""The NIXL push situations beyond the round-trip fail each broken copy made for them, and pass the real connector.

A shared run covers the pairs whose halves meet in other orders or stop mid-WRITE (conformance/test_pair_push.py's
test_pair_orders: a consumer registered before the producer's prefill finished, request ids each engine suffixed, a
producer shut down with a WRITE in flight, malformed registrations beside the real ones, WRITE submissions slower
than vLLM's 200 ms mark), a WRITE the producer cannot post (test_pair_write_failure) and the plain pair round-trip,
for the unmodified NixlPushConnector (the
orders and the round-trip pass; its WRITE failure is a pinned finding, checked by the strict suite) and the broken
copies in tests/checks/nixl_push_broken.py. Each copy fails the situation made for it, with words that name its
mistake, and passes the others selected for it, the round-trip among them: its edit sits in code only its situation
runs (``kvconform report --uncovered NixlPushConnector`` listed it as never run before the situation existed).
"""

from __future__ import annotations

import pytest

from tests.checks.cases import NEEDS_NIXL, ROUNDTRIP, Case, assert_meets_its_cases, selection
from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import REPO

pytestmark = NEEDS_NIXL

PROFILES = REPO / "tests" / "checks" / "nixl_push_broken.yaml"


EARLY = Case("registered-before-prefill", "registered-before-prefill]")
SUFFIXED = Case("engine-suffixed-ids", "engine-suffixed-ids]")
SHUTDOWN = Case("shutdown-mid-write", "shutdown-mid-write]")
STRAY = Case("stray-notifications", "stray-notifications]")
WRITE_FAILURE = Case("write-post-error", "write-post-error]")
SLOW_SUBMISSION = Case("slow-write-submission", "slow-write-submission]")
NOT_RELEASED = "the consumer did not finish receiving, or the producer did not release its pages"

CASES: dict[str, list[Case]] = {
    "NixlPushConnector": [EARLY, SUFFIXED, SHUTDOWN, STRAY, SLOW_SUBMISSION, ROUNDTRIP],
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
    "SlowSubmissionAbandonedPushConnector": [
        Case(SLOW_SUBMISSION.select, SLOW_SUBMISSION.nodeid_part, "failed",
             ["SlowSubmissionAbandonedPushConnector", "over the 200 ms at which vLLM warns", NOT_RELEASED]),
        EARLY, ROUNDTRIP],
}
SELECTION = selection(CASES)
BROKEN = [name for name in CASES if name != "NixlPushConnector"]


RUN = SelfTestRun.of_broken(SELECTION, "NixlPushConnector", "tests.checks.nixl_push_broken", BROKEN,
                           profiles=[PROFILES])


push_run = results_of(RUN)


@pytest.mark.parametrize("name", list(CASES))
def test_each_connector_meets_its_cases(push_run, name):
    _, outcomes, output = push_run
    assert_meets_its_cases(outcomes, output, name, CASES[name])
