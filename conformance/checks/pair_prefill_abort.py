"""Prefills the router cancels on the prefill engine: nothing may be handed over for them, nor kept.

A NIXL producer keeps a finished prefill's blocks for the consumer to read and returns ``kv_transfer_params`` naming
them. A prefill that is aborted instead (the client went away, the router cancelled it: the API server's abort) must
end differently: no params go back (there is nothing complete to read), its blocks return to the free pool at once
(not when a lease runs out), and the prefills beside it are handed over as usual. The abort comes between two chunks
of its prefill (the prefill engine's token budget is one block per step, so a prompt takes several), when it already
holds blocks. (An abort while the request still waits reaches the same branch of NIXL's scheduler side with no block
to keep.)

It passes when the producer's ``request_finished`` keeps no aborted request's blocks; the other requests'
consumer reads them correctly (the bytes in place when reported received, ``pair_core.py``'s witness);
both sides drain within the notification bound, nothing expired, nothing failed; and no block stays held.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.prompts import request_prompt
from ..engine.rig import Rig
from ..engine.scheduler_outputs import ReturnedOutputs
from .pair_core import (
    NOTIFY_TIMEOUT_S,
    PRODUCER_REQUEST_PARAMS,
    CompletionWitness,
    LivePair,
    PairFailure,
    abort,
    add_request,
    check_completion,
    drained,
    open_pair,
    raise_if_leaked,
)
from .roundtrip import ROUNDTRIP_SCENARIOS, scenario_prompts

ABORTED_PROMPT_BLOCKS = (3, 5)  # (whole blocks, extra tokens) of each aborted prompt: several chunks of one block
ABORTED_REQUESTS = 2
ABORTED = "prefills were aborted on the producer after the first chunk of their prompt ran"  # for failure messages


@dataclass
class ChunkedPrefillRig(Rig):
    """A Rig whose engines schedule one block of tokens per step, so a prompt prefills in several chunks."""

    def scheduler_limits(self) -> tuple[int, int]:
        max_num_seqs, _ = super().scheduler_limits()
        return max_num_seqs, self.block_size


def _abort_after_first_chunk(pair: LivePair, request_id: str, finished: ReturnedOutputs) -> None:
    """Step the producer until the request's first chunk ran, then abort it (its prompt takes several chunks)."""
    requests = pair.producer.scheduler.scheduler.requests
    pair.step_until(lambda: requests[request_id].num_computed_tokens > 0,
                    f"{pair.rig.connector.name}'s producer did not schedule the first chunk of {request_id}",
                    roles=("producer",))
    assert request_id not in finished.finish_reasons, (
        f"the harness meant {request_id} to be aborted mid-prefill, but it finished first")
    abort(pair.producer, [request_id])


def run_pair_prefill_abort(rig: ChunkedPrefillRig) -> None:
    """The producer hands over the round-trip's requests and aborts others mid-prefill; the consumer reads the
    handed-over ones."""
    stored, _ = scenario_prompts(ROUNDTRIP_SCENARIOS["multi"], rig.block_size)
    blocks, extra = ABORTED_PROMPT_BLOCKS
    aborted = {f"cancelled-{i}": request_prompt(200 + i, blocks * rig.block_size + extra)
               for i in range(ABORTED_REQUESTS)}
    name = rig.connector.name
    with open_pair(rig, stored) as pair:
        finished = ReturnedOutputs(pair.producer.scheduler)
        for request_id, prompt in aborted.items():
            add_request(pair.producer, request_id, prompt, dict(PRODUCER_REQUEST_PARAMS))
        for request_id in aborted:
            _abort_after_first_chunk(pair, request_id, finished)
        kept = sorted(rid for rid in aborted if pair.producer.scheduler.answers.kept_blocks.get(rid))
        if kept:
            raise PairFailure(f"{name}: {ABORTED}, yet its request_finished kept the blocks of {', '.join(kept)} for "
                              f"a consumer to read (returned True): no consumer reads an aborted prefill, so they stay "
                              f"held until a lease runs out")
        witness = CompletionWitness(pair)
        pair.logs["consumer"].on_received = witness
        pair.add_consumer_requests(stored)
        pair.step_until(lambda: drained(pair.consumer) and drained(pair.producer),
                        f"{name}: {ABORTED}; the producer still held them, or the consumer did not finish "
                        f"reading the other requests (finished_recving), or the producer did not release their pages",
                        timeout_s=NOTIFY_TIMEOUT_S)
        check_completion(pair, witness)
        raise_if_leaked(pair, f"{name}: {ABORTED}; ")
