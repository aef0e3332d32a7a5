"""The judge of conformance/checks/offload_tier.py on hand-made stores: a store evicts exactly the blocks the tier
lacks room for, is refused only when it does not fit, and never evicts a block whose store is in flight."""

from __future__ import annotations

from types import SimpleNamespace

from kvconform.conformance.checks.offload_tier import TierRoom, store_problem


def keys(*numbers):
    return [bytes([n]) * 32 for n in numbers]


def tier(held=(), pending=(), chunks=4):
    return TierRoom(chunks, held=set(keys(*held)), pending=set(keys(*pending)))


def test_stores_that_fit_evict_nothing_and_a_full_tier_evicts_the_excess():
    room = tier()
    assert store_problem(room, keys(1, 2, 3, 4), keys(1, 2, 3, 4), []) is None  # exactly fills the tier
    assert store_problem(tier(held=(1, 2, 3)), keys(5, 6), keys(5, 6), keys(1)) is None
    assert room.held == set(keys(1, 2, 3, 4)) and room.pending == set(keys(1, 2, 3, 4))


def test_an_eviction_the_tier_had_room_for_fails_naming_the_counts():
    room = tier(held=(1, 2, 3))
    problem = store_problem(room, keys(5), keys(5), keys(1))  # one chunk free: nothing to evict
    assert problem is not None
    for words in ("evicted 1 block(s) to store 1 into a tier of 4 chunks holding 3 blocks", "lacked room for 0",
                  "1 evicted with room to keep them"):
        assert words in problem, (words, problem)


def test_too_few_evictions_overfill_the_tier():
    problem = store_problem(tier(held=(1, 2, 3)), keys(5, 6, 7), keys(5, 6, 7), keys(1))
    assert problem is not None and "now holds 5 blocks in 4 chunks" in problem


def test_a_refusal_is_for_stores_that_do_not_fit():
    assert store_problem(tier(held=(1, 2, 3), pending=(1, 2, 3)), keys(5, 6), None, None) is None
    problem = store_problem(tier(held=(1, 2)), keys(1, 5, 6), None, None)  # 1 is held already: 2 new, 2 free
    assert problem is not None and "refused a store of 2 new block(s)" in problem and "had room" in problem


def test_an_in_flight_or_unknown_block_is_never_evicted():
    in_flight = store_problem(tier(held=(1, 2, 3, 4), pending=(4,)), keys(5), keys(5), keys(4))
    assert in_flight is not None and "while its own store was in flight" in in_flight
    unknown = store_problem(tier(held=(1, 2, 3, 4)), keys(5), keys(5), keys(9))
    assert unknown is not None and "did not hold" in unknown


def test_the_watched_manager_forgets_failed_stores_and_names_the_request():
    calls = []
    output = SimpleNamespace(keys_to_store=keys(1, 2), evicted_keys=keys(7))
    manager = SimpleNamespace(prepare_store=lambda k, r: output, complete_store=lambda *a, **kw: calls.append(a),
                              reset_cache=lambda: calls.append("reset"))
    room = tier(held=(7,), chunks=2)
    room.watch(manager)
    assert manager.prepare_store(keys(1, 2), SimpleNamespace(req_id="p0")) is output
    assert room.problem is None and room.held == set(keys(1, 2))
    manager.complete_store(keys(1), None)
    manager.complete_store(keys(2), None, success=False)
    assert room.held == set(keys(1)) and room.pending == set()
    manager.prepare_store(keys(1, 2), SimpleNamespace(req_id="p3"))  # evicts 7 again, a block it no longer holds
    assert room.problem is not None and room.problem.startswith("CPU tier: a store for request p3: ")
    manager.reset_cache()
    assert room.held == set() and calls[-1] == "reset"
