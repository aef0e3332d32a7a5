"""Read faults for live pairs: the consumer's READ fails after the handshake, or completes late.

vLLM's NIXL worker posts each READ and polls it; an error state, or an exception from posting, is a failed transfer
that vLLM's scheduler handles as a store connector's failed load, so the judgement is ``pair_failed_load.py``'s
(under both ``kv_load_failure_policy`` values). A READ that completes some polls after it was posted is no failure:
the pair round-trip must still find the bytes in place when the consumer reports the request received. The faults
are data (``PAIR_FAULTS``), acted out by ``pair_transport.py``'s stand-in for the consumer's transport.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine.prompts import request_prompt
from .load_failure import LoadFailureAnswer, LoadFailureViolation, PolicyRig
from .pair import run_pair_roundtrip
from .pair_core import LivePair, open_pair
from .pair_failed_load import consumer_drains, judge_failed_load
from .pair_transport import PairFault, install_transport, require_read_faults

if TYPE_CHECKING:
    from ..engine.rig import Rig
    from .roundtrip import RoundTripResult, RoundTripScenario


PAIR_FAULTS: dict[str, PairFault] = {f.name: f for f in (
    PairFault("read-error", "the consumer's READ ended in the transport's error state with only the first half "
              "of its blocks written", ends_in_error=True),
    PairFault("post-error", "posting the consumer's READ failed (the transport raised: the producer's agent "
              "was gone)", post_error=True),
)}
# Not a failure: a transport whose reads complete some polls after they are posted.
SLOW_TRANSPORT = PairFault("slow", "the consumer's READ completed only some polls after it was posted", delay_polls=4)


def run_pair_slow_roundtrip(rig: Rig, scenario: RoundTripScenario) -> RoundTripResult:
    """The pair round-trip over a transport whose reads complete late: completion must mean completion."""
    def prepare(pair: LivePair) -> None:
        require_read_faults(pair)
        install_transport(pair.consumer, SLOW_TRANSPORT)

    return run_pair_roundtrip(rig, scenario, prepare=prepare)


def run_pair_load_failure(rig: Rig, fault: PairFault, policy: str) -> LoadFailureAnswer:
    """The producer serves; the consumer's read fails after the handshake; the consumer's answer is judged.

    Only the consumer must drain: a producer whose reader failed keeps its pages until its lease
    runs out, as vLLM designs it.
    """
    rig = PolicyRig.of(rig, policy)
    block_size = rig.block_size
    stored = {"req-0": request_prompt(0, 4 * block_size + 5)}
    name = rig.connector.name
    with open_pair(rig, stored) as pair:
        require_read_faults(pair)
        transport = install_transport(pair.consumer, fault)
        consumer_drains(pair, stored, f"{name}: after {fault.doc}, the consumer neither failed nor finished its "
                                      f"request")
    driver = pair.consumer.scheduler
    claimed = {rid: driver.external_tokens(rid) for rid in stored}
    if not transport.failed:
        raise LoadFailureViolation(f"{name} posted no read the fault could act on (claims {claimed}, "
                                   f"{transport.posted} read(s) posted): no transfer failure could be staged")
    return judge_failed_load(rig, pair, stored, fault, policy)
