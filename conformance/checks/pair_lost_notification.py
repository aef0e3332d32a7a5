"""A consumer's notification to the producer is lost: a request that reads nothing must still run as vLLM expects.

A consumer request that loads no external token (it asks for prompt logprobs, so vLLM reads no cached prefix and
computes the prompt itself) still tells the producer it may free its pages, through a notification only. When the
transport cannot deliver it (``send_notif`` raises: the producer's agent is unreachable), nothing about the request
changes: vLLM already computes it, so the consumer must neither report it received nor failed (vLLM's scheduler
tracks neither for a request that never waited for remote KV), and must keep no block. The producer then frees its
pages when their lease runs out, which this situation does not wait for.

It passes when the consumer finishes every request and tries a notification for each within the notification
bound, reports none received or failed and no load-error block, and holds no block once drained. Whether it tried
the notifications is judged apart from the rest (conformance/checks/verdicts.py): a consumer that tries none fails
that verdict only, and what it reported and held is still judged.
"""

from __future__ import annotations

from typing import Any

from ..engine.rig import EngineStandIn, Rig
from .pair_core import NOTIFY_TIMEOUT_S, PairFailure, drained, open_pair, raise_if_leaked
from .pair_transport import wrap_transport
from .roundtrip import ROUNDTRIP_SCENARIOS, scenario_prompts
from .verdicts import Verdicts

HEARTBEAT_PREFIX = b"HB:"  # NIXL's lease-extending messages, delivered as usual here


class UnreachableProducerError(RuntimeError):
    """What the transport raises for a notification it cannot deliver."""


class LosingNotifications:
    """Stands in for the consumer's transport: forwards everything, but every notification but a heartbeat raises."""

    def __init__(self, real: Any):  # real: the connector's NIXL agent
        self._real = real
        self.lost = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def send_notif(self, agent_name: str, notif_msg: bytes | str = b"", *args: Any, **kwargs: Any) -> None:
        message = notif_msg.encode() if isinstance(notif_msg, str) else notif_msg
        if message.startswith(HEARTBEAT_PREFIX):
            self._real.send_notif(agent_name, notif_msg, *args, **kwargs)
            return
        self.lost += 1
        raise UnreachableProducerError(f"kvconform: the notification {message!r} to {agent_name} was lost")


def install_losing_notifications(side: EngineStandIn) -> LosingNotifications:
    """Put ``LosingNotifications`` where the side's worker connector keeps its transport (``TRANSPORT_PATHS``)."""
    return wrap_transport(side, LosingNotifications, "no notification can be lost")


def run_pair_lost_notification(rig: Rig) -> int:
    """The consumer's requests read nothing and their notifications are lost; returns how many were lost."""
    stored, _ = scenario_prompts(ROUNDTRIP_SCENARIOS["multi"], rig.block_size)
    name = rig.connector.name
    doc = ("the consumer's requests read nothing (they asked for prompt logprobs) and the notification telling the "
           "producer so could not be sent (send_notif raised)")
    with open_pair(rig, stored) as pair, Verdicts() as verdicts:
        losing = install_losing_notifications(pair.consumer)
        pair.add_consumer_requests(stored, prompt_logprobs=1)
        with verdicts.judge() as consumer_drained:
            pair.step_until(lambda: drained(pair.consumer),
                            f"{name}: the consumer's requests read nothing (they asked for prompt logprobs); the "
                            f"consumer did not finish them", roles=("consumer",), timeout_s=NOTIFY_TIMEOUT_S)
        if consumer_drained.held:  # the notification goes once the consumer's handshake with the producer is done
            with verdicts.judge():
                pair.step_until(lambda: losing.lost >= len(stored),
                                lambda: f"{name}: the consumer's requests read nothing (they asked for prompt "
                                        f"logprobs); the consumer did not try to notify the producer for each "
                                        f"({losing.lost} notification(s) tried): it must notify even when it reads "
                                        f"nothing (a notification-only read), or the producer holds the pages until "
                                        f"their lease ends", roles=("consumer",), timeout_s=NOTIFY_TIMEOUT_S)
        log = pair.logs["consumer"]
        with verdicts.judge():
            if log.failed_requests or log.invalid_blocks or log.received:
                raise PairFailure(f"{name}: {doc}, yet it reported {sorted(log.received)} received, "
                                  f"{sorted(log.failed_requests)} failed (failed_recving) and load-error block(s) "
                                  f"{sorted(log.invalid_blocks)}: vLLM computes these requests itself and waits for "
                                  f"no transfer of theirs")
        if consumer_drained.held:  # a consumer still running its requests holds their blocks
            with verdicts.judge():
                raise_if_leaked(pair, f"{name}: {doc}; ", roles=("consumer",))
    return losing.lost
