"""A producer whose NIXL metadata is gone after a failed READ: a later request from it must fail, not wait.

The consumer's READ of one request ends in the error state while another's is in flight, and from then on its
transport says the producer's metadata is gone (every post raising). The router then hands the consumer a request
from that producer: the consumer must fail it within ``VANISHED_PRODUCER_BOUND_S``, not leave it waiting for remote
KV. All three requests are judged as failed reads are (``pair_failed_load.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..engine.prompts import request_prompt
from ..vllm_install import api as vllm_api
from .load_failure import LoadFailureAnswer, PolicyRig
from .pair_core import LivePair, open_pair
from .pair_failed_load import consumer_drains, judge_failed_load
from .pair_transport import FaultyTransport, InjectedTransportError, PairFault, install_transport, require_read_faults

if TYPE_CHECKING:
    from ..engine.rig import EngineStandIn, Rig


# A consumer that knows its producer is gone fails the producer's next request at once (vLLM 0.32 on: the engine is
# marked invalid and its reads fail fast; before, posting the READ raises): it must have failed within this bound.
VANISHED_PRODUCER_BOUND_S = 5.0
VANISHED_PRODUCER = PairFault(
    "metadata-gone", "the consumer's READ of req-0 ended in the transport's error state while its READ of req-1 was "
    "still in flight, and from then on the transport reported the producer's NIXL metadata gone (check_remote_metadata "
    "false, every post raising)")


class VanishedProducer(FaultyTransport):
    """A consumer's transport on which the producer vanishes. No READ really runs: each stays in flight ("PROC").
    Once ``awaited`` READs are in flight, the one for request ``first`` ends in the error state, and from then on
    ``check_remote_metadata`` says the producer's metadata is gone and posting a READ raises; the others end in the
    error state once ``ending`` is set. The consumer's blocks keep what they held (zeros)."""

    def __init__(self, real: Any, fault: PairFault, side: EngineStandIn):
        super().__init__(real, fault, side)
        self.first = ""  # the producer request whose READ fails first
        self.awaited = 1  # READs in flight before it fails
        self.gone = False
        self.ending = False
        self._reads: dict[int, str] = {}  # id(handle) -> the producer request it reads

    def make_prepped_xfer(self, *args: Any, notif_msg: bytes = b"", **kwargs: Any) -> Any:
        handle = self._real.make_prepped_xfer(*args, notif_msg=notif_msg, **kwargs)
        self._reads[id(handle)] = notif_msg.decode(errors="replace").rsplit(":", 1)[0]  # "<remote request id>:<tp>"
        return handle

    def transfer(self, handle: object, *args: Any, **kwargs: Any) -> str:
        self.posted += 1
        if self.gone:
            self.failed += 1
            raise InjectedTransportError(f"kvconform: {self._fault.doc}")
        return "PROC"

    def check_xfer_state(self, handle: object) -> str:
        fails_first = self._reads.get(id(handle)) == self.first and self.posted >= self.awaited
        if not (fails_first or self.ending):
            return "PROC"
        self.failed += 1
        self.gone = True
        return "ERR"

    def check_remote_metadata(self, *args: Any, **kwargs: Any) -> bool:
        return not self.gone and bool(self._real.check_remote_metadata(*args, **kwargs))


def waiting_for_remote(side: EngineStandIn, request_id: str) -> bool:
    """Whether vLLM's scheduler on ``side`` still holds ``request_id`` waiting for remote KV (or not yet scheduled)."""
    RequestStatus = vllm_api.find("RequestStatus")

    request = side.scheduler.scheduler.requests.get(request_id)
    return request is not None and request.status in (RequestStatus.WAITING, RequestStatus.WAITING_FOR_REMOTE_KVS)


def _until_answered(pair: LivePair, done: Callable[[], bool], what: str, timeout_s: float) -> bool:
    """Step the pair until ``done``; False where the consumer raised instead (its answer to the fault)."""
    try:
        pair.step_until(done, what, timeout_s=timeout_s)
    except Exception as exc:
        if exc is not pair.logs["consumer"].raised:
            raise
        return False
    return True


def run_pair_vanished_producer(rig: Rig, policy: str) -> LoadFailureAnswer:
    """req-0's READ fails while req-1's runs, and the transport then says the producer's metadata is gone; the router
    hands the consumer req-2 from that producer: the consumer must fail it within ``VANISHED_PRODUCER_BOUND_S``, not
    leave it waiting. Then req-1's READ fails too; all three are judged as failed reads are."""
    rig = PolicyRig.of(rig, policy)
    block_size = rig.block_size
    stored = {f"req-{i}": request_prompt(i, (3 + i) * block_size + 5) for i in range(3)}
    first, in_flight, later = stored
    name, fault = rig.connector.name, VANISHED_PRODUCER
    with open_pair(rig, stored) as pair:
        require_read_faults(pair)
        transport = install_transport(pair.consumer, fault, transport=VanishedProducer)
        assert isinstance(transport, VanishedProducer)
        transport.first, transport.awaited = first, 2
        pair.add_consumer_requests({rid: stored[rid] for rid in (first, in_flight)})
        answered = _until_answered(pair, lambda: not waiting_for_remote(pair.consumer, first),
                                   f"{name}: after {fault.doc}, the consumer neither failed nor finished {first}",
                                   VANISHED_PRODUCER_BOUND_S)
        if answered:
            assert transport.gone, (f"the harness meant {name}'s READ of {first} to fail with {in_flight}'s in flight, "
                                    f"but {transport.posted} READ(s) were posted and none failed")
            pair.add_consumer_requests({later: stored[later]})
            answered = _until_answered(
                pair, lambda: not waiting_for_remote(pair.consumer, later),
                f"{name}: {fault.doc}; the router then handed the consumer {later} from that producer, and the "
                f"consumer neither failed nor finished it (a request from a producer known gone waits forever)",
                VANISHED_PRODUCER_BOUND_S)
        transport.ending = True
        if answered:
            consumer_drains(pair, {}, f"{name}: after {fault.doc} and {in_flight}'s READ failed too, the consumer "
                                      f"did not drain", timeout_s=VANISHED_PRODUCER_BOUND_S)
    return judge_failed_load(rig, pair, stored, fault, policy)
