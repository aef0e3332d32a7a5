"""Write faults for push pairs: the producer's WRITE fails, or the consumer's registration does.

A push pair's producer WRITEs into the blocks the consumer registers with it, so its transfer fails on the side that
makes it: the producer's WRITE cannot be posted (or its handle not released), the consumer's registration cannot be
sent, or it advertises a side channel the producer cannot reach. The consumer's answer is judged as a failed read's
is (``pair_failed_load.py``), within a short bound (``PUSH_FAULTS``), its registration watchdog shortened to fire
inside it (``WatchdogRig``). Whether the fault was staged at all is judged apart from whether the consumer drained
(conformance/checks/verdicts.py): a producer that posts no transfer fails that verdict even where the consumer's
known hang (finding 23) is pinned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from ..engine.prompts import request_prompt
from ..engine.side_channel import reserved_port
from .load_failure import LoadFailureAnswer, LoadFailureViolation, PolicyRig
from .pair_core import open_pair
from .pair_failed_load import consumer_drains, judge_failed_load
from .pair_transport import (
    POSTING_ROLE,
    FaultyTransport,
    InjectedTransportError,
    NoTransportHook,
    PairFault,
    UnreleasableTransport,
    install_transport,
    transfer_mode,
)
from .verdicts import Verdicts

if TYPE_CHECKING:
    from vllm.config import VllmConfig

    from ..engine.rig import Rig


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
    within the bound (``WatchdogRig``). Whether the fault was staged at all (the transport acted on a transfer) is
    judged apart from whether the consumer drained (conformance/checks/verdicts.py); the answer only when both held."""
    rig = WatchdogRig.of(rig, policy)
    stored = {"req-0": request_prompt(0, 4 * rig.block_size + 5)}
    name, fault = rig.connector.name, push_fault.fault
    with Verdicts() as verdicts:
        with reserved_port() as dead_port, open_pair(rig, stored) as pair:
            mode = transfer_mode(pair.consumer)
            if mode not in WRITE_FAULT_MODES:
                raise NoTransportHook(f"{name} transfers in {mode} mode: its {POSTING_ROLE.get(mode)} posts the "
                                      f"transfers, which the read faults (test_pair_load_failure) act on")
            side = pair.logs[push_fault.role].side
            transport = install_transport(side, fault, waiting=pair.consumer, transport=push_fault.transport)
            if isinstance(transport, RedirectedRegistrations):
                transport.dead_port = dead_port
            with verdicts.judge() as consumer_drained:
                consumer_drains(pair, stored, f"{name}: after {fault.doc}, the consumer neither failed nor finished "
                                              f"its request", timeout_s=push_fault.bound_s)
        with verdicts.judge() as staged:
            if not transport.failed:
                raise LoadFailureViolation(f"{name}'s {push_fault.role} posted nothing the fault could act on "
                                           f"({transport.posted} posted): no transfer failure could be staged")
        # a consumer still waiting has loaded nothing to compare, and an unstaged fault failed no transfer
        if consumer_drained.held and staged.held:
            return judge_failed_load(rig, pair, stored, fault, policy)
    raise AssertionError("unreachable: Verdicts raises the failure of a verdict that did not hold")
