"""Claims as vLLM reads them: "ask again", and the promised hit checked exactly.

These drive kvconform's own code (the scheduler driver's claim recording, the
round-trip's promise check) with stand-in connectors and sides; the conformance
suite drives the real ones (``test_roundtrip_scenario`` with ExampleConnector's
``promised_hit: whole-blocks``), and the named ranges on data.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvconform.conformance.checks.claims import PROMISED_HITS
from kvconform.conformance.checks.roundtrip import ClaimMismatch, check_promise, promised_hits
from kvconform.conformance.connectors.profiles import ConnectorProfile
from kvconform.conformance.engine.scheduler import SchedulerDriver
from kvconform.conformance.engine.transfer_reports import TransferReports


class AskAgainThenHit:
    """Answers ``None`` ("ask again") while its lookup runs, then the hit, as OffloadingConnector does."""

    def __init__(self, answers):
        self.answers = list(answers)

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return self.answers.pop(0)


def _driver_with(connector) -> SchedulerDriver:
    driver = SchedulerDriver.__new__(SchedulerDriver)  # no vLLM Scheduler: only the claim recording runs
    driver.claims, driver.block_ids, driver.outputs = {}, {}, []
    driver.transfers = TransferReports()
    driver._record_claims(connector)
    return driver


def test_none_means_ask_again_and_the_first_decided_answer_is_the_claim():
    connector = AskAgainThenHit([(None, False), (None, False), (64, True)])
    driver = _driver_with(connector)
    request = SimpleNamespace(request_id="req-0")
    for _ in range(3):  # vLLM's scheduler asks again on each step while the answer is None
        connector.get_num_new_matched_tokens(request, 0)
    assert [c.num_external_tokens for c in driver.claims["req-0"]] == [None, None, 64]
    assert driver.external_tokens("req-0") == 64  # not 0: None is not a miss
    assert driver.answered_claim("req-0").load_async is True


def test_no_decided_answer_yet_is_no_claim():
    connector = AskAgainThenHit([(None, False)])
    driver = _driver_with(connector)
    connector.get_num_new_matched_tokens(SimpleNamespace(request_id="req-0"), 0)
    assert driver.external_tokens("req-0") == 0 and driver.answered_claim("req-0") is None


@pytest.mark.parametrize(("stored", "wanted", "block_size", "tokens"), [
    (4 * 32 + 5, 4 * 32 + 5, 32, 4 * 32),  # unaligned: the whole blocks
    (4 * 32, 4 * 32, 32, 3 * 32),  # aligned: the last token is computed, so its block is not a hit
    (4 * 32, 4 * 32 + 1, 32, 3 * 32),  # aligned, extended: ExampleConnector stored 3 blocks
    (3 * 64 + 1, 3 * 64 + 1, 64, 3 * 64),  # one past a block: 3 whole blocks precede the last token
])
def test_whole_blocks_promise(stored, wanted, block_size, tokens):
    assert PROMISED_HITS["whole-blocks"].bounds(stored, wanted, block_size) == (tokens, tokens)


@pytest.mark.parametrize(("name", "stored", "wanted", "bounds"), [
    ("whole-blocks-or-more", 4 * 32, 4 * 32 + 1, (3 * 32, 4 * 32)),  # the last whole block may be a hit too
    ("whole-blocks-or-more", 4 * 32 + 5, 4 * 32 + 5, (4 * 32, 4 * 32 + 4)),  # or the partial tail
    ("whole-blocks-or-more", 70, 200, (64, 70)),  # a prompt that runs past the stored one: at most it
    ("whole-prompt", 4 * 32 + 5, 4 * 32 + 5, (4 * 32 + 4, 4 * 32 + 4)),  # all but the consumer's last token
    ("whole-prompt", 70, 200, (70, 70)),
])
def test_range_promises(name, stored, wanted, bounds):
    assert PROMISED_HITS[name].bounds(stored, wanted, 32) == bounds
    assert PROMISED_HITS[name].covers(stored, wanted, 32)  # they speak for every prompt that starts with the stored one


def _rig_and_consumer(claims: dict[str, int], promise="whole-blocks"):
    connector = SimpleNamespace(name="SomeConnector", profile=ConnectorProfile(promised_hit=promise))
    rig = SimpleNamespace(connector=connector, block_size=32, shape=SimpleNamespace(block_size=32))
    answers = {rid: SimpleNamespace(num_computed_tokens=0, num_external_tokens=n) for rid, n in claims.items()}
    consumer = SimpleNamespace(scheduler=SimpleNamespace(answered_claim=answers.get))
    return rig, consumer


def test_a_claim_of_one_of_four_stored_blocks_fails_the_promise():
    stored = {"req-0": list(range(4 * 32 + 5))}
    rig, consumer = _rig_and_consumer({"req-0": 32})
    with pytest.raises(ClaimMismatch, match=r"claimed 32 external tokens for req-0 .* promises a hit of 128 tokens"):
        check_promise(rig, consumer, {"req-0": 32}, promised_hits(rig, stored, stored))


def test_a_store_that_keeps_the_last_whole_block_is_in_range_but_not_whole_blocks_exactly():
    stored, wanted = {"req-0": list(range(4 * 32))}, {"req-0": list(range(4 * 32 + 1))}
    rig, consumer = _rig_and_consumer({"req-0": 128})
    with pytest.raises(ClaimMismatch, match=r"claimed 128 external tokens .* promises a hit of 96 tokens in all"):
        check_promise(rig, consumer, {"req-0": 128}, promised_hits(rig, stored, wanted))
    rig, consumer = _rig_and_consumer({"req-0": 128}, promise="whole-blocks-or-more")
    check_promise(rig, consumer, {"req-0": 128}, promised_hits(rig, stored, wanted))
    rig, consumer = _rig_and_consumer({"req-0": 64}, promise="whole-blocks-or-more")
    with pytest.raises(ClaimMismatch, match=r"promises a hit of 96 to 128 tokens in all \(whole-blocks-or-more"):
        check_promise(rig, consumer, {"req-0": 64}, promised_hits(rig, stored, wanted))


def test_the_promised_claim_passes_and_no_promise_checks_nothing():
    stored = {"req-0": list(range(4 * 32 + 5))}
    rig, consumer = _rig_and_consumer({"req-0": 128})
    check_promise(rig, consumer, {"req-0": 128}, promised_hits(rig, stored, stored))
    rig, consumer = _rig_and_consumer({"req-0": 32}, promise=None)
    assert promised_hits(rig, stored, stored) is None
    check_promise(rig, consumer, {"req-0": 32}, None)


def test_an_unknown_promise_is_refused_when_the_profile_loads():
    with pytest.raises(ValueError, match="unknown promised_hit 'most-blocks'"):
        ConnectorProfile(promised_hit="most-blocks")
