"""Faults for live pairs: the consumer's read fails after the handshake, or completes late.

vLLM's NIXL worker posts each READ and polls it; an error state, or an exception from posting, is a
failed transfer that vLLM's scheduler handles as a store connector's failed load, so the judgement is
``conformance/checks/load_failure.py``'s: the connector raises or reports, and every slot vLLM keeps as
loaded holds the producer's bytes. Faults are data, applied after the handshake to the transport object
the connector's worker drives, found through ``TRANSPORT_PATHS``: a new pair connector adds its row
there and gets the same checks from its profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..engine.prompts import request_prompt
from ..engine.rig import EngineStandIn, Rig
from ..vllm_install import api as vllm_api
from .load_failure import (
    LoadFailureAnswer,
    LoadFailureViolation,
    PolicyRig,
    _check_kept_slots,
    kept_tokens,
    loading_blocks,
)
from .pair import LivePair, drained, open_pair, run_pair_roundtrip
from .roundtrip import RoundTripResult, RoundTripScenario

# Where a pair connector's worker keeps the transport it posts reads on (attribute path from the connector).
TRANSPORT_PATHS = (
    ("connector_worker", "nixl_wrapper"),  # NixlConnector, NixlPullConnector, NixlPushConnector (vLLM 0.32)
)


class NoTransportHook(Exception):
    """kvconform knows no way to reach this pair connector's transport: no fault can be injected."""


class InjectedTransportError(RuntimeError):
    """What a transport raises when a read cannot be posted (the producer's agent is gone)."""


@dataclass(frozen=True)
class PairFault:
    name: str
    doc: str  # what happened, in the words of a failure message
    post_error: bool = False  # posting the read raises
    ends_in_error: bool = False  # the read runs, then ends in "ERR" having landed only the first half of the blocks
    delay_polls: int = 0  # the read is really posted only after this many polls of its state


PAIR_FAULTS: dict[str, PairFault] = {f.name: f for f in (
    PairFault("read-error", "the consumer's READ ended in the transport's error state with only the first half "
              "of its blocks written", ends_in_error=True),
    PairFault("post-error", "posting the consumer's READ failed (the transport raised: the producer's agent "
              "was gone)", post_error=True),
)}
# Not a failure: a transport whose reads complete some polls after they are posted.
SLOW_TRANSPORT = PairFault("slow", "the consumer's READ completed only some polls after it was posted", delay_polls=4)


class FaultyTransport:
    """Stands in for the connector's transport: forwards everything, misbehaves as its fault says."""

    def __init__(self, real: Any, fault: PairFault, side: EngineStandIn):  # real: the connector's NIXL agent
        self._real = real
        self._fault = fault
        self._side = side
        self.posted = 0
        self.failed = 0
        self._deferred: dict[int, list[Any]] = {}  # id(handle) -> [handle, polls left, args, kwargs]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def transfer(self, handle: object, *args: Any, **kwargs: Any) -> str:
        self.posted += 1
        if self._fault.post_error:
            self.failed += 1
            raise InjectedTransportError(f"kvconform: {self._fault.doc}")
        if self._fault.delay_polls:
            self._deferred[id(handle)] = [handle, self._fault.delay_polls, args, kwargs]
            return "PROC"
        state: str = self._real.transfer(handle, *args, **kwargs)
        return state

    def check_xfer_state(self, handle: object) -> str:
        deferred = self._deferred.get(id(handle))
        if deferred is not None:
            deferred[1] -= 1
            if deferred[1] > 0:
                return "PROC"
            del self._deferred[id(handle)]
            posted: str = self._real.transfer(handle, *deferred[2], **deferred[3])
            return posted
        state: str = self._real.check_xfer_state(handle)
        if self._fault.ends_in_error and state != "PROC":
            self.failed += 1
            lose_second_half(self._side)
            return "ERR"
        return state


def lose_second_half(side: EngineStandIn) -> None:
    """Zero the second half of the blocks of every request still waiting for remote KV: what a read that
    stopped midway leaves (the consumer's cache starts zeroed, so those blocks never changed)."""
    RequestStatus = vllm_api.find("RequestStatus")

    scheduler = side.scheduler.scheduler
    for request_id, request in scheduler.requests.items():
        if request.status != RequestStatus.WAITING_FOR_REMOTE_KVS:
            continue
        blocks = scheduler.kv_cache_manager.get_block_ids(request_id)[0]
        lost = torch.tensor(blocks[len(blocks) // 2:], dtype=torch.long)
        for view in side.caches.values():
            view[lost.to(view.device)] = 0


def install_transport(side: EngineStandIn, fault: PairFault) -> FaultyTransport:
    """Put a ``FaultyTransport`` where the side's worker connector keeps its transport."""
    connector = side.runner.connector
    for path in TRANSPORT_PATHS:
        owner = connector
        for attribute in path[:-1]:
            owner = getattr(owner, attribute, None)
        if owner is not None and hasattr(owner, path[-1]):
            faulty = FaultyTransport(getattr(owner, path[-1]), fault, side)
            setattr(owner, path[-1], faulty)
            return faulty
    raise NoTransportHook(f"{type(connector).__name__}: kvconform finds its transport under none of "
                          f"{['.'.join(p) for p in TRANSPORT_PATHS]} (conformance/checks/pair_faults.py), so no "
                          f"transfer fault can be injected")


def run_pair_slow_roundtrip(rig: Rig, scenario: RoundTripScenario) -> RoundTripResult:
    """The pair round-trip over a transport whose reads complete late: completion must mean completion."""
    def prepare(pair: LivePair) -> None:
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
        transport = install_transport(pair.consumer, fault)
        log = pair.logs["consumer"]
        pair.add_consumer_requests(stored)
        try:
            pair.step_until(lambda: drained(pair.consumer),
                            f"{name}: after {fault.doc}, the consumer neither failed nor finished its request")
        except Exception as exc:
            if exc is not log.raised:
                raise
    driver = pair.consumer.scheduler
    claimed = {rid: driver.external_tokens(rid) for rid in stored}
    if not transport.failed:
        raise LoadFailureViolation(f"{name} posted no read the fault could act on (claims {claimed}, "
                                   f"{transport.posted} read(s) posted): no transfer failure could be staged")
    answer = LoadFailureAnswer(log.raised, log.invalid_blocks, log.failed_requests, claimed)
    if answer.raised is not None:
        return answer
    own_blocks = loading_blocks(name, driver, stored, answer)
    for rid in stored:
        reported = rid in answer.failed_requests or bool(answer.invalid_blocks & set(own_blocks[rid]))
        if not reported and rid in log.received:
            raise LoadFailureViolation(
                f"{name}: {fault.doc}, but the connector {answer.describe()}: it reported {rid} received "
                f"(finished_recving) at its step {log.received[rid]}, so vLLM ({policy} policy) computes on KV that "
                f"never arrived; it must list {rid} in failed_recving or its blocks in "
                f"get_block_ids_with_load_errors()")
        answer.kept_tokens[rid] = 0 if rid in answer.failed_requests else kept_tokens(
            own_blocks[rid], claimed[rid], answer.invalid_blocks, block_size)
    _check_kept_slots(rig, pair.producer, pair.consumer, answer, fault)
    return answer
