"""Handshake faults for live pairs: the consumer cannot handshake with the producer its params name.

These come before any transfer is posted: the consumer's ``kv_transfer_params`` name a producer it cannot handshake
with (a port no one serves, an engine id the producer does not have). The judgement is a failed read's
(``pair_failed_load.py``), within a bound just above vLLM's own handshake timeout, and no transfer may be posted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..engine.prompts import request_prompt
from ..engine.side_channel import reserved_port
from .load_failure import LoadFailureAnswer, PolicyRig
from .pair_core import open_pair
from .pair_failed_load import consumer_drains, judge_failed_load
from .pair_transport import POSTING_ROLE, PairFault, install_transport, transfer_mode

if TYPE_CHECKING:
    from ..engine.rig import Rig


UNKNOWN_ENGINE_ID = "kvconform-unknown-engine"
# vLLM's handshake waits 5 s for the producer's answer (its ZMQ receive timeout, nixl/base_worker.py); the consumer
# must have failed the request well within this bound, not after its lease or never.
HANDSHAKE_FAILURE_BOUND_S = 15.0
COUNT_ONLY = PairFault("count-only", "nothing: the transfers are only counted")


@dataclass(frozen=True)
class HandshakeFault:
    """The producer's ``kv_transfer_params`` as the consumer receives them, edited so its handshake fails."""

    name: str
    doc: str  # what happened, in the words of a failure message
    edit: Callable[[dict[str, Any], int], dict[str, Any]]  # (the producer's params, a port no one serves) -> edited


HANDSHAKE_FAULTS: dict[str, HandshakeFault] = {f.name: f for f in (
    HandshakeFault("unreachable-producer", "the consumer's kv_transfer_params named a side-channel port no producer "
                   "serves (the producer was gone), so its handshake got no answer",
                   lambda params, dead_port: {**params, "remote_port": dead_port}),
    HandshakeFault("unknown-engine", f"the consumer's kv_transfer_params named an engine id ({UNKNOWN_ENGINE_ID}) the "
                   f"producer at that host and port does not have (a restarted producer), so its handshake was "
                   f"refused", lambda params, _: {**params, "remote_engine_id": UNKNOWN_ENGINE_ID}),
)}


def run_pair_handshake_failure(rig: Rig, fault: HandshakeFault, policy: str) -> LoadFailureAnswer:
    """The producer serves; the consumer's params name a producer it cannot handshake with; its answer is judged.

    The consumer must fail or report the request within ``HANDSHAKE_FAILURE_BOUND_S`` (no hang, no wait for a
    lease), never report it received, and post no transfer.
    """
    rig = PolicyRig.of(rig, policy)
    stored = {"req-0": request_prompt(0, 4 * rig.block_size + 5)}
    name = rig.connector.name
    with reserved_port() as dead_port, open_pair(rig, stored) as pair:
        poster = pair.logs[POSTING_ROLE.get(transfer_mode(pair.consumer), "consumer")].side
        transport = install_transport(poster, COUNT_ONLY, waiting=pair.consumer)
        pair.params = {rid: fault.edit(params, dead_port) for rid, params in pair.params.items()}
        consumer_drains(pair, stored, f"{name}: after {fault.doc}, the consumer neither failed nor finished its "
                                      f"request", timeout_s=HANDSHAKE_FAILURE_BOUND_S)
    assert not transport.posted, (f"{name} posted {transport.posted} transfer(s) after {fault.doc}: the harness "
                                  f"meant the handshake to fail before any")
    return judge_failed_load(rig, pair, stored, fault, policy)
