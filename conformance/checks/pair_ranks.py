"""The P/D pair round-trip when the producer runs more tensor-parallel ranks than the consumer.

A prefill engine of TP ``PRODUCER_TP`` and a decode engine of TP 1, as a deployment sizes them: each producer rank
holds its share of every layer's KV heads (``engine/ranks.py`` runs each rank in its own process); the consumer reads
from every producer rank into that rank's slice of each block (NIXL splits the consumer's blocks by the TP ratio) and
notifies each rank; an MLA latent is replicated on every rank, so it reads one and notifies the others. A model of
fewer KV heads than the producer has ranks has each head replicated on several ranks (vLLM's sharding): the consumer
reads each head from one of its replicas; NIXL moves such a model only beside Mamba layers, so that model is a hybrid
(``engine/hybrid_cache.py``'s full attention and Mamba2, each rank holding its share of the state). It passes when
every claimed token's slot of every attention layer on the consumer holds the producer ranks' bytes, rank 0's heads
first (one replica's bytes per head), at the step the consumer first reports the request received (vLLM computes on
them the next step); every producer rank releases the request on the consumer's notification (vLLM's aggregator
reports it finished only when each rank did); nothing failed and no lease expired. Mamba state bytes are not compared.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from ..engine.block_sizes import group_block_sizes
from ..engine.conv_state_layout import LAYOUT_VAR, PAIR_LAYOUT, conv_state_layout
from ..engine.kvcache import CacheShape
from ..engine.model import TINY_MLA_CHANGES, write_tiny_model
from ..engine.prompts import request_prompt
from ..engine.ranks import RankedEngine, first_kv_head, ranked_engine
from ..engine.rig import Rig
from ..engine.scheduler_outputs import ReturnedOutputs
from ..engine.side_channel import HOST, reserved_port, serve_handshake
from ..engine.slots import token_slot_bytes
from .hybrid_pair import HybridPairRig
from .pair_core import (
    DRAIN_TIMEOUT_S,
    PRODUCER_REQUEST_PARAMS,
    SIDE_CHANNEL_HOST_VAR,
    SIDE_CHANNEL_PORT_VAR,
    STEP_PAUSE_S,
    ConsumerDoesNotRead,
    PairFailure,
    SideLog,
    add_request,
    drained,
    patched_environ,
    scaled_bound,
    serving_side,
)
from .pair_lost_notification import install_losing_notifications
from .pair_transport import READ_FAULT_MODES, transfer_mode

if TYPE_CHECKING:
    from vllm.v1.kv_cache_interface import KVCacheConfig

    from ..engine.rig import EngineStandIn

PRODUCER_TP = 2
REPLICATED_KV_HEADS = 1  # fewer KV heads than the producer's ranks: each rank holds a replica of one head
# NIXL moves replicated KV heads from a larger-TP producer only beside Mamba layers (its handshake asserts a pure
# attention model away), whose state every producer rank holds a share of: a hybrid of full attention and Mamba2
REPLICATED_KV_KINDS = ("full", "mamba2")
# request -> prompt length: a partial last block, and one of several whole blocks and a partial one
PROMPT_LENGTHS = {"req-0": 69, "req-1": 100}
FILL_SEED = 4321
# Each connector class's transfer mode as a built consumer of it showed it (``transfer_mode``: the worker class it
# builds, whatever the model): where one consumer posted no READ, this process skips the class's other models before
# building their TP producer, whose ranks' build and prefill cost tens of seconds, with the same words.
_SEEN_MODES: dict[type, str] = {}


@dataclass(frozen=True)
class RankedModel:
    """How the model's KV spreads over the producer's ranks."""

    doc: str
    shape: CacheShape
    config_changes: dict[str, Any] = field(default_factory=dict)  # the tiny model's config.json fields it changes
    # the consumer's notifications (all but its reads' own and heartbeats) cannot be sent: the replicas it did not
    # read from never hear it is done, and keep the blocks until their lease ends, which the check does not wait for
    lose_notifications: bool = False
    kinds: tuple[str, ...] = ()  # a hybrid cache's layer kinds (engine/hybrid_cache.py); empty: attention only

    @property
    def rig_class(self) -> type[Rig]:
        return HybridPairRig if self.kinds else Rig


RANKED_MODELS: dict[str, RankedModel] = {
    "gqa": RankedModel("grouped-query attention: each rank holds half the KV heads; the consumer reads every rank's "
                       "half into its slice of each block", CacheShape()),
    "mla": RankedModel("an MLA model (DeepSeek-style config): every rank holds the whole latent; the consumer reads "
                       "one rank and notifies the others that it is done", CacheShape(mla=True), TINY_MLA_CHANGES),
    "mla-lost-notification": RankedModel("the MLA model, whose consumer cannot notify the replicas it did not read "
                                         "from (send_notif raises): the request it read must still be received, with "
                                         "the producer's bytes, not failed", CacheShape(mla=True), TINY_MLA_CHANGES,
                                         lose_notifications=True),
    "replicated-kv-heads": RankedModel(f"a hybrid model (full attention and Mamba2) of {REPLICATED_KV_HEADS} KV "
                                       f"head(s), fewer than the producer's {PRODUCER_TP} ranks: the ranks hold "
                                       f"replicas of each head and a share each of the Mamba state; the consumer reads "
                                       f"each head once, from one of its replicas, and every rank's state",
                                       CacheShape(), {"num_key_value_heads": REPLICATED_KV_HEADS},
                                       kinds=REPLICATED_KV_KINDS),
}


@dataclass
class RankedPairResult:
    claims: dict[str, int]  # request -> tokens the consumer claimed and compared
    received_at: dict[str, int] = field(default_factory=dict)  # request -> consumer step it was reported received


def head_owners(producer: RankedEngine, mla: bool) -> list[int]:
    """The producer ranks whose caches, in rank order, make up the consumer's heads: every rank where each holds
    heads of its own; the first of the ranks holding replicas of one head; rank 0 for an MLA latent, which every
    rank holds."""
    if mla:
        return [0]
    firsts: dict[int, int] = {}
    for rank in range(len(producer.workers.conns)):
        firsts.setdefault(first_kv_head(producer.vllm_config, rank), rank)
    return list(firsts.values())


def _layer_slots(kv_cache_config: KVCacheConfig, table: tuple[list[int], ...], layer: str) -> tuple[list[int], int]:
    """A request's blocks in ``layer``'s group (``table``: its block ids per group) and that group's block size."""
    group = next(index for index, each in enumerate(kv_cache_config.kv_cache_groups) if layer in each.layer_names)
    return table[group], group_block_sizes(kv_cache_config)[group]


def _slot_bytes_now(producer: RankedEngine, consumer: EngineStandIn, request_id: str, tokens: int,
                    mla: bool) -> str | None:
    """Why the consumer's slots of ``request_id`` in its attention layers do not hold the producer ranks' bytes now,
    or None."""
    ranks = producer.workers.caches()  # each rank's attention layers
    owners = head_owners(producer, mla)
    producer_table = producer.scheduler.block_ids[request_id]
    consumer_table = consumer.scheduler.scheduler.kv_cache_manager.get_block_ids(request_id)
    for name in ranks[0]:
        blocks, block_size = _layer_slots(producer.kv_cache_config, producer_table, name)
        wanted = torch.cat([token_slot_bytes(ranks[rank][name], blocks, tokens, block_size) for rank in owners],
                           dim=1)  # heads in rank order
        blocks, block_size = _layer_slots(consumer.kv_cache_config, consumer_table, name)
        now = token_slot_bytes(consumer.caches[name].cpu(), blocks, tokens, block_size)
        same = (wanted == now).all(dim=1)
        if not bool(same.all()):
            first = int((~same).nonzero()[0])
            wrong = f"({int((~same).sum())} token slot(s) wrong)"
            if mla:
                return f"token {first} of {tokens} (layer {name}) does not hold the producer's latent {wrong}"
            share = wanted.shape[1] // len(owners)
            parts = {rank: slice(i * share, (i + 1) * share) for i, rank in enumerate(owners)}
            from_rank = [rank for rank, part in parts.items() if not torch.equal(wanted[first, part], now[first, part])]
            replicas = sorted(set(range(len(ranks))) - set(owners))
            replicated = f", whose heads rank(s) {replicas} replicate" if replicas else ""
            return (f"token {first} of {tokens} (layer {name}) does not hold the producer's bytes in the heads of "
                    f"producer rank(s) {from_rank} of {len(ranks)}{replicated} {wrong}")
    return None


def ranked_model_rig(rig: Rig, model: RankedModel) -> Rig:
    """``rig`` (a ``RankedModel.rig_class``) over ``model``'s config (written beside the rig's storage, in the test's
    temporary folder) and its hybrid cache's kinds."""
    if isinstance(rig, HybridPairRig):  # a hybrid model's rig_class
        rig = replace(rig, kinds=model.kinds)
    if not model.config_changes:
        return rig
    model_dir = write_tiny_model(rig.storage.parent / "tiny-model-ranked", **model.config_changes)
    return replace(rig, model_dir=model_dir, engines=[])


def _require_reads(name: str, mode: str) -> None:
    if mode not in READ_FAULT_MODES:
        raise ConsumerDoesNotRead(f"{name}'s consumer posts no READ ({mode} mode: the producer writes), so it has no "
                                  f"reads to split across the producer's {PRODUCER_TP} ranks")


def run_pair_ranks(rig: Rig, model: RankedModel) -> RankedPairResult:
    """A producer of ``PRODUCER_TP`` ranks prefills; a one-rank consumer pulls from every rank; the bytes compared."""
    name = rig.connector.name
    seen = rig.connector.load_class()
    if seen in _SEEN_MODES:
        _require_reads(name, _SEEN_MODES[seen])
    producer_role, consumer_role = rig.roles()
    stored = {request_id: request_prompt(index, length) for index, (request_id, length) in
              enumerate(PROMPT_LENGTHS.items())}
    producer_rig = replace(rig, tensor_parallel_size=PRODUCER_TP, engine_id=f"kvconform-producer-{uuid.uuid4()}",
                           engines=[])
    # a Mamba layer's conv state in the layout NIXL moves it in, in this process (the consumer) and in every rank
    layout = {LAYOUT_VAR: PAIR_LAYOUT} if model.kinds else {}
    with reserved_port() as port, conv_state_layout(PAIR_LAYOUT) if model.kinds else nullcontext():
        side_channel = {SIDE_CHANNEL_HOST_VAR: HOST, SIDE_CHANNEL_PORT_VAR: str(port)}
        with (patched_environ(side_channel),
              ranked_engine(producer_rig, producer_role, {**side_channel, **layout}, FILL_SEED,
                            model.kinds) as producer):
            serve_handshake(lambda: producer.scheduler.connector.set_xfer_handshake_metadata_pp_aware(
                producer.workers.handshakes), port)
            handed_over = ReturnedOutputs(producer.scheduler)
            for request_id, prompt in stored.items():
                add_request(producer, request_id, prompt, PRODUCER_REQUEST_PARAMS)
            _step_until(lambda: set(handed_over.params) >= set(stored),
                        [lambda: producer.scheduler.step(producer.workers)],
                        f"{name}'s producer of TP {PRODUCER_TP} did not return kv_transfer_params for every request",
                        producer, None, scaled_bound(rig, DRAIN_TIMEOUT_S))
            consumer = serving_side(rig, consumer_role)
            try:
                _SEEN_MODES[seen] = transfer_mode(consumer)
                _require_reads(name, _SEEN_MODES[seen])
                return _pull(rig, model, producer, consumer, stored, handed_over)
            finally:
                consumer.close()


def _pull(rig: Rig, model: RankedModel, producer: RankedEngine, consumer: EngineStandIn, stored: dict[str, list[int]],
          handed_over: ReturnedOutputs) -> RankedPairResult:
    name = rig.connector.name
    losing = install_losing_notifications(consumer) if model.lose_notifications else None
    result = RankedPairResult(claims={})
    wrong: list[str] = []
    consumer_log = SideLog(consumer)

    def witness(request_id: str, step: int) -> None:
        tokens = consumer.scheduler.external_tokens(request_id)
        result.received_at[request_id] = step
        result.claims[request_id] = tokens
        if tokens <= 0:
            wrong.append(f"{name}: the consumer reported {request_id} received but claimed no token of it")
            return
        why = _slot_bytes_now(producer, consumer, request_id, tokens, rig.shape.mla)
        if why:
            wrong.append(f"{name}: the consumer reported {request_id} received (finished_recving) from a producer "
                         f"of TP {PRODUCER_TP} at its step {step}, but {why}")

    consumer_log.on_received = witness
    for request_id, prompt in stored.items():
        add_request(consumer, request_id, prompt, handed_over.params[request_id])
    steps = [lambda: consumer.scheduler.step(consumer_log), lambda: producer.scheduler.step(producer.workers)]
    if losing is None:
        _step_until(lambda: drained(consumer) and drained(producer), steps,
                    f"{name}: the consumer did not finish receiving from the producer's {PRODUCER_TP} ranks, or a "
                    f"producer rank did not release its pages (finished_sending from every rank)", producer, consumer,
                    scaled_bound(rig, DRAIN_TIMEOUT_S))
        injected = "nothing was injected"
    else:
        _step_until(lambda: drained(consumer) and losing.lost >= len(stored), steps,
                    f"{name}: with notifications that cannot be sent, the consumer did not finish its requests, or "
                    f"did not try to notify the producer's replicas it did not read from ({losing.lost} "
                    f"notification(s) tried for {len(stored)} request(s))", producer, consumer,
                    scaled_bound(rig, DRAIN_TIMEOUT_S))
        injected = (f"only the notifications to the replicas it did not read from were lost ({losing.lost}), its reads "
                    f"completed")
    if consumer_log.failed_requests or consumer_log.invalid_blocks:
        raise PairFailure(f"{name}: {injected}, yet the consumer of a TP {PRODUCER_TP} producer reported "
                          f"failed receive(s) {sorted(consumer_log.failed_requests)} and load-error block(s) "
                          f"{sorted(consumer_log.invalid_blocks)}")
    expired = {"consumer": consumer_log.expired, "producer": producer.workers.expired}
    if any(expired.values()):
        raise PairFailure(f"{name}: requests were released when their lease expired, not on the other side's "
                          f"notification ({expired}): the transfer finished by a timeout")
    if wrong:
        raise PairFailure(wrong[0])
    missing = sorted(set(stored) - set(result.claims))
    if missing:
        raise PairFailure(f"{name}: the consumer never reported {missing} received")
    return result


def _step_until(done: Callable[[], bool], steps: list[Callable[[], object]], what: str, producer: RankedEngine,
                consumer: EngineStandIn | None, bound_s: float) -> None:
    """Run ``steps`` in turn until ``done()``; a ``PairFailure`` saying ``what`` after ``bound_s``."""
    deadline = time.monotonic() + bound_s
    while not done():
        if time.monotonic() > deadline:
            held = {"producer": sorted(producer.scheduler.scheduler.requests)}
            if consumer is not None:
                held["consumer"] = sorted(consumer.scheduler.scheduler.requests)
            raise PairFailure(f"{what} within {bound_s:g} s (still held: {held})")
        for step in steps:
            step()
        time.sleep(STEP_PAUSE_S)
