"""The round-trip for connectors that only work as a pair: a live producer serves, a consumer pulls.

The pair is ``pair_core.py``'s: the producer stays alive while the consumer reads its pages, its
``kv_transfer_params`` reach the consumer's request as a P/D proxy passes them. A pair passes only when it
completes the way vLLM relies on (``pair_core.check_completion``): the consumer's bytes are right at the step it
first reports ``finished_recving`` (the next step computes on them), and each side releases a request on the other's
word, not a lease's expiry. After draining, the bytes are checked as the store-then-load round-trip checks them
(``verify_roundtrip``). ``ROUTINGS`` are the request shapes a router produces (its own request ids, a prompt partly
cached on the consumer, a prefill ended by a stop token).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .pair_core import CompletionWitness, LivePair, check_completion, drained, open_pair
from .roundtrip import (
    RoundTripResult,
    RoundTripScenario,
    computed_locally,
    scenario_prompts,
    verify_roundtrip,
)

if TYPE_CHECKING:
    from ..engine.rig import Rig


def pair_inapplicable(scenario: RoundTripScenario) -> str | None:
    """Why a scenario does not apply to a P/D pair, or None.

    A pair hands over one request, not a prefix: the proxy sends the same prompt to both sides, and
    NIXL's consumer claims its whole prompt from the producer's params (its worker asserts it needs no
    more blocks than the producer sent). A consumer prompt that extends the stored one is outside that
    contract.
    """
    if scenario.extend:
        return (f"scenario {scenario.name}: a P/D pair transfers one request, so the consumer's prompt is the "
                f"producer's; a prompt that extends it is not part of the pair's contract")
    return None


@dataclass(frozen=True)
class Routing:
    """How a P/D router hands one request to the pair."""

    doc: str
    consumer_ids: bool = False  # the consumer's request id is the router's own, not the producer's
    # whole blocks of the prompt the consumer computed itself before the request arrives:
    # (prompt length, block size) -> blocks; None: none
    local_blocks: Callable[[int, int], int] | None = None
    producer_stops: bool = False  # the producer's prefill ends on a stop token (FINISHED_STOPPED), not by length


ROUTINGS: dict[str, Routing] = {
    "same-ids": Routing("the consumer's request has the producer's id; nothing cached on the consumer"),
    "routed-ids": Routing("the consumer's request id is the router's own; the producer's travels in "
                          "kv_transfer_params (remote_request_id)", consumer_ids=True),
    "local-prefix": Routing("the consumer's prefix cache already holds the first half of the prompt's whole blocks",
                            local_blocks=lambda length, block_size: max(1, length // block_size // 2)),
    "local-whole": Routing("the consumer's prefix cache already holds every whole block before the prompt's last "
                           "token", local_blocks=lambda length, block_size: (length - 1) // block_size),
    "stop-token": Routing("the producer's prefill samples a stop token (FINISHED_STOPPED), not its last allowed "
                          "token (FINISHED_LENGTH_CAPPED)", producer_stops=True),
}
SAME_ROUTE = ROUTINGS["same-ids"]


def _check_local_hits(pair: LivePair, wanted: dict[str, list[int]], blocks: Callable[[int, int], int]) -> None:
    """The routing really happened: each request found its locally computed blocks in the consumer's cache."""
    block_size = pair.rig.block_size
    for consumer_id, producer_id in pair.producer_ids.items():
        expected = blocks(len(wanted[producer_id]), block_size) * block_size
        assert computed_locally(pair.consumer, consumer_id) == expected, (
            f"the harness meant {consumer_id} to find {expected} tokens in the consumer's prefix cache, but vLLM's "
            f"scheduler found {computed_locally(pair.consumer, consumer_id)}")


def run_pair_roundtrip(rig: Rig, scenario: RoundTripScenario, prepare: Callable[[LivePair], None] | None = None,
                       routing: Routing = SAME_ROUTE) -> RoundTripResult:
    """The producer prefills and keeps its pages; the consumer pulls them; the bytes are compared.

    ``prepare`` runs on the open pair before the consumer gets its requests (a slow transport goes in there);
    ``routing`` is how the router hands the requests to the pair (``ROUTINGS``).
    """
    stored, wanted = scenario_prompts(scenario, rig.block_size)
    name = rig.connector.name
    with open_pair(rig, stored, routing.producer_stops) as pair:
        if prepare is not None:
            prepare(pair)
        if routing.local_blocks is not None:
            pair.compute_locally(wanted, routing.local_blocks)
        witness = CompletionWitness(pair)
        pair.logs["consumer"].on_received = witness
        pair.add_consumer_requests(wanted, routing.consumer_ids)
        pair.step_until(lambda: drained(pair.consumer) and drained(pair.producer),
                        f"{name}: the consumer did not finish receiving, or the producer did not release "
                        f"its pages (finished_sending),")
        if routing.local_blocks is not None:
            _check_local_hits(pair, wanted, routing.local_blocks)
        consumer_wanted = {consumer_id: wanted[producer_id] for consumer_id, producer_id in pair.producer_ids.items()}
        result: list[RoundTripResult] = []
        check_completion(pair, witness, lambda: result.append(verify_roundtrip(
            rig, pair.producer, pair.consumer, stored, consumer_wanted, whole_blocks=True,
            producer_ids=pair.producer_ids)))
    return result[0]
