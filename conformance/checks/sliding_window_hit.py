"""A cache hit over a KV cache with a sliding-window group beside full attention: what it may claim, what it loads.

vLLM computes at least a prompt's last token itself, to sample the next one. Where every group is full attention,
vLLM's scheduler takes back the last token of an asynchronous load that covered the whole prompt
(``_update_waiting_for_remote_kv``), so a connector may get away with such a claim; with a sliding-window group it
may not (vLLM's OffloadingConnector takes one token off its hit there: "the last prompt token has to be recomputed",
``_lookup_complete_chunks``). Only a hybrid cache reaches that path, and no other check runs a connector on one
with a sliding-window group, so a connector that claims every token of a stored prompt there passes all else.

The situations (``HIT_SITUATIONS``): a producer engine stores one or more prompts (each the start of one seeded
prompt); a fresh consumer engine over an empty cache of the same groups asks for a prompt that starts the same way.
Both run through vLLM's Scheduler over ``hybrid_cache``'s groups (vLLM's own grouping). Over a full-attention and a
sliding-window group the producer stores a prompt that fills its blocks exactly, and the consumer asks for the same
prompt, for one that extends it, or for its leading blocks alone. vLLM's OffloadingConnector does not store the
sliding-window block that holds a prompt's last token (no later hit of that prompt can end there), so only a prompt
that ends inside what was stored (its leading blocks) can be covered whole; the other two hold the hit's other edges.

``mid-chunk-hit`` runs over a sliding window (blocks of twice the others' tokens, as vLLM's planner sizes them beside
full attention with heads twice as wide), that wide full attention and a Mamba2 group. The producer stores a prompt
and its leading part, which ends past a block boundary: the Mamba group holds a state only where that part's whole
blocks end, and the hit must end there, short of the longer prompt. A connector that moves several blocks as one unit
(vLLM's OffloadingConnector with ``blocks_per_chunk`` 2: ``connectors.yaml``'s ``two-block-chunks`` variant) then ends
its hit inside one of the sliding group's units, whose unit before it it never stored (it lies below every window):
the window it needs must be counted back from where the hit ends, not from where the unit ends.

Then:

* the connector answers a hit, and it leaves at least the prompt's last token to compute (the claim channel, judged
  on the connector's own answer, before vLLM adjusts it);
* every loaded slot holds the bytes the producer saved, in each attention group's own blocks and block size: in a
  full-attention group every claimed token, in the sliding-window group the claimed tokens of every block vLLM gave
  it that is not the null block (the ones below the window stay null, and must not be compared). The tables compared
  are the model runner's (``slots.runner_block_ids``): vLLM's scheduler frees a window's earlier blocks as a prefill
  goes on, the runner keeps the ids it wrote or loaded those tokens in. Where several stored prompts hold a token,
  either one's bytes for it are right (a model computes the same KV for the same tokens; here the pages are random);
* something was loaded in each attention group, so the comparison is not vacuous. Mamba state bytes are not compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..engine.block_sizes import group_block_sizes
from ..engine.check_failure import CheckFailure
from ..engine.hybrid_cache import KINDS as LAYER_KINDS
from ..engine.hybrid_cache import engine_over
from ..engine.prompts import request_prompt
from ..engine.slots import runner_block_ids, token_slot_bytes, token_slots

if TYPE_CHECKING:
    from ..engine.hybrid_cache import HybridCaches
    from ..engine.rig import EngineStandIn, Rig
    from ..engine.scheduler import Claim

KINDS = ("full", "sliding")  # hybrid_cache's layer kinds: a full-attention group and a sliding-window group
# a sliding window of blocks twice the others' (beside full attention with heads twice as wide), and a Mamba2 group
UNEVEN_KINDS = ("sliding", "wide-full", "mamba2")
STORED_BLOCKS = 5  # the stored prompt fills this many blocks exactly: below the window, the sliding group's are null
ASKED_ID = "asked-0"
NULL_BLOCK = 0  # vLLM's null block: where a sliding-window group keeps no block for a token


class SlidingWindowHitFailure(CheckFailure):
    """A hit over a cache with a sliding-window group claimed too much or nothing, or loaded wrong bytes."""


Length = tuple[int, int]  # a prompt's length: (blocks of the smallest group's block size, tokens after them)


def tokens(length: Length, block_size: int) -> int:
    blocks, extra = length
    return blocks * block_size + extra


@dataclass(frozen=True)
class HitSituation:
    name: str
    asked: Length  # the asked prompt, the start of (or the whole of, or more than) the stored ones' common prompt
    doc: str
    stored: tuple[Length, ...] = ((STORED_BLOCKS, 0),)  # the producer's prompts, each the start of one prompt
    kinds: tuple[str, ...] = KINDS  # hybrid_cache's layer kinds of both engines' caches

    def length(self, block_size: int) -> int:
        return tokens(self.asked, block_size)

    def stored_ids(self) -> list[str]:
        return [f"stored-{i}" for i in range(len(self.stored))]


HIT_SITUATIONS: dict[str, HitSituation] = {s.name: s for s in (
    HitSituation("same-prompt", (STORED_BLOCKS, 0), doc="the stored prompt asked again"),
    HitSituation("extended", (STORED_BLOCKS, 1), doc="the stored prompt and one token more"),
    HitSituation("leading-blocks", (STORED_BLOCKS - 1, 0),
                 doc="the stored prompt's leading blocks alone: every token of it stored, all but the last a hit"),
    # with blocks of 32 tokens: 256 and 200 stored, 256 asked; the Mamba group's state at 192 is the hit's end, in
    # the middle of the sliding group's 128-token unit at two blocks per unit
    HitSituation("mid-chunk-hit", (8, 0), stored=((8, 0), (6, 8)), kinds=UNEVEN_KINDS,
                 doc="a prompt stored whole and its leading part, the whole prompt asked, over uneven block sizes "
                     "and a Mamba group: the hit ends where the leading part's Mamba state is"),
)}


@dataclass
class HitResult:
    claimed: int  # external tokens the connector claimed for the asked request
    local: int  # tokens the consumer's own prefix cache held when it was asked
    compared: dict[str, int]  # group kind -> token slots compared (all of them right)


def run_sliding_window_hit(rig: Rig, situation: HitSituation) -> HitResult:
    """The producer stores, a fresh consumer asks; the claim and each attention group's loaded bytes judged."""
    role = rig.roles()[0]
    size = rig.block_size  # the smallest group's: vLLM's planner only scales block sizes up
    stored = {rid: request_prompt(0, tokens(length, size))
              for rid, length in zip(situation.stored_ids(), situation.stored, strict=True)}
    asked = request_prompt(0, situation.length(size))
    producer, producer_caches = engine_over(rig, rig.vllm_config(role), situation.kinds, "pages", fill_seed=1234)
    try:
        producer.run(stored)
    finally:
        producer.close()
    consumer, consumer_caches = engine_over(rig, rig.vllm_config(role), situation.kinds, "pages")
    try:
        try:
            consumer.run({ASKED_ID: asked})
        except Exception:  # vLLM may trip on a claim of the whole prompt first: then the claim is what to name
            check_claim(rig, situation, consumer, len(asked), require_hit=False)
            raise
        check_claim(rig, situation, consumer, len(asked))
    finally:
        consumer.close()
    return check_loaded_bytes(rig, situation, (producer, producer_caches, stored), (consumer, consumer_caches))


def _stored_words(situation: HitSituation, block_size: int) -> str:
    lengths = [tokens(length, block_size) for length in situation.stored]
    return f"its first {' and first '.join(str(n) for n in lengths)} tokens" + (
        f" ({len(lengths)} requests)" if len(lengths) > 1 else "")


def check_claim(rig: Rig, situation: HitSituation, consumer: EngineStandIn, prompt_tokens: int,
                require_hit: bool = True) -> None:
    """The connector's answer leaves at least the last prompt token to compute, and (``require_hit``) is a hit."""
    claim = consumer.scheduler.answered_claim(ASKED_ID)
    if claim is None or not claim.num_external_tokens:
        if not require_hit:
            return
        answered = ("no answer" if claim is None else
                    f"get_num_new_matched_tokens answered {claim.num_external_tokens} external tokens after "
                    f"{claim.num_computed_tokens} computed locally")
        raise SlidingWindowHitFailure(
            f"{rig.connector.name}: claim for {ASKED_ID} ({prompt_tokens}-token prompt, over a cache with groups "
            f"{', '.join(situation.kinds)}): {answered}, after the producer stored "
            f"{_stored_words(situation, rig.block_size)}: nothing was loaded")
    local, external = claim.num_computed_tokens, claim.num_external_tokens
    if local + external >= prompt_tokens:
        raise SlidingWindowHitFailure(
            f"{rig.connector.name}: claim for {ASKED_ID}: get_num_new_matched_tokens answered {external} external "
            f"tokens after {local} computed locally, {local + external} of its {prompt_tokens}-token prompt, over a "
            f"cache with a sliding-window group: a hit must leave at least the last prompt token to compute (at most "
            f"{prompt_tokens - 1 - local} here)")


def _layers_of(caches: HybridCaches, kind: str) -> list[str]:
    return [name for name, of_kind in caches.kinds.items() if of_kind == kind]


def _held(table: list[int], positions: range | list[int], block_size: int) -> list[int]:
    """The positions whose block in ``table`` is not the null block."""
    blocks, _ = token_slots(table, positions, block_size)
    return [p for p, block in zip(positions, blocks.tolist(), strict=True) if block != NULL_BLOCK]


def check_loaded_bytes(rig: Rig, situation: HitSituation,
                       producer: tuple[EngineStandIn, HybridCaches, dict[str, list[int]]],
                       consumer: tuple[EngineStandIn, HybridCaches]) -> HitResult:
    """Per attention group, in its own block size, the claimed tokens in blocks the consumer holds for them carry the
    bytes a stored request of the producer saved for them."""
    (engine_a, caches_a, stored), (engine_b, caches_b) = producer, consumer
    claim = engine_b.scheduler.answered_claim(ASKED_ID)
    assert claim is not None and claim.num_external_tokens, "check_claim found a hit"
    local, claimed = claim.num_computed_tokens, claim.num_external_tokens
    span = range(local, local + claimed)
    sizes = group_block_sizes(caches_b.kv_cache_config)
    tables_a = {rid: runner_block_ids(engine_a.scheduler.outputs, rid) for rid in stored}
    tables_b = runner_block_ids(engine_b.scheduler.outputs, ASKED_ID)
    compared: dict[str, int] = {}
    for kind in (k for k in situation.kinds if not LAYER_KINDS[k].state):
        layers = _layers_of(caches_b, kind)
        group, size = caches_b.group_of(layers[0]), sizes[caches_b.group_of(layers[0])]
        table_b = tables_b[group] if tables_b else []
        held = _held(table_b, span, size) if table_b else []
        compared[kind] = len(held)
        if not held:
            raise SlidingWindowHitFailure(
                f"{rig.connector.name}: {ASKED_ID}: vLLM's scheduler gave the model runner no block of the {kind} "
                f"group ({size} tokens per block) for the {len(span)} claimed token(s) {span.start}..{span.stop - 1}, "
                f"so nothing it loaded there can be compared (block table {table_b})")
        for layer in layers:
            _compare_layer(rig, layer, kind, (caches_a, tables_a, stored), (caches_b, table_b), held, claim)
    return HitResult(claimed, local, compared)


def _compare_layer(rig: Rig, layer: str, kind: str,
                   producer: tuple[HybridCaches, dict[str, tuple[list[int], ...]], dict[str, list[int]]],
                   consumer: tuple[HybridCaches, list[int]], held: list[int], claim: Claim) -> None:
    """The consumer's ``held`` slots of ``layer`` each equal the slot of that token in some stored request's blocks
    (several stored requests hold the same tokens; which one the connector saved is its own choice)."""
    (caches_a, tables_a, stored), (caches_b, table_b) = producer, consumer
    group_a, group_b = caches_a.group_of(layer), caches_b.group_of(layer)
    size_a = caches_a.kv_cache_config.kv_cache_groups[group_a].kv_cache_spec.block_size
    size_b = caches_b.kv_cache_config.kv_cache_groups[group_b].kv_cache_spec.block_size
    view_a, view_b = caches_a.pages[layer], caches_b.pages[layer]
    loaded = token_slot_bytes(view_b, table_b, held, size_b)
    right = torch.zeros(len(held), dtype=torch.bool)
    sources: dict[int, list[str]] = {}  # index in held -> "block b slot s of stored-i", for the message
    for rid, tables in tables_a.items():
        table_a = tables[group_a] if tables else []
        covered = [i for i, p in enumerate(held) if p < len(stored[rid]) and p // size_a < len(table_a)
                   and table_a[p // size_a] != NULL_BLOCK]
        if not covered:
            continue
        saved = token_slot_bytes(view_a, table_a, [held[i] for i in covered], size_a).to(view_b.device)
        index = torch.tensor(covered, dtype=torch.long)
        right[index] |= (saved == loaded[index.to(loaded.device)]).all(dim=1).cpu()
        for i in covered:
            sources.setdefault(i, []).append(
                f"block {table_a[held[i] // size_a]} slot {held[i] % size_a} of {rid}")
    if bool(right.all()):
        return
    first = int((~right).nonzero()[0])
    position = held[first]
    saved_at = " or ".join(sources.get(first, [])) or "no stored request's block (none of them held it)"
    raise SlidingWindowHitFailure(
        f"{rig.connector.name}: {ASKED_ID}, layer {layer} ({kind} group, {size_b} tokens per block): token "
        f"{position} of the {claim.num_external_tokens} claimed after {claim.num_computed_tokens} loaded wrong bytes "
        f"(block {table_b[position // size_b]} slot {position % size_b} of the consumer's cache differs from "
        f"{saved_at}, which the producer saved); {int((~right).sum())} of {len(held)} held slot(s) wrong")
