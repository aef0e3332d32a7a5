"""The push situations in which one side drops a request fail each broken copy made for them, and the real connector
only as its pinned findings.

A shared run drives conformance/test_pair_push.py's test_pair_orders through ``consumer-aborted-unscheduled`` (a
request the router sent the consumer before the producer's prefill, aborted before it was scheduled) and
``producer-partial-prefill-aborted`` (the producer's prefill aborted between chunks while the consumer's
registration waits), and the plain pair round-trip, for the unmodified NixlPushConnector and the broken copies in
tests/checks/nixl_push_abort_broken.py. The real connector fails each situation as the finding conformance/
expectations/any.yaml pins for it (the producer waits for its lease; the consumer, cancelled, holds its request), and
nothing else. Each copy is named ``*NixlPushConnector``, so the same pins apply to it: it fails its own situation red
with words that name its mistake, is the other situation's pinned expected failure, and passes the round-trip.
"""

from __future__ import annotations

import pytest

from tests.checks.cases import NEEDS_NIXL, ROUNDTRIP, Case, assert_meets_its_cases, selection
from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import REPO

pytestmark = NEEDS_NIXL

PROFILES = REPO / "tests" / "checks" / "nixl_push_abort_broken.yaml"

UNSCHEDULED = "consumer-aborted-unscheduled"
PARTIAL = "producer-partial-prefill-aborted"
# what pytest records for each situation's expected failure: its pin's reason (conformance/expectations/any.yaml)
PINNED = {UNSCHEDULED: Case(UNSCHEDULED, f"{UNSCHEDULED}]", "skipped", ["aborted before it is scheduled never "
                                                                        "notifies the producer"]),
          PARTIAL: Case(PARTIAL, f"{PARTIAL}]", "skipped", ["registered for a prefill the producer aborts is never "
                                                            "told"])}

CASES: dict[str, list[Case]] = {
    "NixlPushConnector": [PINNED[UNSCHEDULED], PINNED[PARTIAL], ROUNDTRIP],
    "UnseededAbortNixlPushConnector": [
        Case(UNSCHEDULED, f"{UNSCHEDULED}]", "failed", ["KeyError", "remote_block_ids"]),
        PINNED[PARTIAL], ROUNDTRIP],
    "AbortedChunksWrittenNixlPushConnector": [
        Case(PARTIAL, f"{PARTIAL}]", "failed",
             ["AbortedChunksWrittenNixlPushConnector", "independent failures", "aborted after its first chunk",
              "the producer prepared a WRITE for req-1",
              "token slot(s) of the blocks the consumer registered for req-1", "a WRITE landed in them"]),
        PINNED[UNSCHEDULED], ROUNDTRIP],
}
SELECTION = selection(CASES)
BROKEN = [name for name in CASES if name != "NixlPushConnector"]


RUN = SelfTestRun.of_broken(SELECTION, "NixlPushConnector", "tests.checks.nixl_push_abort_broken", BROKEN,
                            profiles=[PROFILES])


aborts_run = results_of(RUN)


@pytest.mark.parametrize("name", list(CASES))
def test_each_connector_meets_its_cases(aborts_run, name):
    _, outcomes, output = aborts_run
    assert_meets_its_cases(outcomes, output, name, CASES[name])
