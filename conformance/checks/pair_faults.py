"""Faults for live pairs: the consumer's read fails after the handshake, or completes late, or the handshake fails.

vLLM's NIXL worker posts each READ and polls it; an error state, or an exception from posting, is a
failed transfer that vLLM's scheduler handles as a store connector's failed load, so the judgement is
``conformance/checks/load_failure.py``'s: the connector raises or reports, and every slot vLLM keeps as
loaded holds the producer's bytes. Faults are data, applied after the handshake to the transport object
the connector's worker drives, found through ``TRANSPORT_PATHS``: a new pair connector adds its row
there and gets the same checks from its profile. ``HANDSHAKE_FAULTS`` come before any transfer is
posted: the consumer's ``kv_transfer_params`` name a producer it cannot handshake with (a port no one
serves, an engine id the producer does not have); the same judgement applies, within a bound just above
vLLM's own handshake timeout, and no transfer may be posted. ``PUSH_FAULTS`` fail a push pair's transfer on
the side that makes it (the producer's WRITE, the consumer's registration): the consumer's answer is judged
the same way, within a short bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import torch

from ..engine.prompts import request_prompt
from ..engine.rig import EngineStandIn, Rig
from ..engine.side_channel import reserved_port
from ..vllm_install import api as vllm_api
from .load_failure import (
    LoadFailureAnswer,
    LoadFailureViolation,
    PolicyRig,
    _check_kept_slots,
    kept_tokens,
    loading_blocks,
)
from .pair import DRAIN_TIMEOUT_S, LivePair, SideLog, drained, open_pair, run_pair_roundtrip
from .roundtrip import RoundTripResult, RoundTripScenario

if TYPE_CHECKING:
    from vllm.config import VllmConfig

_Wrapper = TypeVar("_Wrapper")  # what wrap_transport puts in a transport's place

# Where a pair connector's worker keeps the transport it posts reads on (attribute path from the connector).
TRANSPORT_PATHS = (
    ("connector_worker", "nixl_wrapper"),  # NixlConnector, NixlPullConnector, NixlPushConnector (vLLM 0.32)
)


# Which side of a pair posts the transfers, by its NIXL worker's transfer mode (``_TRANSFER_MODE``): a pull consumer
# READs the producer's pages, a push producer WRITEs the consumer's. The read faults act on a consumer's READs.
POSTING_ROLE = {"pull": "consumer", "push": "producer"}
READ_FAULT_MODES = ("pull",)


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


def transfer_mode(side: EngineStandIn) -> str:
    """The side's NIXL transfer mode (``POSTING_ROLE``'s keys); "pull" for a pair connector that names none."""
    worker = getattr(side.runner.connector, TRANSPORT_PATHS[0][0], None)
    return str(getattr(worker, "_TRANSFER_MODE", "pull"))


def require_read_faults(pair: LivePair) -> None:
    """``NoTransportHook`` where the pair's consumer posts no READ for the faults to act on."""
    mode = transfer_mode(pair.consumer)
    if mode not in READ_FAULT_MODES:
        raise NoTransportHook(f"{pair.rig.connector.name} transfers in {mode} mode: its {POSTING_ROLE.get(mode)} "
                              f"posts the transfers, and kvconform's transfer faults act on a consumer's READs "
                              f"(conformance/checks/pair_faults.py's READ_FAULT_MODES); the handshake faults apply")


def wrap_transport(side: EngineStandIn, wrap: Callable[[Any], _Wrapper], unless: str,
                   error: type[Exception] = NoTransportHook) -> _Wrapper:
    """Put ``wrap(transport)`` where the side's worker connector keeps its transport (``TRANSPORT_PATHS``); where it
    keeps none there, raise ``error`` saying so and what then cannot be done (``unless``)."""
    connector = side.runner.connector
    for path in TRANSPORT_PATHS:
        owner = connector
        for attribute in path[:-1]:
            owner = getattr(owner, attribute, None)
        if owner is not None and hasattr(owner, path[-1]):
            wrapper = wrap(getattr(owner, path[-1]))
            setattr(owner, path[-1], wrapper)
            return wrapper
    raise error(f"{type(connector).__name__}: kvconform finds its transport under none of "
                f"{['.'.join(p) for p in TRANSPORT_PATHS]} (conformance/checks/pair_faults.py), so {unless}")


def install_transport(side: EngineStandIn, fault: PairFault, waiting: EngineStandIn | None = None,
                      transport: type[FaultyTransport] = FaultyTransport) -> FaultyTransport:
    """Put a ``FaultyTransport`` (or the ``transport`` subclass given) where the side's worker connector keeps its
    transport (``waiting``: the side whose requests wait for the transfers, when another side posts them)."""
    return wrap_transport(side, lambda real: transport(real, fault, waiting or side),
                          "no transfer fault can be injected")


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
        _consumer_drains(pair, stored, f"{name}: after {fault.doc}, the consumer neither failed nor finished its "
                                       f"request")
    driver = pair.consumer.scheduler
    claimed = {rid: driver.external_tokens(rid) for rid in stored}
    if not transport.failed:
        raise LoadFailureViolation(f"{name} posted no read the fault could act on (claims {claimed}, "
                                   f"{transport.posted} read(s) posted): no transfer failure could be staged")
    return _judge_failed_load(rig, pair, stored, fault, policy)


def _consumer_drains(pair: LivePair, requests: dict[str, list[int]], what: str,
                     timeout_s: float = DRAIN_TIMEOUT_S) -> None:
    """The router hands the consumer ``requests``; it is stepped (with the producer) until it drains or raises."""
    log = pair.logs["consumer"]
    pair.add_consumer_requests(requests)
    try:
        pair.step_until(lambda: drained(pair.consumer), what, timeout_s=timeout_s)
    except Exception as exc:
        if exc is not log.raised:
            raise


def _judge_failed_load(rig: PolicyRig, pair: LivePair, stored: dict[str, list[int]], fault: PairFault | HandshakeFault,
                       policy: str) -> LoadFailureAnswer:
    """The consumer's answer to a load that failed: raised, or reported, with every slot it keeps the producer's."""
    name, block_size = rig.connector.name, rig.block_size
    log: SideLog = pair.logs["consumer"]
    driver = pair.consumer.scheduler
    claimed = {rid: driver.external_tokens(rid) for rid in stored}
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


# ---- failures before any transfer is posted ------------------------------------------------------------------------

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
        _consumer_drains(pair, stored, f"{name}: after {fault.doc}, the consumer neither failed nor finished its "
                                       f"request", timeout_s=HANDSHAKE_FAILURE_BOUND_S)
    assert not transport.posted, (f"{name} posted {transport.posted} transfer(s) after {fault.doc}: the harness "
                                  f"meant the handshake to fail before any")
    return _judge_failed_load(rig, pair, stored, fault, policy)


# ---- a push pair's transfer fails: the producer's WRITE, or the consumer's registration --------------------------

WRITE_FAULT_MODES = ("push",)
# A push transfer that fails to post fails at once, on one side: the consumer must hear of it within this bound.
WRITE_FAILURE_BOUND_S = 5.0
# The consumer's registration watchdog (NIXL push's ``push_registration_timeout``, by default the decoder's KV TTL),
# shortened to fire inside that bound: a registration no WRITE answered in time must not leave the request waiting.
REGISTRATION_WATCHDOG_S = 1.0


@dataclass
class WatchdogRig(PolicyRig):
    """A ``PolicyRig`` whose push consumer gives up on a registration after ``REGISTRATION_WATCHDOG_S``."""

    def vllm_config(self, role: str) -> VllmConfig:
        config = super().vllm_config(role)
        extra = dict(config.kv_transfer_config.kv_connector_extra_config or {})
        config.kv_transfer_config.kv_connector_extra_config = {**extra,
                                                               "push_registration_timeout": REGISTRATION_WATCHDOG_S}
        return config


class NotifyFailingTransport(FaultyTransport):
    """A ``FaultyTransport`` whose notifications cannot be sent (``send_notif`` raises)."""

    def send_notif(self, *args: Any, **kwargs: Any) -> None:
        self.posted += 1
        self.failed += 1
        raise InjectedTransportError(f"kvconform: {self._fault.doc}")


def split_registration(message: bytes) -> tuple[bytes, dict[str, Any]] | None:
    """A push consumer's registration message as its header (the bytes before the msgpack payload) and its payload, a
    map with a request_id; None for any other notification."""
    for start in range(1, len(message)):
        try:
            payload = msgspec.msgpack.decode(message[start:])
        except msgspec.DecodeError:
            continue
        if isinstance(payload, dict) and "request_id" in payload:
            return message[:start], payload
    return None


class UnreleasableTransport(FaultyTransport):
    """A ``FaultyTransport`` whose handles cannot be released at the first attempt either (``release_xfer_handle``
    raises once per handle: the backend may still be moving the failed transfer's bytes); a later attempt succeeds."""

    def __init__(self, real: Any, fault: PairFault, side: EngineStandIn):
        super().__init__(real, fault, side)
        self._refused: set[int] = set()  # id() of the handles whose first release raised

    def release_xfer_handle(self, handle: Any, *args: Any, **kwargs: Any) -> Any:
        if id(handle) not in self._refused:
            self._refused.add(id(handle))
            raise InjectedTransportError(f"kvconform: {self._fault.doc}")
        return self._real.release_xfer_handle(handle, *args, **kwargs)


class RedirectedRegistrations(FaultyTransport):
    """A consumer's transport whose registrations advertise ``dead_port`` as the consumer's side channel (an address
    the producer cannot reach: a wrong advertised port), so the producer's handshake back fails."""

    dead_port = 0

    def send_notif(self, agent: Any, *args: Any, notif_msg: bytes = b"", **kwargs: Any) -> Any:
        split = split_registration(notif_msg)
        if split is not None and "decode_port" in split[1]:
            self.posted += 1
            self.failed += 1
            notif_msg = split[0] + msgspec.msgpack.encode({**split[1], "decode_port": self.dead_port})
        return self._real.send_notif(agent, *args, notif_msg=notif_msg, **kwargs)


@dataclass(frozen=True)
class PushFault:
    """A push pair's transfer that fails: on which side, through which transport stand-in, heard of within when."""

    fault: PairFault
    role: str  # the side whose transport fails ("producer", "consumer")
    transport: type[FaultyTransport] = FaultyTransport
    bound_s: float = WRITE_FAILURE_BOUND_S


PUSH_FAULTS: dict[str, PushFault] = {
    "write-post-error": PushFault(PairFault(
        "write-post-error", "posting the producer's WRITE into the consumer's blocks failed (the transport raised: "
        "the consumer's agent was gone)", post_error=True), "producer"),
    "write-unreleasable": PushFault(PairFault(
        "write-unreleasable", "posting the producer's WRITE failed and its handle could not be released at once "
        "(the transport raised for both)", post_error=True), "producer", UnreleasableTransport),
    "registration-send-error": PushFault(PairFault(
        "registration-send-error", "sending the consumer's registration to the producer failed (the transport "
        "raised: the producer's agent was gone)"), "consumer", NotifyFailingTransport),
    # the producer's handshake back waits out vLLM's 5 s receive timeout before it fails
    "unreachable-consumer": PushFault(PairFault(
        "unreachable-consumer", "the consumer's registration advertised a side-channel port nothing serves, so the "
        "producer's handshake back with the consumer failed"), "consumer", RedirectedRegistrations, 8.0),
}


def run_pair_write_failure(rig: Rig, push_fault: PushFault, policy: str) -> LoadFailureAnswer:
    """A push pair's transfer fails (``PUSH_FAULTS``); the consumer's answer is judged as a failed read's is: it raises
    or reports the request (failed_recving, load-error blocks) within ``WRITE_FAILURE_BOUND_S``, never reports it
    received, and every slot it keeps holds the producer's bytes. The consumer's registration watchdog fires
    within the bound (``WatchdogRig``)."""
    rig = WatchdogRig.of(rig, policy)
    stored = {"req-0": request_prompt(0, 4 * rig.block_size + 5)}
    name, fault = rig.connector.name, push_fault.fault
    with reserved_port() as dead_port, open_pair(rig, stored) as pair:
        mode = transfer_mode(pair.consumer)
        if mode not in WRITE_FAULT_MODES:
            raise NoTransportHook(f"{name} transfers in {mode} mode: its {POSTING_ROLE.get(mode)} posts the "
                                  f"transfers, which the read faults (test_pair_load_failure) act on")
        side = pair.logs[push_fault.role].side
        transport = install_transport(side, fault, waiting=pair.consumer, transport=push_fault.transport)
        if isinstance(transport, RedirectedRegistrations):
            transport.dead_port = dead_port
        _consumer_drains(pair, stored, f"{name}: after {fault.doc}, the consumer neither failed nor finished its "
                                       f"request", timeout_s=push_fault.bound_s)
    if not transport.failed:
        raise LoadFailureViolation(f"{name}'s {push_fault.role} posted nothing the fault could act on "
                                   f"({transport.posted} posted): no transfer failure could be staged")
    return _judge_failed_load(rig, pair, stored, fault, policy)
