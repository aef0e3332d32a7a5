"""The P/D pair round-trip on a hybrid cache whose groups have different block sizes, beside a Mamba group.

The pair is ``pair_core.py``'s; only the caches differ: each side builds ``hybrid_cache.py``'s cache (vLLM's
own specs, grouping and allocation, the engine core's block sizes from ``block_sizes.py``), so the
connector must move every group's blocks with that group's block size. Per request, attention layer and claimed
token, a slot the consumer's block table gives a block (a sliding window's blocks below its window are
vLLM's null block) holds the producer's bytes, every attention group has such tokens, and only pages of the
consumer's requests change (whole pages: NIXL reads pages). As in ``pair_core.py`` the bytes must be there
when the consumer reports the request received, over a slow transport
(``pair_read_faults.SLOW_TRANSPORT``), and a failed receive, load error or lease expiry fails.

The Mamba group makes the producer's prefill stop where the consumer's load stops (``pair_prefill_extent.py``,
judged apart from the bytes): a state is handed over whole, so the producer computes exactly the tokens the
consumer claims. One request asks for its prompt's logprobs: vLLM reads no cache for it on the consumer, which
computes it whole, and the producer computes every prompt token; none of its consumer pages may change. The
producer's release of that request is ``pair_notify.py``'s to judge, so the pair is done when the consumer drained
and the producer released the others. The engines run with the conv-state layout NIXL moves Mamba state in
(``conv_state_layout.py``); the state bytes themselves are not compared.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import cast

import torch

from ..engine import hybrid_cache as hybrid
from ..engine.block_sizes import group_block_sizes
from ..engine.check_failure import CheckFailure
from ..engine.conv_state_layout import PAIR_LAYOUT, conv_state_layout
from ..engine.prompts import request_prompt
from ..engine.rig import ConnectorRefused, EngineStandIn, Rig, refusal_as
from .pair_core import CompletionWitness, LivePair, check_completion, drained, open_pair
from .pair_prefill_extent import raise_if_prefill_misplaced
from .pair_read_faults import SLOW_TRANSPORT
from .pair_transport import install_transport
from .verdicts import Verdicts

# A sliding window beside full attention with heads twice as wide: groups of 2b and b tokens per block; and Mamba2,
# whose state the producer hands over as it stands after its last computed token.
PAIR_KINDS = ("sliding", "wide-full", "mamba2")
# Prompt lengths in blocks of the smallest group (b) plus extra tokens: one long past its window, one short, and one
# that asks for its prompt's logprobs (PROMPT_LOGPROBS).
PAIR_PROMPTS = {"req-0": (5, 1), "req-1": (2, 13), "req-2": (3, 7)}
# request -> the prompt logprobs it asks for, of both sides (a P/D proxy forwards the sampling params to each)
PROMPT_LOGPROBS = {"req-2": 1}


class HybridPairFailure(CheckFailure):
    """The pair moved the wrong bytes for some group, or wrote outside the requests' blocks."""


@dataclass
class HybridPairRig(Rig):
    """A Rig whose engines are built over the hybrid cache of ``PAIR_KINDS``, for either role."""

    kinds: tuple[str, ...] = PAIR_KINDS
    hybrid_caches: dict[int, hybrid.HybridCaches] = field(default_factory=dict, repr=False)  # id(engine) -> caches

    def engine(self, role: str = "kv_both", fill_seed: int | None = None) -> EngineStandIn:
        with refusal_as(ConnectorRefused, self.connector):
            config = self.vllm_config(role)
        engine, caches = hybrid.engine_over(self, config, self.kinds, "pages", fill_seed=fill_seed)
        self.engines.append(engine)
        self.hybrid_caches[id(engine)] = caches
        return engine


@dataclass
class HybridPairResult:
    block_sizes: list[int]
    compared: dict[int, int]  # group -> token slots compared (all layers, all requests)
    claims: dict[str, int]


def _pages_changed(before: dict[str, torch.Tensor], side: EngineStandIn) -> dict[str, set[int]]:
    """Layer -> block ids whose bytes changed since ``before``."""
    out = {}
    for name, view in side.caches.items():
        diff = (view.view(torch.uint8) != before[name]).flatten(1).any(dim=1)
        out[name] = set(diff.nonzero().flatten().tolist())
    return out


def _first_wrong_slot(rig: HybridPairRig, producer: EngineStandIn, consumer: EngineStandIn, request_id: str,
                      tokens: int, consumer_table: tuple[list[int], ...]) -> tuple[str | None, Counter[int]]:
    """The first of ``tokens`` claimed tokens, over every layer, whose slot in ``consumer_table`` (the
    request's block ids per group) differs from the producer's slot for that token, in words (None when all
    hold the producer's bytes), and the slots found equal per group."""
    compared: Counter[int] = Counter()
    caches = rig.hybrid_caches[id(consumer)]
    sizes = group_block_sizes(consumer.kv_cache_config)
    producer_table = producer.scheduler.block_ids[request_id]
    for layer in caches.attention_layers():
        view, group = consumer.caches[layer], caches.group_of(layer)
        size = sizes[group]
        for token in range(tokens):
            block = consumer_table[group][token // size]
            if block == 0:  # the null block: outside a sliding window, vLLM loads nothing there
                continue
            source = producer_table[group][token // size]
            saved = producer.caches[layer][source, :, token % size].contiguous().view(torch.uint8)
            loaded = view[block, :, token % size].contiguous().view(torch.uint8)
            if source == 0 or not bool((saved == loaded).all()):
                return (f"layer {layer} (group {group}, {size} tokens per block; groups' block sizes {sizes}): "
                        f"token {token} of {tokens} loaded wrong bytes (block {block} slot {token % size} of the "
                        f"consumer's cache differs from block {source} slot {token % size} the producer computed)",
                        compared)
            compared[group] += 1
    return None, compared


@dataclass
class HybridCompletionWitness(CompletionWitness):
    """``pair_core.py``'s witness, per group: the moment the consumer reports a request received, every claimed
    token's slot in every group holds the producer's bytes."""

    def __call__(self, request_id: str, step: int) -> None:
        rig, consumer = cast(HybridPairRig, self.pair.rig), self.pair.consumer  # run_hybrid_pair_roundtrip's pair
        tokens = consumer.scheduler.external_tokens(request_id)
        table = consumer.scheduler.scheduler.kv_cache_manager.get_block_ids(request_id)
        if tokens <= 0 or not any(table):
            return  # no claim: _verify reports it
        wrong, _ = _first_wrong_slot(rig, self.pair.producer, consumer, request_id, tokens, table)
        if wrong is not None:
            self.wrong.append(f"{rig.connector.name}: the consumer reported {request_id} received (finished_recving) "
                              f"at its step {step}, when vLLM schedules its compute, but {wrong}: it reported the "
                              f"read done before it completed")


def _verify(rig: HybridPairRig, producer: EngineStandIn, consumer: EngineStandIn, stored: dict[str, list[int]],
            changed: dict[str, set[int]]) -> HybridPairResult:
    """The loaded requests' claims and bytes (``stored``: the requests vLLM loads for), and no page of the consumer
    changed that none of them was allocated."""
    name = rig.connector.name
    caches = rig.hybrid_caches[id(consumer)]
    sizes = group_block_sizes(consumer.kv_cache_config)
    claims = {rid: consumer.scheduler.external_tokens(rid) for rid in stored}
    compared = dict.fromkeys(sorted({caches.group_of(layer) for layer in caches.attention_layers()}), 0)
    allowed: set[int] = set()
    for rid, tokens in claims.items():
        if not 0 < tokens <= len(stored[rid]):
            raise HybridPairFailure(f"{name}: {rid}: claimed {tokens} external tokens of a {len(stored[rid])}-token "
                                    f"prompt the producer computed")
        consumer_table = consumer.scheduler.block_ids[rid]
        allowed |= {b for group in consumer_table for b in group if b != 0}
        wrong, slots = _first_wrong_slot(rig, producer, consumer, rid, tokens, consumer_table)
        if wrong is not None:
            raise HybridPairFailure(f"{name}: {rid}, {wrong}")
        for group, count in slots.items():
            compared[group] += count
    for layer, blocks in changed.items():
        stray = sorted(blocks - allowed)
        if stray:
            raise HybridPairFailure(
                f"{name}: layer {layer} (group {caches.group_of(layer)}): the consumer's block(s) {stray} changed, "
                f"which none of its requests was allocated in any group (allocated: {sorted(allowed)})")
    missing = [group for group, count in compared.items() if not count]
    if missing:
        raise HybridPairFailure(f"{name}: no token of attention group(s) {missing} was loaded (groups' block sizes "
                                f"{sizes}, claims {claims}): those groups' transfer was not checked")
    return HybridPairResult(sizes, compared, claims)


def _done(pair: LivePair) -> bool:
    """The consumer drained, and the producer holds no request but those it need not hear of here (its release of a
    request the consumer reads nothing for is ``pair_notify.py``'s to judge)."""
    return drained(pair.consumer) and set(pair.producer.scheduler.scheduler.requests) <= set(PROMPT_LOGPROBS)


def run_hybrid_pair_roundtrip(rig: HybridPairRig) -> HybridPairResult:
    """The producer prefills ``PAIR_PROMPTS`` and serves; the consumer asks for the same prompts (as a P/D
    proxy sends them) and pulls over a slow transport (each read lands some polls after it is posted, so a
    consumer that reports a read done when it posts it is seen); then where each prefill stopped is judged, and
    apart from it the bytes are compared per group."""
    size = rig.block_size  # the smallest group's: the planner only scales block sizes up
    stored = {rid: request_prompt(i, blocks * size + extra) for i, (rid, (blocks, extra)) in
              enumerate(PAIR_PROMPTS.items())}
    loaded = {rid: prompt for rid, prompt in stored.items() if rid not in PROMPT_LOGPROBS}
    with conv_state_layout(PAIR_LAYOUT), open_pair(rig, stored, prompt_logprobs=PROMPT_LOGPROBS) as pair, \
            Verdicts() as verdicts:
        consumer = pair.consumer
        install_transport(consumer, SLOW_TRANSPORT)
        witness = HybridCompletionWitness(pair)
        pair.logs["consumer"].on_received = witness
        before = {layer: view.view(torch.uint8).clone() for layer, view in consumer.caches.items()}
        pair.add_consumer_requests(loaded)
        for rid, count in PROMPT_LOGPROBS.items():
            pair.add_consumer_requests({rid: stored[rid]}, prompt_logprobs=count)
        pair.step_until(lambda: _done(pair),
                        f"{rig.connector.name}: the consumer did not finish receiving, or the producer did not "
                        f"release its pages (finished_sending),")
        with verdicts.judge():
            raise_if_prefill_misplaced(pair, stored, PROMPT_LOGPROBS)
        check_completion(pair, witness)
        unread = sorted(set(pair.logs["consumer"].received) & set(PROMPT_LOGPROBS))
        if unread:
            raise HybridPairFailure(f"{rig.connector.name}: {', '.join(unread)} asked for prompt logprobs, so vLLM "
                                    f"read nothing for it, yet the consumer reported it received (finished_recving)")
        changed = _pages_changed(before, consumer)
        return _verify(rig, pair.producer, consumer, loaded, changed)
