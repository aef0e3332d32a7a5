"""How far a P/D producer computes each prompt, against what its consumer loads of it.

A prefill handed to a remote decoder ends where the decoder's load ends. With a state (Mamba) group in the cache,
the producer's state block holds the state after its last computed token, and the consumer goes on from that state:
so the producer computes exactly the tokens the consumer claims, no more (NIXL stops the prefill short of the
trailing tokens the decoder recomputes itself, and the decoder claims the rest). A request that asks for its
prompt's logprobs (``prompt_logprobs`` in its sampling params, which a P/D proxy forwards to both sides) reads no
prefix cache, the connector's included: the consumer loads nothing for it and computes its whole prompt, and the
producer, which returns one logprob per prompt position, computes every prompt token. ``raise_if_prefill_misplaced``
judges both from the tokens vLLM's schedulers scheduled on each side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine.check_failure import CheckFailure

if TYPE_CHECKING:
    from collections.abc import Collection

    from ..engine.rig import EngineStandIn
    from .pair_core import LivePair


class PrefillExtentFailure(CheckFailure):
    """The producer computed more or less of a prompt than the consumer goes on from."""


def computed_tokens(side: EngineStandIn, request_id: str) -> int:
    """The tokens vLLM's scheduler on ``side`` scheduled for the request, over every step (its prompt's, from a fresh
    prefix cache, plus any decoded)."""
    return sum(output.num_scheduled_tokens.get(request_id, 0) for output in side.scheduler.outputs)


def _problems(pair: LivePair, stored: dict[str, list[int]], reads_no_cache: Collection[str]) -> list[str]:
    producer, consumer = pair.producer, pair.consumer
    problems = []
    for request_id, prompt in stored.items():
        prefilled = computed_tokens(producer, request_id)
        if request_id in reads_no_cache:
            if prefilled != len(prompt):
                problems.append(f"{request_id} asked for its prompt's logprobs, so the consumer reads nothing of it "
                                f"and the producer returns a logprob per prompt position, yet the producer computed "
                                f"{prefilled} of its {len(prompt)} prompt tokens")
            recomputed = computed_tokens(consumer, request_id)
            if recomputed < len(prompt):
                problems.append(f"{request_id} asked for its prompt's logprobs, so vLLM reads no cache for it, yet "
                                f"the consumer computed only {recomputed} of its {len(prompt)} prompt tokens itself")
            continue
        claimed = consumer.scheduler.external_tokens(request_id)
        if prefilled != claimed:
            problems.append(f"{request_id} ({len(prompt)} prompt tokens): the producer computed {prefilled} tokens "
                            f"and the consumer claimed {claimed}, so the state the consumer goes on from is the state "
                            f"after token {prefilled}, not {claimed}")
    return problems


def raise_if_prefill_misplaced(pair: LivePair, stored: dict[str, list[int]], reads_no_cache: Collection[str]) -> None:
    """``PrefillExtentFailure`` naming each request of ``stored`` whose prefill ends where the consumer does not go on
    from: an ordinary request's prefill computed past or short of the consumer's claim, or a request of
    ``reads_no_cache`` (it asked for prompt logprobs) not computed whole on either side."""
    problems = _problems(pair, stored, reads_no_cache)
    if problems:
        raise PrefillExtentFailure(f"{pair.rig.connector.name}: the cache has a state (Mamba) group, whose state the "
                                   f"producer hands the consumer: " + "; ".join(problems))
