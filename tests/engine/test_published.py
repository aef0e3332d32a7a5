"""The rules on what vLLM's scheduler publishes of its connector (engine/published.py), on their own: no vLLM.

Events are stand-ins named as vLLM's are (``BlockStored``, ``BlockRemoved``, ``AllBlocksCleared``: the rules read the
type's name and the fields a router reads), stats a small ``KVConnectorStats``-like class whose ``aggregate`` adds.
A removal of a copy of a block announced by an engine over the same storage passes, one never announced (or every
copy taken back since) fails; a block announced twice is two copies; events vLLM's scheduler took must be what it
published, after its own; its stats must be both sides' aggregate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvconform.conformance.engine.published import (
    PublishedBlocks,
    events_not_published,
    returned_connector_stats,
    stats_not_aggregated,
)

BLOCK, OTHER = bytes(range(32)), bytes(range(1, 33))


def event(kind: str, *hashes: bytes, medium: str = "CPU", group: int | None = 0) -> Any:
    made = type(kind, (), {})()
    made.__dict__.update(block_hashes=list(hashes), medium=medium, group_idx=group)
    return made


def stored(*hashes: bytes, **where: Any) -> Any:
    return event("BlockStored", *(hashes or (BLOCK,)), **where)


def removed(*hashes: bytes, **where: Any) -> Any:
    return event("BlockRemoved", *(hashes or (BLOCK,)), **where)


def test_a_removal_of_an_announced_block_passes_once():
    ledger = PublishedBlocks()
    assert ledger.take([stored()], 1, "step 1 of engine 1") is None
    assert ledger.take([removed()], 1, "step 2 of engine 1") is None
    problem = ledger.take([removed()], 1, "step 3 of engine 1")
    assert problem is not None, problem
    for words in ("a BlockRemoved of block 000102030405 (group 0, medium CPU)", "no engine over this storage holds",
                  "every copy announced was taken back, the last at step 2 of engine 1", "never told of"):
        assert words in problem, (words, problem)


def test_a_removal_of_a_block_never_announced_fails():
    problem = PublishedBlocks().take([removed(OTHER)], 1, "step 0 of engine 1")
    assert problem is not None and "no BlockStored ever named it" in problem, problem


def test_a_block_is_its_hash_group_and_medium():
    ledger = PublishedBlocks()
    assert ledger.take([stored()], 1, "step 1 of engine 1") is None
    assert ledger.take([removed(medium="GPU")], 1, "step 2 of engine 1") is not None
    assert PublishedBlocks().take([stored(), removed(group=1)], 1, "step 1 of engine 1") is not None


def test_every_hash_an_event_names_counts():
    ledger = PublishedBlocks()  # vLLM's block pools announce several blocks at once and remove them one by one
    assert ledger.take([stored(BLOCK, OTHER)], 1, "step 1 of engine 1") is None
    assert ledger.take([removed(OTHER), removed(BLOCK)], 1, "step 2 of engine 1") is None


def test_an_engine_over_the_same_storage_may_remove_what_another_announced():
    ledger = PublishedBlocks()
    assert ledger.take([stored()], 1, "step 1 of engine 1") is None
    assert ledger.take([removed()], 2, "step 0 of engine 2") is None
    assert ledger.take([removed()], 1, "step 4 of engine 1") is not None  # taken back by engine 2 already


def test_a_block_announced_twice_is_two_copies():
    ledger = PublishedBlocks()  # two blocks of vLLM's BlockPool holding one hash; a wrapper's two children
    assert ledger.take([stored(), stored()], 1, "step 1 of engine 1") is None
    assert ledger.take([removed()], 1, "step 2 of engine 1") is None
    assert ledger.take([removed()], 1, "step 3 of engine 1") is None
    assert ledger.take([removed()], 1, "step 4 of engine 1") is not None


def test_all_blocks_cleared_takes_back_what_the_engine_announced():
    ledger = PublishedBlocks()
    assert ledger.take([stored(), event("AllBlocksCleared")], 1, "step 1 of engine 1") is None
    assert ledger.take([stored()], 2, "step 0 of engine 2") is None
    assert ledger.take([removed()], 1, "step 2 of engine 1") is None  # engine 2's copy
    assert ledger.take([removed()], 2, "step 1 of engine 2") is not None


def test_what_vllm_took_must_be_what_it_published_after_its_own():
    own, taken = object(), [stored(), removed()]
    assert events_not_published(taken, 1, [own, *taken]) is None
    assert events_not_published([], 0, []) is None
    dropped = events_not_published(taken, 1, [own])
    assert dropped is not None and "took 2 event(s): BlockStored(" in dropped and "publisher none" in dropped, dropped
    assert events_not_published(taken, 0, taken[:1]) is not None
    assert events_not_published(taken, 0, list(reversed(taken))) is not None


@dataclass
class Counts:
    """A connector's stats: counts that aggregate by adding, as vLLM's connectors' stats do."""

    data: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, int]:
        return self.data

    def is_empty(self) -> bool:
        return not any(self.data.values())

    def aggregate(self, other: Counts) -> Counts:
        for name, value in other.data.items():
            self.data[name] = self.data.get(name, 0) + value
        return self


def test_the_stats_returned_are_both_sides_aggregated():
    worker, scheduler = Counts({"saved": 4, "lookups": 0}), Counts({"saved": 0, "lookups": 2})
    assert stats_not_aggregated({"saved": 4, "lookups": 2}, worker, scheduler) is None
    assert worker.data == {"saved": 4, "lookups": 0}, "judging must not aggregate into what it judges"
    assert stats_not_aggregated({"saved": 4, "lookups": 0}, worker, None) is None
    assert stats_not_aggregated({"saved": 4, "lookups": 0}, worker, Counts({"lookups": 0})) is None  # empty: not added
    assert stats_not_aggregated({"saved": 0, "lookups": 2}, None, scheduler) is None
    assert stats_not_aggregated(None, None, None) is None


def test_stats_dropped_or_replaced_fail_naming_both_sides():
    worker, scheduler = Counts({"saved": 4, "lookups": 0}), Counts({"saved": 0, "lookups": 2})
    replaced = stats_not_aggregated({"saved": 0, "lookups": 2}, worker, scheduler)
    assert replaced is not None, replaced
    for words in ("the scheduler side's alone: the worker's were dropped",
                  "the worker reported {'saved': 4, 'lookups': 0} in KVConnectorOutput.kv_connector_stats",
                  "whose aggregate is {'saved': 4, 'lookups': 2}"):
        assert words in replaced, (words, replaced)
    assert "the worker's alone" in (stats_not_aggregated({"saved": 4, "lookups": 0}, worker, scheduler) or "")
    assert "neither side's" in (stats_not_aggregated(None, worker, scheduler) or "")


def test_the_stats_are_read_where_vllm_returns_them():
    with_stats = type("EngineCoreOutputs", (), {"scheduler_stats": type("S", (), {"kv_connector_stats": {"a": 1}})})
    assert returned_connector_stats({0: with_stats()}) == (True, {"a": 1})
    assert returned_connector_stats({0: object()}) == (False, None)
    assert returned_connector_stats({}) == (False, None)
