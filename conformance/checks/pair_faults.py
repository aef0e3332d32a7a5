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
the same way, within a short bound. ``UNRELEASABLE_READ`` is a read that cannot be posted and whose handle cannot be
released at the first attempt: besides that judgement, the consumer reports the request once and releases the handle
it kept before it drains. ``VANISHED_PRODUCER`` is a producer whose NIXL metadata is gone after a failed read: a later
request from it must be failed within a bound, not left waiting.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
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
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput

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


# ---- a failed READ whose handle cannot be released at once ---------------------------------------------------------

UNRELEASABLE_READ = PairFault(
    "post-error-unreleasable", "posting the consumer's READ failed after NIXL had prepared its handle, and that handle "
    "could not be released at the first attempt (the transport raised for both: the backend may still be moving the "
    "READ's bytes)", post_error=True)


@dataclass
class ReportCountingLog(SideLog):
    """A ``SideLog`` that also counts, per request, the steps whose output reported it finished receiving or failed
    (vLLM's scheduler takes each report as a new event: a second one finds the request gone or running)."""

    reports: Counter[str] = field(default_factory=Counter)

    def step(self, scheduler_output: SchedulerOutput) -> KVConnectorOutput:
        output = super().step(scheduler_output)
        for request_id in set(output.finished_recving or ()) | set(output.failed_recving or ()):
            self.reports[request_id] += 1
        return output


class ReleaseLedger(UnreleasableTransport):
    """An ``UnreleasableTransport`` that also lists the handles released after their first release was refused."""

    def __init__(self, real: Any, fault: PairFault, side: EngineStandIn):
        super().__init__(real, fault, side)
        self.released_later: set[int] = set()  # id() of the handles whose later release went through

    def release_xfer_handle(self, handle: Any, *args: Any, **kwargs: Any) -> Any:
        refused = id(handle) in self._refused
        result = super().release_xfer_handle(handle, *args, **kwargs)
        if refused:
            self.released_later.add(id(handle))
        return result

    def refused(self) -> int:
        """How many handles' first release was refused."""
        return len(self._refused)

    def kept(self) -> int:
        """How many handles whose first release was refused were never released afterwards."""
        return len(self._refused - self.released_later)


def run_pair_unreleasable_read(rig: Rig, policy: str) -> LoadFailureAnswer:
    """The consumer's READ cannot be posted, and its prepared handle cannot be released at the first attempt; the
    consumer's answer is judged as a failed read's is, and besides: it reports the request exactly once (one step's
    finished_recving or failed_recving), and by the time it drained it has released the handle it had to keep."""
    rig = PolicyRig.of(rig, policy)
    stored = {"req-0": request_prompt(0, 4 * rig.block_size + 5)}
    name, fault = rig.connector.name, UNRELEASABLE_READ
    with open_pair(rig, stored) as pair:
        require_read_faults(pair)
        log = ReportCountingLog(pair.consumer)
        pair.logs["consumer"] = log
        ledger = install_transport(pair.consumer, fault, transport=ReleaseLedger)
        assert isinstance(ledger, ReleaseLedger)
        _consumer_drains(pair, stored, f"{name}: after {fault.doc}, the consumer neither failed nor finished its "
                                       f"request")
        kept = ledger.kept()  # before the consumer's shutdown, which may release what a step forgot
    if not ledger.failed or not ledger.refused():
        raise LoadFailureViolation(f"{name} posted no read the fault could act on ({ledger.posted} posted, "
                                   f"{ledger.refused()} release(s) refused): no unreleasable handle was staged")
    answer = _judge_failed_load(rig, pair, stored, fault, policy)
    if answer.raised is not None:
        return answer
    repeated = ", ".join(f"{rid} in {log.reports[rid]} steps" for rid in stored if log.reports[rid] > 1)
    if repeated:
        raise LoadFailureViolation(
            f"{name}: {fault.doc}; the consumer reported {repeated} (finished_recving / failed_recving): vLLM's "
            f"scheduler takes each report as the load's end, so a second one finds the request already failed, freed "
            f"or running")
    if kept:
        raise LoadFailureViolation(
            f"{name}: {fault.doc}; the consumer drained with {kept} READ handle(s) whose first release was refused "
            f"never released again (release_xfer_handle): NIXL keeps each handle's descriptors, and a backend still "
            f"moving the READ's bytes may write them into blocks vLLM has freed and handed to another request")
    return answer


# ---- the producer's NIXL metadata is gone: a later request from it must fail, not wait ------------------------------

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
            _consumer_drains(pair, {}, f"{name}: after {fault.doc} and {in_flight}'s READ failed too, the consumer "
                                       f"did not drain", timeout_s=VANISHED_PRODUCER_BOUND_S)
    return _judge_failed_load(rig, pair, stored, fault, policy)
