"""Push pairs in which one side drops a request the other still counts on: a consumer that aborts a request before its
scheduler ever schedules it, and a producer whose chunked prefill is aborted while the consumer's registration for it
waits.

A push consumer registers its blocks with the producer (a PUSH_REG notification) only once its scheduler allocated
them; a request the decode engine drops before that (its serving layer rejects it, a router cancels it at once:
``consumer-aborted-unscheduled``) has registered nothing, yet the producer prefills it and keeps its blocks for a
WRITE. vLLM's push scheduler then queues an empty receive "so the worker emits a notif that lets P free them"
(``request_finished``). It passes when the consumer sends no registration for it and no WRITE is prepared for it,
never reports it received, finishes the requests beside it (the bytes in place when reported, ``pair_core.py``'s
witness), the producer releases its blocks on the consumer's word within the notification bound (never by a lease's
expiry), and every block is back in each side's free pool.

A push producer WRITEs a request only once its prefill finished. A consumer registered before that (the router sent it
the decode request at once, ``pair_push.py``'s ``registered-before-prefill``) waits with its blocks registered; the
producer's prefill is then aborted between two chunks (``producer-partial-prefill-aborted``; its engine computes one
block per step, ``ChunkedPrefillRig``). It passes when the producer keeps none of that request's blocks for a
consumer, prepares no WRITE for it, the consumer's registered blocks keep their bytes and it never reports it
received, the request registered beside it completes, and once the router cancels the decode request too, the
consumer releases it and both sides drain with every block free.

Each judgement stands apart (``verdicts.py``), so a pinned finding on one hides no other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ..engine.scheduler_outputs import ReturnedOutputs
from ..engine.slots import token_slot_bytes
from .pair_core import (
    NOTIFY_TIMEOUT_S,
    PRODUCER_REQUEST_PARAMS,
    CompletionWitness,
    LivePair,
    PairFailure,
    abort,
    add_request,
    drained,
    open_pair,
    raise_if_expired,
    raise_if_failed_loads,
    raise_if_leaked,
)
from .pair_prefill_abort import ChunkedPrefillRig
from .pair_push import (
    SITUATION_TIMEOUT_S,
    NotificationCounter,
    PushSituation,
    count_notifications,
    hand_over,
    numbered_prompts,
    require_mode,
    router_params,
)
from .pair_transport import wrap_transport
from .pair_write_faults import split_registration
from .verdicts import Verdicts

if TYPE_CHECKING:
    from ..engine.rig import Rig
    from .roundtrip import RoundTripResult

ROLES = ("consumer", "producer")


class WriteLedger:
    """Stands in for the producer's transport and lists, in order, the consumer request each WRITE it prepares is for
    (the completion notification the WRITE carries: ``<consumer request id>:<producer world size>``)."""

    def __init__(self, real: Any):  # real: the connector's NIXL agent
        self._real = real
        self.targets: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def make_prepped_xfer(self, *args: Any, **kwargs: Any) -> Any:
        message = kwargs.get("notif_msg", args[5] if len(args) > 5 else b"")
        if isinstance(message, bytes):
            self.targets.append(message.decode(errors="replace").rsplit(":", 1)[0])
        return self._real.make_prepped_xfer(*args, **kwargs)


def ledger_of_writes(side: Any) -> WriteLedger:
    """Put a ``WriteLedger`` where the producer's worker connector keeps its transport."""
    return wrap_transport(side, WriteLedger, "it cannot tell which consumer request a WRITE is for", PairFailure)


def registrations(sent: NotificationCounter) -> dict[str, dict[str, Any]]:
    """The registrations among the notifications a consumer sent: request id -> the registration's payload."""
    found = (split_registration(message) for message in sent.messages)
    return {str(split[1]["request_id"]): split[1] for split in found if split is not None}


def raise_if_touched(pair: LivePair, doc: str, request_id: str, sent: NotificationCounter, writes: WriteLedger,
                     registered: bool) -> None:
    """``PairFailure`` where anything crossed for ``request_id``: a registration the consumer sent (unless it was
    ``registered`` before it was dropped), a WRITE the producer prepared, a receive the consumer reported."""
    name = pair.rig.connector.name
    log = pair.logs["consumer"]
    payload = registrations(sent).get(request_id)
    if payload is not None and not registered:
        raise PairFailure(f"{name}: {doc}; yet the consumer sent the producer a registration (PUSH_REG notification) "
                          f"for {request_id}, registering its blocks {payload.get('local_block_ids')!r}")
    if request_id in writes.targets:
        raise PairFailure(f"{name}: {doc}; yet the producer prepared a WRITE for {request_id} (WRITE "
                          f"{writes.targets.index(request_id) + 1} of {len(writes.targets)}, its completion "
                          f"notification naming {request_id}): nothing computed for it may reach the consumer")
    if request_id in log.received:
        raise PairFailure(f"{name}: {doc}; yet the consumer reported {request_id} received (finished_recving) at its "
                          f"step {log.received[request_id]}: no producer finished a prefill for it")


def raise_if_unfinished(pair: LivePair, doc: str, wanted: list[str], witness: CompletionWitness) -> None:
    """``PairFailure`` where a request of ``wanted`` was never reported received, or its bytes were not in place
    when it was, or a side reported a failed load or released a request on a lease's expiry."""
    log = pair.logs["consumer"]
    unreceived = sorted(set(wanted) - set(log.received))
    if unreceived:
        raise PairFailure(f"{pair.rig.connector.name}: {doc}; the consumer never reported {', '.join(unreceived)} "
                          f"received (finished_recving), the requests beside the dropped one")
    raise_if_failed_loads(pair)
    raise_if_expired(pair)
    if witness.wrong:
        raise PairFailure(witness.wrong[0])


def witness_of(pair: LivePair, dropped: str) -> CompletionWitness:
    """A ``CompletionWitness`` for every request the consumer reports received but ``dropped`` (which has no
    producer blocks to compare with; ``raise_if_touched`` judges its receive)."""
    witness = CompletionWitness(pair)

    def heard(request_id: str, step: int) -> None:
        if request_id != dropped:
            witness(request_id, step)

    pair.logs["consumer"].on_received = heard
    return witness


def raise_if_leaked_where_drained(pair: LivePair, doc: str) -> None:
    """``raise_if_leaked`` on each side that drained (a side that did not already failed for it)."""
    drained_roles = tuple(role for role in ROLES if drained(pair.logs[role].side))
    if drained_roles:
        raise_if_leaked(pair, f"{pair.rig.connector.name}: {doc}; ", roles=drained_roles)


def run_consumer_aborted_unscheduled(rig: Rig, situation: PushSituation) -> RoundTripResult | None:
    """req-0 handed over as the round-trip does (so the sides have shaken hands); then the router sends the consumer
    req-1 and req-2 before the producer's prefills, and req-2 is aborted before the consumer's first step; the
    producer prefills both."""
    handed = numbered_prompts(rig, 0, (3,))
    early = numbered_prompts(rig, 1, (2, 4))
    dropped = "req-2"
    name, doc = rig.connector.name, situation.doc
    with open_pair(rig, handed) as pair, Verdicts() as verdicts:
        require_mode(pair, situation)
        witness = witness_of(pair, dropped)
        sent, writes = count_notifications(pair.consumer), ledger_of_writes(pair.producer)
        hand_over(pair, {rid: rid for rid in handed}, handed)
        for request_id, prompt in early.items():
            pair.producer_ids[request_id] = request_id
            add_request(pair.consumer, request_id, prompt, router_params(pair.params["req-0"], request_id))
        abort(pair.consumer, [dropped])  # the serving layer's abort_immediately: never in a batch
        for request_id, prompt in early.items():
            add_request(pair.producer, request_id, prompt, PRODUCER_REQUEST_PARAMS)
        with verdicts.judge() as consumer_drained:
            pair.step_until(lambda: drained(pair.consumer), f"{name}: {doc}; the consumer did not finish req-0 and "
                            f"req-1 (the producer's WRITEs) and drop {dropped}", timeout_s=SITUATION_TIMEOUT_S)
        # the consumer's word that frees the producer leaves on a consumer step; one that did not drain is not stepped
        with verdicts.judge():
            pair.step_until(lambda: drained(pair.producer),
                            f"{name}: {doc}; the producer did not release its pages of {dropped} (finished_sending): "
                            f"the consumer must tell it that no one will read them,",
                            roles=ROLES if consumer_drained.held else ("producer",), timeout_s=NOTIFY_TIMEOUT_S)
        with verdicts.judge():
            raise_if_touched(pair, doc, dropped, sent, writes, registered=False)
        with verdicts.judge():
            raise_if_unfinished(pair, doc, ["req-0", "req-1"], witness)
        with verdicts.judge():
            raise_if_leaked_where_drained(pair, doc)
    return None


def consumer_bytes(pair: LivePair, blocks: list[int]) -> dict[str, torch.Tensor]:
    """A copy of the bytes of every token slot of the consumer's ``blocks``, per layer."""
    size = pair.rig.block_size
    return {layer: token_slot_bytes(view, blocks, len(blocks) * size, size).clone()
            for layer, view in pair.consumer.caches.items()}


def raise_if_overwritten(pair: LivePair, doc: str, request_id: str, blocks: list[int],
                         before: dict[str, torch.Tensor]) -> None:
    """``PairFailure`` where the consumer's ``blocks`` (those it registered for ``request_id``) no longer hold the
    bytes in ``before``."""
    for layer, now in consumer_bytes(pair, blocks).items():
        changed = (now != before[layer]).any(dim=1)
        if bool(changed.any()):
            raise PairFailure(f"{pair.rig.connector.name}: {doc}; yet {int(changed.sum())} of {len(changed)} token "
                              f"slot(s) of the blocks the consumer registered for {request_id} ({blocks}) changed "
                              f"(layer {layer}, first token {int(changed.nonzero()[0])}): a WRITE landed in them")


def _abort_after_first_chunk(pair: LivePair, request_id: str, done: Callable[[], bool]) -> None:
    """Step the producer until ``request_id``'s first chunk ran, then abort it; ``done``: it finished first."""
    requests = pair.producer.scheduler.scheduler.requests
    pair.step_until(lambda: requests[request_id].num_computed_tokens > 0,
                    f"{pair.rig.connector.name}'s producer did not schedule the first chunk of {request_id}",
                    roles=("producer",), timeout_s=SITUATION_TIMEOUT_S)
    assert not done(), f"the harness meant {request_id} to be aborted mid-prefill, but it finished first"
    abort(pair.producer, [request_id])


def run_producer_partial_prefill_aborted(rig: Rig, situation: PushSituation) -> RoundTripResult | None:
    """req-0 handed over as the round-trip does; req-1 and req-2 registered on the consumer before the producer has
    them; the producer's prefill of req-1 is aborted after its first chunk, then it prefills req-2; the router
    cancels req-1 on the consumer last."""
    handed = numbered_prompts(rig, 0, (2,))
    early = numbered_prompts(rig, 1, (3, 2))
    dropped = "req-1"
    name, doc = rig.connector.name, situation.doc
    with open_pair(rig, handed) as pair, Verdicts() as verdicts:
        require_mode(pair, situation)
        witness = witness_of(pair, dropped)
        sent, taken = count_notifications(pair.consumer), count_notifications(pair.producer)
        writes = ledger_of_writes(pair.producer)
        hand_over(pair, {rid: rid for rid in handed}, handed)
        for request_id, prompt in early.items():
            pair.producer_ids[request_id] = request_id
            add_request(pair.consumer, request_id, prompt, router_params(pair.params["req-0"], request_id))
        pair.step_until(lambda: set(registrations(sent)) >= set(early), f"{name}: the router sent the consumer "
                        f"{', '.join(early)} before the producer had them; the consumer did not register each "
                        f"(PUSH_REG notification)", timeout_s=SITUATION_TIMEOUT_S)
        pair.step_until(lambda: taken.received >= sent.sent, f"{name}: the consumer sent {sent.sent} notification(s); "
                        f"the producer's connector did not take them in", roles=("producer",),
                        timeout_s=SITUATION_TIMEOUT_S)
        registered_blocks = list(pair.consumer.scheduler.scheduler.kv_cache_manager.get_block_ids(dropped)[0])
        before = consumer_bytes(pair, registered_blocks)
        finished = ReturnedOutputs(pair.producer.scheduler)
        add_request(pair.producer, dropped, early[dropped], PRODUCER_REQUEST_PARAMS)
        _abort_after_first_chunk(pair, dropped, lambda: dropped in finished.finish_reasons)
        with verdicts.judge():
            if pair.producer.scheduler.answers.kept_blocks.get(dropped):
                raise PairFailure(f"{name}: {doc}; yet its request_finished kept the blocks of {dropped} for a "
                                  f"consumer (returned True): an aborted prefill has nothing for a consumer to read")
        add_request(pair.producer, "req-2", early["req-2"], PRODUCER_REQUEST_PARAMS)
        with verdicts.judge():
            pair.step_until(lambda: drained(pair.producer) and {"req-0", "req-2"} <= set(pair.logs["consumer"]
                                                                                          .received),
                            f"{name}: {doc}; the producer did not release its pages, or the consumer did not report "
                            f"req-0 and req-2 received,", timeout_s=SITUATION_TIMEOUT_S)
        with verdicts.judge():
            raise_if_touched(pair, doc, dropped, sent, writes, registered=True)
        with verdicts.judge():
            raise_if_overwritten(pair, doc, dropped, registered_blocks, before)
        abort(pair.consumer, [dropped])  # the router cancels the decode request of the prefill it cancelled
        with verdicts.judge():
            pair.step_until(lambda: drained(pair.consumer) and drained(pair.producer),
                            f"{name}: {doc}; the router then cancelled {dropped} on the consumer, which did not "
                            f"release it (its registered blocks wait for a WRITE the producer will never post; vLLM's "
                            f"scheduler frees them only once the connector reports it finished_recving or "
                            f"failed_recving)", timeout_s=NOTIFY_TIMEOUT_S)
        with verdicts.judge():
            raise_if_unfinished(pair, doc, ["req-0", "req-2"], witness)
        with verdicts.judge():
            raise_if_leaked_where_drained(pair, doc)
    return None


PUSH_ABORTS: dict[str, PushSituation] = {
    "consumer-aborted-unscheduled": PushSituation(
        "the router sent the consumer req-1 and req-2 before the producer's prefills, and the consumer aborted req-2 "
        "before its scheduler ever scheduled it; the producer prefilled both",
        run_consumer_aborted_unscheduled, ("push",),
        "a pull consumer's unscheduled abort is test_pair_notify_only's aborted-unscheduled"),
    "producer-partial-prefill-aborted": PushSituation(
        "the consumer registered req-1 before the producer's prefill, which was aborted after its first chunk",
        run_producer_partial_prefill_aborted, ("push",),
        "a pull producer's aborted prefill is test_pair_prefill_abort's", rig_class=ChunkedPrefillRig),
}
