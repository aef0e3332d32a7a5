"""The NIXL pull situations beyond the round-trip fail each broken copy made for them, and pass the real connector.

A shared run covers the second turn with bidirectional KV transfer (conformance/test_pair_turns.py), the prefills
aborted between chunks (conformance/test_pair_prefill_abort.py), the consumer with twice the producer's block size
(conformance/test_pair_block_ratio.py), the requests waiting in a busy consumer's queue
(conformance/test_pair_heartbeats.py), the lost notification (conformance/test_pair_lost_notification.py), a failed
READ whose handle cannot be released at once and a producer whose NIXL metadata is gone
(conformance/test_pair_faults.py's test_pair_unreleasable_read, test_pair_vanished_producer) and the plain pair
round-trip for the unmodified NixlConnector (all pass) and the broken copies in tests/checks/nixl_pull_broken.py.
Each copy fails the situation made for it, with words that name its mistake, and passes the others selected for it,
the round-trip among them: its edit sits in code only its situation runs (``kvconform report --uncovered
NixlConnector`` listed it as never run before the situation existed).
"""

from __future__ import annotations

import pytest

from tests.checks.cases import NEEDS_NIXL, ROUNDTRIP, Case, assert_meets_its_cases, selection
from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import REPO

pytestmark = NEEDS_NIXL

PROFILES = REPO / "tests" / "checks" / "nixl_pull_broken.yaml"


TURN_READ = Case("turn2-read", "turn2-read]")
TURN_BELOW = Case("turn2-below-threshold", "turn2-below-threshold]")
TURN_EXPIRING = Case("turn2-expiring", "turn2-expiring]")
ABORT = Case("test_pair_prefill_abort", "test_pair_prefill_abort[")
RATIO = Case("test_pair_block_ratio", "test_pair_block_ratio[")
HEARTBEATS = Case("test_pair_heartbeats", "test_pair_heartbeats[")
LOST_NOTIFICATION = Case("test_pair_lost_notification", "test_pair_lost_notification[")
UNRELEASABLE_READ = Case("test_pair_unreleasable_read", "test_pair_unreleasable_read[")
VANISHED_PRODUCER = Case("test_pair_vanished_producer", "test_pair_vanished_producer[")

CASES: dict[str, list[Case]] = {
    "NixlConnector": [TURN_READ, TURN_BELOW, TURN_EXPIRING, ABORT, RATIO, HEARTBEATS, LOST_NOTIFICATION,
                      UNRELEASABLE_READ, VANISHED_PRODUCER],
    "ConversationLengthTurnConnector": [
        Case(TURN_READ.select, TURN_READ.nodeid_part, "failed",
             ["ConversationLengthTurnConnector", "the last sampled token has none",
              "claimed 1 token(s) whose KV the decoder does not have"]),
        TURN_BELOW, ROUNDTRIP],
    "SilentRecomputeConnector": [
        Case(TURN_BELOW.select, TURN_BELOW.nodeid_part, "failed",
             ["SilentRecomputeConnector", "the decoder did not release the first turn's blocks within"]),
        TURN_READ, ROUNDTRIP],
    "ExpiryBlindTurnConnector": [
        Case(TURN_EXPIRING.select, TURN_EXPIRING.nodeid_part, "failed",
             ["ExpiryBlindTurnConnector", "received (finished_recving): it read blocks whose lease ends within"]),
        TURN_READ, ROUNDTRIP],
    "AbortedAsLengthConnector": [
        Case(ABORT.select, ABORT.nodeid_part, "failed",
             ["AbortedAsLengthConnector", "request_finished kept the blocks of cancelled-0, cancelled-1"]),
        ROUNDTRIP],
    "SilentWaitConnector": [
        Case(HEARTBEATS.select, HEARTBEATS.nodeid_part, "failed",
             ["SilentWaitConnector", "when its lease expired", "num_kv_expired_reqs"]),
        ROUNDTRIP],
    "FailsLostNotificationConnector": [
        Case(LOST_NOTIFICATION.select, LOST_NOTIFICATION.nodeid_part, "failed",
             ["FailsLostNotificationConnector", "as finished receiving (finished_recving), but vLLM had already "
              "finished and freed"]),
        ROUNDTRIP],
    "UnscaledSubBlocksConnector": [
        Case(RATIO.select, RATIO.nodeid_part, "failed",
             ["UnscaledSubBlocksConnector", "does not hold the bytes the producer (block size",
              "were placed or rearranged wrongly"]),
        ROUNDTRIP],
    "UnreleasedReadHandleDroppedConnector": [
        Case(UNRELEASABLE_READ.select, UNRELEASABLE_READ.nodeid_part, "failed",
             ["UnreleasedReadHandleDroppedConnector", "could not be released at the first attempt",
              "whose first release was refused never released again (release_xfer_handle)"]),
        ROUNDTRIP],
    "InvalidPeerReadsDroppedConnector": [
        Case(VANISHED_PRODUCER.select, VANISHED_PRODUCER.nodeid_part, "failed",
             ["InvalidPeerReadsDroppedConnector", "reported the producer's NIXL metadata gone",
              "handed the consumer req-2 from that producer, and the consumer neither failed nor finished it"]),
        UNRELEASABLE_READ, ROUNDTRIP],
}
SELECTION = selection(CASES)
BROKEN = [name for name in CASES if name != "NixlConnector"]


RUN = SelfTestRun.of_broken(SELECTION, "NixlConnector", "tests.checks.nixl_pull_broken", BROKEN, profiles=[PROFILES])


pull_run = results_of(RUN)


@pytest.mark.parametrize("name", list(CASES))
def test_each_connector_meets_its_cases(pull_run, name):
    _, outcomes, output = pull_run
    assert_meets_its_cases(outcomes, output, name, CASES[name])
