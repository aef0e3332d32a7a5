"""A conversation's second turn on a P/D pair with bidirectional KV transfer: the prefill engine reads turn one back.

With ``bidirectional_kv_xfer`` a decoder keeps a finished request's blocks (up to ``decoder_kv_blocks_ttl`` seconds)
and returns ``kv_transfer_params`` naming them and the tokens their KV covers (``remote_num_tokens``). A router sends
the next turn, the conversation so far plus the user's new tokens, to the prefill engine with those params, and the
prefill engine pulls from the decoder what its own prefix cache lacks, the decoded tokens' KV among them, unless
that is fewer tokens than its ``kv_recompute_threshold`` (then it computes them and only notifies the decoder).

A decoder whose blocks expire within NIXL's safety margin for such a read (``decoder_kv_blocks_ttl`` shorter than it)
must be declined: the prefill engine reports the read failed, never received.

A turn passes when it completes the way vLLM relies on: the prefill engine claims exactly the tokens the decoder
computed beyond its own prefix cache (never a token whose KV the decoder has not got: the last sampled one), or none
below the threshold; the slots it reports received hold the decoder's bytes for those tokens; its second-turn
prefills finish and hand their params on; the decoder releases the first turn's blocks on the prefill engine's word
(both sides drain the first turn), not on a lease's expiry; nothing reports a failed receive. The decoder's model
writes the KV of every token it computes (``DecoderForward``), so decoded tokens carry bytes of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..engine.rig import ConnectorRefused, EngineStandIn, Rig
from ..engine.scheduler import next_token
from ..engine.scheduler_outputs import ReturnedOutputs
from ..engine.slots import token_slot_bytes, token_slots
from .pair_core import NOTIFY_TIMEOUT_S, CompletionWitness, LivePair, PairFailure, check_completion, drained, open_pair
from .roundtrip import ROUNDTRIP_SCENARIOS, computed_locally, scenario_prompts

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.sched.output import SchedulerOutput

DECODED_TOKENS = 3  # tokens the decoder samples in turn one; the KV of all but the last is computed
NEW_USER_TOKENS = 9  # what the user adds in turn two
TURN_TWO = "-turn2"  # the second turn's request id: the first turn's plus this


@dataclass(frozen=True)
class TurnSituation:
    """How the prefill engine treats what the decoder holds of the conversation."""

    doc: str
    recompute_threshold: int  # kv_recompute_threshold on both engines: pull only this many tokens or more
    reads: bool  # whether the prefill engine claims the decoder's tokens (False: below the threshold)
    # decoder_kv_blocks_ttl (s) on both engines, when below NIXL's safety margin for a second-turn read (5 s): the
    # prefill engine must decline the read as expired and report it failed; None: vLLM's default (480 s)
    decoder_ttl_s: int | None = None


TURN_SITUATIONS: dict[str, TurnSituation] = {
    "turn2-read": TurnSituation("the prefill engine reads the conversation's KV its prefix cache lacks from the "
                                "decoder", recompute_threshold=1, reads=True),
    "turn2-below-threshold": TurnSituation("the decoder holds fewer tokens the prefill engine lacks than its "
                                           "kv_recompute_threshold, so it computes them and only notifies the "
                                           "decoder", recompute_threshold=4096, reads=False),
    "turn2-expiring": TurnSituation("the decoder keeps the first turn's blocks for 1 s (decoder_kv_blocks_ttl), "
                                    "inside NIXL's safety margin for a second-turn read, so the prefill engine must "
                                    "decline the read as expired and report it failed",
                                    recompute_threshold=1, reads=True, decoder_ttl_s=1),
}


@dataclass
class TurnsRig(Rig):
    """A Rig whose engines run bidirectional KV transfer, with the situation's recompute threshold."""

    extra_config: dict[str, Any] = field(default_factory=dict)

    def vllm_config(self, role: str) -> VllmConfig:
        config = super().vllm_config(role)
        transfer = config.kv_transfer_config
        assert transfer is not None
        transfer.kv_connector_extra_config.update(self.extra_config)
        return config

    def engine(self, role: str = "kv_both", fill_seed: int | None = None) -> EngineStandIn:
        """An engine as ``Rig`` builds it; a connector that refuses bidirectional transfer when built says so."""
        try:
            return super().engine(role, fill_seed)
        except NotImplementedError as exc:
            raise ConnectorRefused(f"{self.connector.name} refuses bidirectional KV transfer (bidirectional_kv_xfer) "
                                   f"when its {role} is built: {type(exc).__name__}: {exc}") from exc


def turns_config(situation: TurnSituation) -> dict[str, Any]:
    """The extra config both engines get (vLLM's NIXL option names)."""
    ttl = {} if situation.decoder_ttl_s is None else {"decoder_kv_blocks_ttl": situation.decoder_ttl_s}
    return {"bidirectional_kv_xfer": True, "kv_recompute_threshold": situation.recompute_threshold, **ttl}


def conversation(prompt: list[int], decoded: int, added: int) -> list[int]:
    """Turn one's prompt, the ``decoded`` tokens the decoder sampled after it, then ``added`` new user tokens."""
    tokens = list(prompt)
    for _ in range(decoded):
        tokens.append(next_token(tokens))
    return tokens + [(tokens[-1] + 13 * (i + 1)) % 991 + 2 for i in range(added)]


def computed_kv(position: int, layer_index: int) -> float:
    """The value the decoder's model stand-in writes into a token's slot: distinct per position and layer, exact in
    every float cache dtype."""
    return float((position * 7 + layer_index * 31) % 200 + 1)


@dataclass
class DecoderForward:
    """The decoder's forward: per layer, the KV of each token the step computes, written into the token's slot."""

    side: EngineStandIn
    block_size: int

    def __call__(self, layer: str, scheduler_output: SchedulerOutput) -> None:
        driver = self.side.scheduler
        view = self.side.caches[layer]
        layer_index = list(self.side.caches).index(layer)
        for request_id, count in scheduler_output.num_scheduled_tokens.items():
            end = driver.scheduler.requests[request_id].num_computed_tokens  # advanced when the step was scheduled
            blocks, offsets = token_slots(driver.block_ids[request_id][0], range(end - count, end), self.block_size,
                                          view.device)
            values = torch.tensor([computed_kv(p, layer_index) for p in range(end - count, end)], dtype=view.dtype,
                                  device=view.device)
            view[blocks, :, offsets] = values.view(-1, 1, 1)


@dataclass
class TurnTwoWitness:
    """Compares a second-turn request's read slots with the decoder's the moment the prefill engine reports it
    received (its compute is scheduled on the next step)."""

    pair: LivePair
    first_turn: dict[str, str]  # second-turn request -> the first-turn request the decoder holds
    wrong: list[str] = field(default_factory=list)

    def __call__(self, request_id: str, step: int) -> None:
        producer, consumer = self.pair.producer, self.pair.consumer
        tokens = producer.scheduler.external_tokens(request_id)
        local = computed_locally(producer, request_id)
        block_size = self.pair.rig.block_size
        held = consumer.scheduler.block_ids[self.first_turn[request_id]][0]
        read_into = producer.scheduler.scheduler.kv_cache_manager.get_block_ids(request_id)[0]
        for name, view in producer.caches.items():
            decoder = token_slot_bytes(consumer.caches[name], held, local + tokens, block_size)[local:]
            now = token_slot_bytes(view, read_into, local + tokens, block_size)[local:]
            same = (decoder.to(now.device) == now).all(dim=1)
            if not bool(same.all()):
                first = local + int((~same).nonzero()[0])
                self.wrong.append(
                    f"{self.pair.rig.connector.name}: the prefill engine reported {request_id} received "
                    f"(finished_recving) at its step {step}, but token {first} of the {local + tokens} it then holds "
                    f"(layer {name}, {local} from its own prefix cache) differs from the decoder's KV for that token "
                    f"({int((~same).sum())} token slot(s) wrong): it read the wrong blocks, or reported the read "
                    f"done before it completed")
                return


def _check_claims(pair: LivePair, situation: TurnSituation, first_turn: dict[str, str],
                  computed: dict[str, int]) -> None:
    """Each second-turn claim is what the decoder computed beyond the prefill engine's prefix cache, or nothing below
    the threshold."""
    name = pair.rig.connector.name
    for request_id, first in first_turn.items():
        claim = pair.producer.scheduler.answered_claim(request_id)
        local = claim.num_computed_tokens if claim is not None else 0
        tokens = (claim.num_external_tokens or 0) if claim is not None else 0
        held = computed[first]
        lacking = held - local
        expected = lacking if situation.reads else 0
        if tokens != expected:
            prompt = held - DECODED_TOKENS + 1
            why = (f"the decoder computed the KV of {held} tokens of the conversation ({first}'s {prompt}-token "
                   f"prompt and {DECODED_TOKENS - 1} decoded tokens; the last sampled token has none) and the "
                   f"prefill engine's prefix cache held {local}")
            if tokens > lacking:
                raise PairFailure(f"{name}: the prefill engine claimed {tokens} external tokens for {request_id}, but "
                                  f"{why}: it claimed {tokens - lacking} token(s) whose KV the decoder does not have")
            raise PairFailure(f"{name}: the prefill engine claimed {tokens} external tokens for {request_id}; {why}, "
                              f"so with kv_recompute_threshold {situation.recompute_threshold} it should claim "
                              f"{expected}")


def _check_completed(pair: LivePair, situation: TurnSituation, first_turn: dict[str, str],
                     witness: TurnTwoWitness) -> None:
    """Nothing failed or expired; what was claimed was read (the witness compared it), nothing else reported."""
    name = pair.rig.connector.name
    prefill_log = pair.logs["producer"]
    if prefill_log.failed_requests or prefill_log.invalid_blocks:
        raise PairFailure(f"{name}: {situation.doc}; nothing was injected, yet the prefill engine reported failed "
                          f"receive(s) {sorted(prefill_log.failed_requests)} and load-error block(s) "
                          f"{sorted(prefill_log.invalid_blocks)}")
    check_completion(pair, CompletionWitness(pair))
    if witness.wrong:
        raise PairFailure(witness.wrong[0])
    received = set(prefill_log.received)
    if situation.reads and received != set(first_turn):
        raise PairFailure(f"{name}: the prefill engine read the decoder's KV for {sorted(first_turn)} but reported "
                          f"{sorted(received) or 'none'} received (finished_recving)")
    if not situation.reads and received:
        raise PairFailure(f"{name}: {situation.doc}, yet it reported {sorted(received)} received "
                          f"(finished_recving): nothing was read for them")


def _check_declined(pair: LivePair, situation: TurnSituation, first_turn: dict[str, str]) -> None:
    """Each second-turn read was reported failed, none received: vLLM fails or recomputes those requests (its
    kv_load_failure_policy) instead of computing on blocks the decoder is about to free."""
    name = pair.rig.connector.name
    prefill_log = pair.logs["producer"]
    received = sorted(set(prefill_log.received) & set(first_turn))
    if received:
        raise PairFailure(f"{name}: {situation.doc}; yet it reported {', '.join(received)} received "
                          f"(finished_recving): it read blocks whose lease ends within NIXL's safety margin "
                          f"(_KV_BLOCKS_EXPIRY_SAFETY_MARGIN), which the decoder may free while the read runs")
    unreported = sorted(set(first_turn) - prefill_log.failed_requests)
    if unreported:
        raise PairFailure(f"{name}: {situation.doc}; it neither reported {', '.join(unreported)} received nor failed "
                          f"(failed_recving), so vLLM cannot know their KV never arrived")


def run_pair_turns(rig: TurnsRig, situation: TurnSituation) -> dict[str, int]:
    """Turn one P -> D (the decoder samples ``DECODED_TOKENS`` and keeps its blocks), then turn two on the prefill
    engine with the decoder's params; returns each second-turn request's claim."""
    stored, _ = scenario_prompts(ROUNDTRIP_SCENARIOS["multi"], rig.block_size)
    name = rig.connector.name
    with open_pair(rig, stored) as pair:
        decoder, prefill = pair.consumer, pair.producer
        decoded = ReturnedOutputs(decoder.scheduler)
        decoder.runner.forward = DecoderForward(decoder, rig.block_size)
        for request_id, prompt in stored.items():
            decoder.scheduler.add(request_id, prompt, max_tokens=DECODED_TOKENS,
                                  kv_transfer_params=pair.params[request_id])
        pair.step_until(lambda: set(decoded.params) >= set(stored) and drained(prefill),
                        f"{name}: turn one did not finish: the decoder did not return kv_transfer_params for every "
                        f"request, or the prefill engine did not release its pages (finished_sending),")
        computed = {rid: len(prompt) + DECODED_TOKENS - 1 for rid, prompt in stored.items()}
        first_turn = {rid + TURN_TWO: rid for rid in stored}
        witness = TurnTwoWitness(pair, first_turn)
        pair.logs["producer"].on_received = witness
        for request_id, first in first_turn.items():
            prefill.scheduler.add(request_id, conversation(stored[first], DECODED_TOKENS, NEW_USER_TOKENS),
                                  kv_transfer_params=dict(decoded.params[first]))
        if situation.decoder_ttl_s is None:  # the second turn's prefills finish and hand their params on
            pair.step_until(lambda: set(pair.params) >= set(first_turn) and drained(decoder),
                            f"{name}: {situation.doc}; the prefill engine did not finish the second turn's prefills, "
                            f"or the decoder did not release the first turn's blocks", timeout_s=NOTIFY_TIMEOUT_S)
        else:  # each read ends, received or failed (vLLM then fails or recomputes it); the decoder's TTL frees
            prefill_log = pair.logs["producer"]
            pair.step_until(lambda: set(first_turn) <= prefill_log.failed_requests | set(prefill_log.received)
                            and drained(decoder),
                            f"{name}: {situation.doc}; the prefill engine reported neither received nor failed for "
                            f"the second turn's reads, or the decoder did not release the first turn's blocks",
                            timeout_s=NOTIFY_TIMEOUT_S)
        _check_claims(pair, situation, first_turn, computed)
        if situation.decoder_ttl_s is not None:
            _check_declined(pair, situation, first_turn)
        else:
            _check_completed(pair, situation, first_turn, witness)
        return {rid: prefill.scheduler.external_tokens(rid) for rid in first_turn}
