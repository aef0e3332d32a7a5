"""The block ids vLLM's scheduler hands ``request_finished``: exactly the request's blocks that hold computed tokens.

A producer publishes what ``request_finished`` is handed (ExampleConnector saves it, NIXL offers it to the decode
engine, an offloading connector stores it), so a block past the computed tokens is published as KV that was never
computed. vLLM 0.32's ``Scheduler._connector_finished`` clips the request's block table to
``cdiv(num_computed_tokens, block_size)`` (``KVCacheManager.get_block_ids_for_computed_tokens``): the token sampled
last is never computed, so when the computed tokens fill their blocks exactly, a block reserved for it is not
handed. This is vLLM's side of the path, judged where the harness drives vLLM's real scheduler to a request's
finish; a scheduler class of the user's (``--kvconform-scheduler-cls``) is judged the same way.
"""

from __future__ import annotations

CHANNEL = "request_finished block ids"


def computed_blocks(held: list[int], num_computed_tokens: int, block_size: int) -> list[int]:
    """The blocks of ``held`` (the request's block table, in order) that hold any of its computed tokens."""
    return held[:-(-num_computed_tokens // block_size)]


def finished_blocks_problem(request_id: str, handed: list[int], held: list[int], num_computed_tokens: int,
                            num_tokens: int, block_size: int) -> str | None:
    """What is wrong with the block ids handed to ``request_finished`` for a request that held ``held`` when it
    finished with ``num_computed_tokens`` of its ``num_tokens`` computed; None when they are exactly its computed
    blocks."""
    expected = computed_blocks(held, num_computed_tokens, block_size)
    if handed == expected:
        return None
    past = [b for b in handed if b not in expected and b in held]
    foreign = [b for b in handed if b not in held]
    missing = [b for b in expected if b not in handed]
    detail = "; ".join(part for part in (
        f"{len(past)} past its computed tokens: {past}" if past else "",
        f"{len(foreign)} not its own: {foreign}" if foreign else "",
        f"{len(missing)} of its computed blocks missing: {missing}" if missing else "",
        "" if past or foreign or missing else f"in another order than its block table {expected}") if part)
    return (f"{CHANNEL} for {request_id}: vLLM's scheduler handed {len(handed)} block(s) {handed}, but its "
            f"{num_computed_tokens} computed token(s) of {num_tokens} (block size {block_size}) fill "
            f"{len(expected)} of the {len(held)} it held ({expected}): {detail} (the last sampled token's slot is "
            f"never computed; a producer publishes what it is handed)")
