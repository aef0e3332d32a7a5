"""The judges of conformance/checks/offload_events.py on hand-made events: what a manager stored or evicted must
reach the publisher once, as bytes or vLLM's int form of the hash (the rules without a manager are the driver's:
tests/engine/test_published.py)."""

from __future__ import annotations

from types import SimpleNamespace

from kvconform.conformance.checks.offload_events import (
    REMOVED,
    STORED,
    BlockEvent,
    ManagerChange,
    changes_problem,
    published_blocks,
)

BLOCK = bytes(range(32))
AS_INT = int.from_bytes(BLOCK, "big") & ((1 << 64) - 1)


def stored(block=BLOCK):
    return BlockEvent(STORED, block, 0, "CPU")


def change(kind=STORED, step=2):
    return ManagerChange(BlockEvent(kind, BLOCK, 0, "CPU"), "producer", step, "p0")


def test_a_store_published_once_passes_in_either_hash_form():
    assert changes_problem([change()], [("producer", 2, stored())]) is None
    assert changes_problem([change()], [("producer", 2, stored(AS_INT))]) is None


def test_a_store_never_published_names_request_step_and_event():
    problem = changes_problem([change()], [])
    assert problem is not None
    for words in ("KV events", "stored block 000102030405 (group 0, medium CPU)", "request p0", "step 2",
                  "never handed its BlockStored", "that step: none"):
        assert words in problem, (words, problem)


def test_an_eviction_needs_its_removal():
    problem = changes_problem([change(), change(REMOVED, 3)], [("producer", 2, stored())])
    assert problem is not None and "evicted" in problem and "never handed its BlockRemoved" in problem


def test_a_store_of_the_wrong_medium_or_published_twice_fails():
    wrong = BlockEvent(STORED, BLOCK, 0, "GPU")
    assert "never handed its BlockStored" in (changes_problem([change()], [("producer", 2, wrong)]) or "")
    twice = changes_problem([change()], [("producer", 2, stored()), ("consumer", 0, stored())])
    assert twice is not None and "in step 0 of the consumer engine" in twice and "accounts for" in twice


def test_published_events_are_read_as_blocks():
    stored_event = type("BlockStored", (), {})()
    stored_event.__dict__.update(block_hashes=[b"a", b"b"], group_idx=1, medium="CPU")
    removed_event = type("BlockRemoved", (), {})()
    removed_event.__dict__.update(block_hashes=[b"a", b"b"], group_idx=1, medium="CPU")
    assert published_blocks(stored_event) == [BlockEvent(STORED, b"b", 1, "CPU")]
    assert published_blocks(removed_event) == [BlockEvent(REMOVED, b"a", 1, "CPU"), BlockEvent(REMOVED, b"b", 1, "CPU")]
    assert published_blocks(SimpleNamespace(block_hashes=[b"a"])) == []
