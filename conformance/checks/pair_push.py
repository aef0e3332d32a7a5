"""Push pairs whose two halves meet in the orders a deployment produces, beyond the round-trip's one: a router that
hands the consumer its request before the producer's prefill finished, and engines that each suffix the router's
request id; a producer whose transport fails a poll and hands it malformed registrations beside the real ones; and a
producer that shuts down while its WRITE is in flight.

A push pair (the producer WRITEs into the blocks the consumer registers) has two halves to meet: the consumer's
registration and the producer's finished request, in either order. The round-trip has the producer finish first; a
router that knows the producer's address may send the decode request at once, so the registration arrives first
(``registered-before-prefill``). Each engine's API server gives a request its own id, the router's id with a random
8-hex suffix (vLLM's input processor), so the two halves carry different ids for one request
(``engine-suffixed-ids``). A producer's notifications come from any sender, and its transport may fail a poll:
neither may cost the consumer's registrations (``stray-notifications``). An engine may stop while a WRITE runs: its
worker's shutdown must release every transfer handle it prepared (``shutdown-mid-write``). A backend may take longer
than vLLM's 200 ms mark to accept a WRITE (vLLM only warns): the WRITE is still the one that completes the request
(``slow-write-submission``).

The meeting situations pass as the pair round-trip does (``pair.py``): the bytes the consumer reports received are
the producer's, each side is released on the other's word, never by a lease's expiry, both sides drain and every
block is back in each side's free pool.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from ..engine.prompts import request_prompt
from ..engine.rig import EngineStandIn, Rig
from .pair_core import (
    PRODUCER_REQUEST_PARAMS,
    CompletionWitness,
    LivePair,
    PairFailure,
    add_request,
    check_completion,
    drained,
    open_pair,
    raise_if_leaked,
)
from .pair_transport import (
    FaultyTransport,
    InjectedTransportError,
    PairFault,
    install_transport,
    transfer_mode,
    wrap_transport,
)
from .pair_write_faults import split_registration
from .roundtrip import verify_roundtrip

if TYPE_CHECKING:
    from .roundtrip import RoundTripResult

# A registration crosses in well under a second once the sides have shaken hands; a pair that never completes
# fails at this bound rather than at the round-trip's longer drain bound.
SITUATION_TIMEOUT_S = 15.0
# A WRITE that stays in flight: its transport reports it running for as long as a test lasts.
STRAY_POLL_ERROR = PairFault("stray", "the producer's poll for notifications failed (the transport raised)")
WRITE_IN_FLIGHT = PairFault("in-flight", "the producer's WRITE stays in flight", delay_polls=10**9)
# What a router knows of the producer before its prefill finished: where it is, not what it computed.
PRODUCER_ADDRESS = ("remote_engine_id", "remote_host", "remote_port", "tp_size", "dcp_size", "pp_size",
                    "transfer_mode")


class NotificationCounter:
    """Stands in for a side's transport and counts the notifications the side sends (``send_notif``) and those it
    takes in (``get_new_notifs``)."""

    def __init__(self, real: Any):  # real: the connector's NIXL agent
        self._real = real
        self.sent = 0
        self.received = 0
        self.messages: list[bytes] = []  # what the side sent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def send_notif(self, *args: Any, **kwargs: Any) -> Any:
        self.sent += 1
        message = kwargs.get("notif_msg", args[1] if len(args) > 1 else None)
        if isinstance(message, bytes):
            self.messages.append(message)
        return self._real.send_notif(*args, **kwargs)

    def get_new_notifs(self, *args: Any, **kwargs: Any) -> Any:
        notifications = self._real.get_new_notifs(*args, **kwargs)
        self.received += sum(len(messages) for messages in notifications.values())
        return notifications


def count_notifications(side: EngineStandIn) -> NotificationCounter:
    """Put a ``NotificationCounter`` where the side's worker connector keeps its transport (``TRANSPORT_PATHS``)."""
    return wrap_transport(side, NotificationCounter, "it cannot tell when the consumer's registration left",
                          PairFailure)


def suffixed(request_id: str) -> str:
    """The id an engine's API server gives the router's request: the router's id, ``-`` and 8 random hex digits."""
    return f"{request_id}-{secrets.token_hex(4)}"


def router_params(known: dict[str, Any], producer_id: str) -> dict[str, Any]:
    """The ``kv_transfer_params`` a router sends the consumer before the producer's prefill finished: the
    producer's address (from an earlier request's params) and the producer's request id, no block ids yet."""
    return {**{key: known[key] for key in PRODUCER_ADDRESS if key in known}, "do_remote_prefill": True,
            "do_remote_decode": False, "remote_request_id": producer_id}


def _drain_and_check(pair: LivePair, doc: str, stored: dict[str, list[int]], wanted: dict[str, list[int]],
                     witness: CompletionWitness, compare_all: bool) -> RoundTripResult | None:
    """Step both sides until they drain, then judge as the pair round-trip does, and check no block stays held.

    ``compare_all``: compare every slot of both caches after draining (``verify_roundtrip``), right only while no
    request before ``wanted`` freed blocks a later one reused; otherwise each request's bytes are compared when the
    consumer reports it received (``CompletionWitness``), and each must have been received, with a claim."""
    name = pair.rig.connector.name
    pair.step_until(lambda: drained(pair.consumer) and drained(pair.producer),
                    f"{name}: {doc}; the consumer did not finish receiving, or the producer did not release its "
                    f"pages (finished_sending),", timeout_s=SITUATION_TIMEOUT_S)
    result: list[RoundTripResult] = []
    check_completion(pair, witness, (lambda: result.append(verify_roundtrip(
        pair.rig, pair.producer, pair.consumer, stored, wanted, whole_blocks=True,
        producer_ids=pair.producer_ids))) if compare_all else None)
    log = pair.logs["consumer"]
    unreceived = {rid: pair.consumer.scheduler.external_tokens(rid) for rid in wanted if rid not in log.received}
    if unreceived:
        raise PairFailure(f"{name}: {doc}; the consumer never reported {sorted(unreceived)} received "
                          f"(finished_recving), its claims {unreceived}: nothing was loaded for them")
    raise_if_leaked(pair, f"{name}: {doc}; ")
    return result[0] if result else None


def hand_over(pair: LivePair, consumer_ids: dict[str, str], prompts: dict[str, list[int]]) -> None:
    """The router's requests to the consumer, each under its consumer id, with its producer request's params."""
    for producer_id, consumer_id in consumer_ids.items():
        pair.producer_ids[consumer_id] = producer_id
        add_request(pair.consumer, consumer_id, prompts[producer_id], pair.params[producer_id])


def _register_first(pair: LivePair, consumer_ids: dict[str, str], prompts: dict[str, list[int]],
                    known: dict[str, Any]) -> None:
    """The router sends the consumer its requests before the producer has them; the producer gets them only once
    the consumer has sent its registration."""
    name = pair.rig.connector.name
    sent, received = count_notifications(pair.consumer), count_notifications(pair.producer)
    for producer_id, consumer_id in consumer_ids.items():
        pair.producer_ids[consumer_id] = producer_id
        add_request(pair.consumer, consumer_id, prompts[producer_id], router_params(known, producer_id))
    pair.step_until(lambda: sent.sent >= len(consumer_ids), f"{name}: the router sent the consumer requests "
                    f"{sorted(consumer_ids.values())} with the producer's address before the producer's prefill; "
                    f"the consumer did not send the producer a notification (its registration) for each",
                    roles=("consumer",), timeout_s=SITUATION_TIMEOUT_S)
    # the producer keeps stepping (its other traffic) until its connector has taken the registrations in
    pair.step_until(lambda: received.received >= sent.sent, f"{name}: the consumer sent {sent.sent} notification(s) "
                    f"(its registrations); the producer's connector did not take them in", roles=("producer",),
                    timeout_s=SITUATION_TIMEOUT_S)
    # the producer gets them in the reverse order, so its finished requests and the registrations waiting for them
    # are listed in different orders
    for producer_id in reversed(list(consumer_ids)):
        add_request(pair.producer, producer_id, prompts[producer_id], PRODUCER_REQUEST_PARAMS)


def numbered_prompts(rig: Rig, first: int, lengths: tuple[int, ...]) -> dict[str, list[int]]:
    """Requests ``req-<first>``, ``req-<first+1>``, ... of ``lengths`` (in blocks and a few tokens past)."""
    block_size = rig.block_size
    return {f"req-{first + i}": request_prompt(first + i, blocks * block_size + 3 + i)
            for i, blocks in enumerate(lengths)}


def run_registered_before_prefill(rig: Rig, situation: PushSituation) -> RoundTripResult | None:
    """req-0 as the round-trip hands it over (so the sides have shaken hands); then req-1 and req-2 reach the
    consumer first, and the producer once the consumer has registered them."""
    handed = numbered_prompts(rig, 0, (3,))
    early = numbered_prompts(rig, 1, (4, 2))
    with open_pair(rig, handed) as pair:
        require_mode(pair, situation)
        witness = CompletionWitness(pair)
        pair.logs["consumer"].on_received = witness
        hand_over(pair, {rid: rid for rid in handed}, handed)
        result = _drain_and_check(pair, "req-0 was handed over after the producer's prefill", handed, handed,
                                  witness, compare_all=True)
        _register_first(pair, {rid: rid for rid in early}, early, pair.params["req-0"])
        _drain_and_check(pair, situation.doc, early, early, witness, compare_all=False)
        return result


def run_engine_suffixed_ids(rig: Rig, situation: PushSituation) -> RoundTripResult | None:
    """Each engine suffixes the router's ids: req-0 and req-1 handed over after the producer's prefill, req-2 and
    req-3 registered before it."""
    handed = numbered_prompts(rig, 0, (3, 2))
    early = numbered_prompts(rig, 2, (4, 1))
    producer_ids = {rid: suffixed(rid) for rid in (*handed, *early)}
    stored = {producer_ids[rid]: prompt for rid, prompt in {**handed, **early}.items()}
    with open_pair(rig, {producer_ids[rid]: handed[rid] for rid in handed}) as pair:
        require_mode(pair, situation)
        witness = CompletionWitness(pair)
        pair.logs["consumer"].on_received = witness
        hand_over(pair, {producer_ids[rid]: suffixed(rid) for rid in handed}, stored)
        wanted = {consumer_id: stored[producer_id] for consumer_id, producer_id in pair.producer_ids.items()}
        result = _drain_and_check(pair, situation.doc, stored, wanted, witness, compare_all=True)
        _register_first(pair, {producer_ids[rid]: suffixed(rid) for rid in early}, stored,
                        pair.params[producer_ids["req-0"]])
        wanted = {consumer_id: stored[producer_id] for consumer_id, producer_id in pair.producer_ids.items()
                  if consumer_id not in wanted}
        _drain_and_check(pair, situation.doc, stored, wanted, witness, compare_all=False)
        return result


class HandleLedger(FaultyTransport):
    """A ``FaultyTransport`` that also lists the transfer handles the side prepared and those it released."""

    def __init__(self, real: Any, fault: PairFault, side: EngineStandIn):
        super().__init__(real, fault, side)
        self.prepared: list[Any] = []
        self.released: list[Any] = []

    def make_prepped_xfer(self, *args: Any, **kwargs: Any) -> Any:
        handle = self._real.make_prepped_xfer(*args, **kwargs)
        self.prepared.append(handle)
        return handle

    def release_xfer_handle(self, handle: Any, *args: Any, **kwargs: Any) -> Any:
        self.released.append(handle)
        return self._real.release_xfer_handle(handle, *args, **kwargs)


def run_shutdown_mid_write(rig: Rig, situation: PushSituation) -> RoundTripResult | None:
    """The producer's WRITE for req-0 stays in flight (its transport reports it running); the producer's engine
    shuts down then: every transfer handle it prepared must be released by the time its worker's shutdown returns."""
    stored = numbered_prompts(rig, 0, (3,))
    name = rig.connector.name
    with open_pair(rig, stored) as pair:
        require_mode(pair, situation)
        ledger = install_transport(pair.producer, WRITE_IN_FLIGHT, waiting=pair.consumer, transport=HandleLedger)
        assert isinstance(ledger, HandleLedger)
        pair.add_consumer_requests(stored)
        pair.step_until(lambda: ledger.posted > 0, f"{name}: the consumer registered req-0; the producer posted no "
                        f"WRITE for it", timeout_s=SITUATION_TIMEOUT_S)
        in_flight = list(ledger.prepared)
        pair.producer.close()  # the workers shut down first (vLLM's engine order), synchronously
        kept = [handle for handle in in_flight if handle not in ledger.released]
        if kept:
            raise PairFailure(f"{name}: {situation.doc}; its worker's shutdown returned with {len(kept)} of the "
                              f"{len(in_flight)} WRITE handle(s) it prepared never released (release_xfer_handle): "
                              f"NIXL keeps each handle's descriptors, and the transfer may still write into the "
                              f"consumer's blocks")
    return None


def malformed_copies(registration: bytes) -> list[bytes]:
    """Two malformed copies of a registration message: its header (the bytes before its msgpack payload) followed by
    a payload no decoder reads (0xc1, a byte msgpack never uses), then by a map without a request id."""
    split = split_registration(registration)
    if split is None:
        raise PairFailure(f"kvconform found no msgpack map with a request_id in the consumer's notification "
                          f"{registration[:80]!r}: it cannot tell a registration's header from its payload")
    header = split[0]
    return [header + b"\xc1", header + msgspec.msgpack.encode({"decode_engine_id": "kvconform-stray"})]


class StrayNotifications(FaultyTransport):
    """A producer's transport whose first poll for notifications raises, and which delivers malformed copies of the
    consumer's registrations just before each, in the same batch."""

    def __init__(self, real: Any, fault: PairFault, side: EngineStandIn):
        super().__init__(real, fault, side)
        self.registrations: list[bytes] = []  # the consumer's, once it sent them
        self.strays = 0

    def get_new_notifs(self, *args: Any, **kwargs: Any) -> Any:
        if not self.failed:
            self.failed += 1
            raise InjectedTransportError(f"kvconform: {self._fault.doc}")
        notifications = self._real.get_new_notifs(*args, **kwargs)
        for messages in notifications.values():
            for index in reversed(range(len(messages))):
                if messages[index] in self.registrations:
                    strays = malformed_copies(messages[index])
                    messages[index:index] = strays
                    self.strays += len(strays)
        return notifications


def _round_trip_through(rig: Rig, situation: PushSituation, fault: PairFault, transport: type[FaultyTransport],
                        prepare: Callable[[LivePair, FaultyTransport], None] | None = None,
                        ) -> tuple[RoundTripResult | None, FaultyTransport]:
    """The round-trip of req-0 and req-1 over a producer's ``transport`` acting out ``fault`` (``prepare`` sets it up
    once the pair is open); the result, and the transport for what it counted."""
    stored = numbered_prompts(rig, 0, (3, 2))
    with open_pair(rig, stored) as pair:
        require_mode(pair, situation)
        witness = CompletionWitness(pair)
        pair.logs["consumer"].on_received = witness
        installed = install_transport(pair.producer, fault, waiting=pair.consumer, transport=transport)
        if prepare is not None:
            prepare(pair, installed)
        hand_over(pair, {rid: rid for rid in stored}, stored)
        return _drain_and_check(pair, situation.doc, stored, stored, witness, compare_all=True), installed


def run_stray_notifications(rig: Rig, situation: PushSituation) -> RoundTripResult | None:
    """The round-trip of req-0 and req-1 while the producer's transport fails a poll and delivers malformed
    registrations beside the consumer's."""

    def forward_registrations(pair: LivePair, stray: FaultyTransport) -> None:
        assert isinstance(stray, StrayNotifications)
        stray.registrations = count_notifications(pair.consumer).messages

    result, stray = _round_trip_through(rig, situation, STRAY_POLL_ERROR, StrayNotifications, forward_registrations)
    assert isinstance(stray, StrayNotifications)
    assert stray.failed and stray.strays, (f"the harness meant {rig.connector.name}'s producer to fail a poll and "
                                           f"take in malformed registrations, but it failed {stray.failed} and took "
                                           f"{stray.strays}")
    return result


# vLLM's push worker warns when submitting a request's WRITEs takes over 200 ms (``_do_start_push_kv``); this backend
# takes longer to accept each WRITE, which then completes some polls later.
SLOW_SUBMISSION_S = 0.3
SLOW_SUBMISSION = PairFault("slow-submission", "each of the producer's WRITE submissions (transfer()) took "
                            f"{SLOW_SUBMISSION_S * 1000:.0f} ms, and the WRITE then completed some polls later",
                            delay_polls=4)


class SlowSubmission(FaultyTransport):
    """A producer's transport whose ``transfer()`` blocks ``SLOW_SUBMISSION_S`` before it accepts a WRITE (a backend
    busy registering memory or queued behind other traffic); the WRITE then runs as its fault says."""

    def transfer(self, handle: object, *args: Any, **kwargs: Any) -> str:
        time.sleep(SLOW_SUBMISSION_S)
        return super().transfer(handle, *args, **kwargs)


def run_slow_write_submission(rig: Rig, situation: PushSituation) -> RoundTripResult | None:
    """The round-trip of req-0 and req-1 while each WRITE's submission takes ``SLOW_SUBMISSION_S``: a slow submission
    is neither a failure nor a completion, so the pair must complete as the round-trip does."""
    result, slow = _round_trip_through(rig, situation, SLOW_SUBMISSION, SlowSubmission)
    assert slow.posted >= 2, (f"the harness meant {rig.connector.name}'s producer to submit a WRITE for each of req-0 "
                              f"and req-1 through its slow transport, but it submitted {slow.posted}")
    return result


@dataclass(frozen=True)
class PushSituation:
    doc: str  # what happened, in the words of a failure message
    run: Callable[[Rig, PushSituation], RoundTripResult | None]
    modes: tuple[str, ...]  # the transfer modes (``pair_transport.POSTING_ROLE``'s keys) it applies to
    why_not: str = ""  # why it does not apply to the other modes
    rig_class: type[Rig] = Rig  # the rig its engines are built by (one that chunks prefills, say)


PUSH_SITUATIONS: dict[str, PushSituation] = {
    "registered-before-prefill": PushSituation(
        "the router sent the consumer req-1 and req-2 before the producer had them, so the consumer's registrations "
        "reached the producer before its prefills finished", run_registered_before_prefill, ("push",),
        "a pull consumer reads the producer's block ids, which exist only once its prefill finished"),
    "engine-suffixed-ids": PushSituation(
        "each engine's API server suffixed the router's request ids with its own 8 hex digits (the producer's "
        "req-0-<8 hex> is the consumer's req-0-<other 8 hex>); req-2 and req-3 were registered before the producer's "
        "prefills",
        run_engine_suffixed_ids, ("push",),
        "a pull consumer addresses the producer's request by remote_request_id, whatever its own id "
        "(test_pair_routed's routed-ids)"),
    "stray-notifications": PushSituation(
        "the producer's transport failed its first poll for notifications, then delivered two malformed registrations "
        "(one undecodable, one without a request id) just before each of the consumer's, in the same batch",
        run_stray_notifications, ("push",), "a pull producer takes in no registration; its consumer posts the "
        "transfers"),
    "shutdown-mid-write": PushSituation(
        "the producer's engine shut down while its WRITE of req-0 into the consumer's blocks was still in flight",
        run_shutdown_mid_write, ("push",), "a pull producer posts no transfer; its consumer's reads are the "
        "consumer's to release"),
    "slow-write-submission": PushSituation(
        f"each WRITE submission on the producer took {SLOW_SUBMISSION_S * 1000:.0f} ms (over the 200 ms at which vLLM "
        f"warns of a slow NIXL submission), and each WRITE then completed some polls later",
        run_slow_write_submission, ("push",), "a pull producer submits no transfer; a consumer's READs that complete "
        "late are test_pair_slow_transport's"),
}


class NotInMode(Exception):
    """The situation does not apply to the pair's transfer mode; the message says why."""


def require_mode(pair: LivePair, situation: PushSituation) -> None:
    """``NotInMode`` where ``situation`` does not apply to the pair's transfer mode."""
    mode = transfer_mode(pair.consumer)
    if mode not in situation.modes:
        raise NotInMode(f"{pair.rig.connector.name} transfers in {mode} mode: {situation.why_not}")
