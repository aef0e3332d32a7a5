"""Consumers that pull nothing: the producer must still hear that it may free its pages.

A NIXL producer keeps a finished prefill's blocks until the consumer says it is done with them, or until
its lease runs out. Some consumer requests read nothing, and vLLM's consumer still tells the producer (its
notification-only branch): one that needs no remote block (it asks for prompt logprobs, so vLLM's
scheduler skips every prefix-cache read, the connector's included, and computes the prompt itself), and
one aborted before it was ever scheduled (a router's cancel; the API server's ``abort_immediately``).
A situation passes when the producer reports each request finished sending on that word, not on its
lease's expiry (the profile's lease sits above the drain bound, expiries are read from the connector's
stats), both sides drain, the consumer reports nothing failed, and every block is back in each side's
free pool.

The consumer's side is judged apart from the producer's release (conformance/checks/verdicts.py): a consumer
that never notifies fails only the producer's verdict, and its own (it drained, reported nothing received or
failed, freed its blocks) are still judged, so a pinned finding on the release hides no consumer bug.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .pair_core import (
    NOTIFY_TIMEOUT_S,
    LivePair,
    PairFailure,
    abort,
    drained,
    open_pair,
    raise_if_expired,
    raise_if_failed_loads,
    raise_if_leaked,
)
from .roundtrip import ROUNDTRIP_SCENARIOS, scenario_prompts
from .verdicts import Verdicts

if TYPE_CHECKING:
    from ..engine.rig import Rig


@dataclass(frozen=True)
class NotifySituation:
    """A consumer request that reads none of the producer's pages."""

    doc: str  # what the consumer's requests did, in the words of a failure message
    skip_prefix: bool = False  # the request reads no prefix cache, the connector's included (prompt logprobs)
    abort_unscheduled: bool = False  # the request is aborted before the consumer's scheduler ever schedules it


NOTIFY_SITUATIONS: dict[str, NotifySituation] = {
    "no-remote-blocks": NotifySituation("the consumer's requests asked for prompt logprobs, so vLLM read none of "
                                        "their prefix from any cache and computed the prompts itself",
                                        skip_prefix=True),
    "aborted-unscheduled": NotifySituation("the consumer's requests were aborted before they were ever scheduled",
                                           abort_unscheduled=True),
}


def raise_if_received(pair: LivePair, doc: str) -> None:
    """``PairFailure`` where the consumer reported a request received that read nothing (``doc``: what its requests
    did)."""
    received = sorted(pair.logs["consumer"].received)
    if received:
        raise PairFailure(f"{pair.rig.connector.name}: {doc}, yet the consumer reported {', '.join(received)} "
                          f"received (finished_recving): nothing was read for them")


def run_pair_notify(rig: Rig, situation: NotifySituation) -> None:
    """The producer prefills and keeps its pages; the consumer's requests read none of them; the producer must be
    told, and nothing may stay held on either side. The consumer's verdicts and the producer's are judged apart."""
    stored, _ = scenario_prompts(ROUNDTRIP_SCENARIOS["multi"], rig.block_size)
    name = rig.connector.name
    with open_pair(rig, stored) as pair, Verdicts() as verdicts:
        # prompt logprobs: vLLM's scheduler reads no cached prefix for such a request, so it sets the connector's
        # claim aside and nothing is loaded (each release by its own rule: skip_reading_prefix_cache, or a hit limit)
        pair.add_consumer_requests(stored, prompt_logprobs=1 if situation.skip_prefix else None)
        if situation.abort_unscheduled:
            abort(pair.consumer, list(pair.producer_ids))  # the API server's abort, still in the queue
        with verdicts.judge() as consumer_drained:
            pair.step_until(lambda: drained(pair.consumer), f"{name}: {situation.doc}; the consumer did not finish "
                            f"them", timeout_s=NOTIFY_TIMEOUT_S)
        # the notification leaves on a consumer step after it finished its requests; a consumer that failed to
        # finish them is not stepped on
        with verdicts.judge() as producer_drained:
            pair.step_until(lambda: drained(pair.producer),
                            f"{name}: {situation.doc}; the producer did not release its pages (finished_sending): "
                            f"the consumer must notify the producer even when it reads nothing,",
                            roles=("consumer", "producer") if consumer_drained.held else ("producer",),
                            timeout_s=NOTIFY_TIMEOUT_S)
        with verdicts.judge():
            raise_if_failed_loads(pair)
        with verdicts.judge():
            raise_if_expired(pair)
        with verdicts.judge():
            raise_if_received(pair, situation.doc)
        drained_roles = tuple(role for role, verdict in (("consumer", consumer_drained),
                                                         ("producer", producer_drained)) if verdict.held)
        with verdicts.judge():
            raise_if_leaked(pair, f"{name}: {situation.doc}; ", roles=drained_roles)
