"""A cache hit over a KV cache with a sliding-window group beside full attention: what it may claim, what it loads.

vLLM computes at least a prompt's last token itself, to sample the next one. Where every group is full attention,
vLLM's scheduler takes back the last token of an asynchronous load that covered the whole prompt
(``_update_waiting_for_remote_kv``), so a connector may get away with such a claim; with a sliding-window group it
may not (vLLM's OffloadingConnector takes one token off its hit there: "the last prompt token has to be recomputed",
``_lookup_complete_chunks``). Only a hybrid cache reaches that path, and no other check runs a connector on one
with a sliding-window group, so a connector that claims every token of a stored prompt there passes all else.

The situations (``HIT_SITUATIONS``): a producer engine stores a prompt that fills its blocks exactly; a fresh
consumer engine over an empty cache of the same groups asks for the same prompt, for one that extends it, or for its
leading blocks alone. Both run through vLLM's Scheduler over ``hybrid_cache``'s full and sliding-window groups (vLLM's
own grouping). vLLM's OffloadingConnector does not store the sliding-window block that holds a prompt's last token (no
later hit of that prompt can end there), so only a prompt that ends inside what was stored (its leading blocks) can
be covered whole; the other two hold the hit's other edges. Then:

* the claim leaves at least the prompt's last token to compute (the claim channel, judged on the connector's own
  answer, before vLLM adjusts it);
* every loaded slot holds the bytes the producer saved, in each group's own blocks: in the full-attention group
  every claimed token, in the sliding-window group the claimed tokens of every block vLLM gave it that is not the
  null block (the ones below the window stay null, and must not be compared);
* something was loaded in each group, so the comparison is not vacuous.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.check_failure import CheckFailure
from ..engine.hybrid_cache import engine_over
from ..engine.prompts import request_prompt
from ..engine.slots import token_slot_bytes, token_slots

if TYPE_CHECKING:
    from ..engine.hybrid_cache import HybridCaches
    from ..engine.rig import EngineStandIn, Rig

KINDS = ("full", "sliding")  # hybrid_cache's layer kinds: a full-attention group and a sliding-window group
STORED_BLOCKS = 5  # the stored prompt fills this many blocks exactly: below the window, the sliding group's are null
STORED_ID, ASKED_ID = "stored-0", "asked-0"
NULL_BLOCK = 0  # vLLM's null block: where a sliding-window group keeps no block for a token


class SlidingWindowHitFailure(CheckFailure):
    """A hit over a cache with a sliding-window group claimed too much or loaded wrong bytes."""


@dataclass(frozen=True)
class HitSituation:
    name: str
    asked: tuple[int, int]  # the asked prompt: (blocks of the stored prompt it starts with, tokens it adds after)
    doc: str

    def length(self, block_size: int) -> int:
        blocks, extra = self.asked
        return blocks * block_size + extra


HIT_SITUATIONS: dict[str, HitSituation] = {s.name: s for s in (
    HitSituation("same-prompt", (STORED_BLOCKS, 0), doc="the stored prompt asked again"),
    HitSituation("extended", (STORED_BLOCKS, 1), doc="the stored prompt and one token more"),
    HitSituation("leading-blocks", (STORED_BLOCKS - 1, 0),
                 doc="the stored prompt's leading blocks alone: every token of it stored, all but the last a hit"),
)}


@dataclass
class HitResult:
    claimed: int  # external tokens the connector claimed for the asked request
    local: int  # tokens the consumer's own prefix cache held when it was asked
    compared: dict[str, int]  # group kind -> token slots compared (all of them right)


def run_sliding_window_hit(rig: Rig, situation: HitSituation) -> HitResult:
    """The producer stores, a fresh consumer asks; the claim and each group's loaded bytes judged."""
    role = rig.roles()[0]
    stored = request_prompt(0, STORED_BLOCKS * rig.block_size)
    asked = request_prompt(0, situation.length(rig.block_size))
    producer, producer_caches = engine_over(rig, rig.vllm_config(role), KINDS, "pages", fill_seed=1234)
    try:
        producer.run({STORED_ID: stored})
    finally:
        producer.close()
    consumer, consumer_caches = engine_over(rig, rig.vllm_config(role), KINDS, "pages")
    try:
        try:
            consumer.run({ASKED_ID: asked})
        except Exception:  # vLLM may trip on a claim of the whole prompt first: then the claim is what to name
            check_claim(rig, consumer, len(asked), require_hit=False)
            raise
        check_claim(rig, consumer, len(asked))
    finally:
        consumer.close()
    return check_loaded_bytes(rig, (producer, producer_caches), (consumer, consumer_caches))


def check_claim(rig: Rig, consumer: EngineStandIn, prompt_tokens: int, require_hit: bool = True) -> None:
    """The connector's answer leaves at least the last prompt token to compute, and (``require_hit``) is a hit."""
    claim = consumer.scheduler.answered_claim(ASKED_ID)
    if claim is None or not claim.num_external_tokens:
        if not require_hit:
            return
        raise SlidingWindowHitFailure(
            f"{rig.connector.name}: claim for {ASKED_ID} ({prompt_tokens}-token prompt, over a cache with groups "
            f"{', '.join(KINDS)}): {None if claim is None else claim.num_external_tokens} external tokens, after the "
            f"producer stored its first {STORED_BLOCKS * rig.block_size} tokens: nothing was loaded")
    local, external = claim.num_computed_tokens, claim.num_external_tokens
    if local + external >= prompt_tokens:
        raise SlidingWindowHitFailure(
            f"{rig.connector.name}: claim for {ASKED_ID}: get_num_new_matched_tokens answered {external} external "
            f"tokens after {local} computed locally, {local + external} of its {prompt_tokens}-token prompt, over a "
            f"cache with a sliding-window group: a hit must leave at least the last prompt token to compute (at most "
            f"{prompt_tokens - 1 - local} here)")


def _group_index(caches: HybridCaches, kind: str) -> int:
    layer = next(name for name, of_kind in caches.kinds.items() if of_kind == kind)
    return caches.group_of(layer)


def check_loaded_bytes(rig: Rig, producer: tuple[EngineStandIn, HybridCaches],
                       consumer: tuple[EngineStandIn, HybridCaches]) -> HitResult:
    """Per group, the claimed tokens in blocks the consumer holds for them carry the producer's bytes."""
    (engine_a, caches_a), (engine_b, caches_b) = producer, consumer
    claim = engine_b.scheduler.answered_claim(ASKED_ID)
    assert claim is not None and claim.num_external_tokens, "check_claim found a hit"
    local, claimed = claim.num_computed_tokens, claim.num_external_tokens
    span = range(local, local + claimed)
    block_size = rig.block_size
    compared: dict[str, int] = {}
    for kind in KINDS:
        group = _group_index(caches_b, kind)
        table_b = engine_b.scheduler.block_ids[ASKED_ID][group]
        table_a = engine_a.scheduler.block_ids[STORED_ID][group]
        blocks_b, _ = token_slots(table_b, span, block_size)
        held = [position for position, block in zip(span, blocks_b.tolist(), strict=True) if block != NULL_BLOCK]
        compared[kind] = len(held)
        if not held:
            raise SlidingWindowHitFailure(
                f"{rig.connector.name}: {ASKED_ID}: vLLM's scheduler held no block of the {kind} group for the "
                f"{len(span)} claimed token(s) {span.start}..{span.stop - 1}, so nothing it loaded there can be "
                f"compared (block table {table_b})")
        for layer in (name for name, of_kind in caches_b.kinds.items() if of_kind == kind):
            view_a, view_b = caches_a.pages[layer], caches_b.pages[layer]
            saved = token_slot_bytes(view_a, table_a, held, block_size)
            same = (saved.to(view_b.device) == token_slot_bytes(view_b, table_b, held, block_size)).all(dim=1).cpu()
            if not bool(same.all()):
                first = int((~same).nonzero()[0])
                (block_a,), (offset,) = token_slots(table_a, held[first:first + 1], block_size)
                (block_b,), _ = token_slots(table_b, held[first:first + 1], block_size)
                raise SlidingWindowHitFailure(
                    f"{rig.connector.name}: {ASKED_ID}, layer {layer} ({kind} group): token {held[first]} of the "
                    f"{claimed} claimed after {local} loaded wrong bytes (block {int(block_b)} slot "
                    f"{int(offset)} of the consumer's cache differs from block {int(block_a)} slot "
                    f"{int(offset)} the producer saved); {sum(not s for s in same.tolist())} of "
                    f"{len(held)} held slot(s) wrong")
    return HitResult(claimed, local, compared)
