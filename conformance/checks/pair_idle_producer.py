"""A producer idle longer than the consumer's ``engine_ttl``: the consumer lets its NIXL state go, and handshakes again.

A NIXL consumer keeps what each producer's handshake gave it (the producer's NIXL agent, the descriptor lists it
reads through) while it reads from that producer. vLLM bounds what it keeps: ``engine_ttl`` (seconds, in
``kv_connector_extra_config``; vLLM's default is an hour) is how long a producer may go unread before the consumer
releases it, which it does at its next handshake with a new producer, sparing a producer a read is still running
from. So a consumer that meets a changing fleet of producers (prefill engines scaled up, down, replaced) holds only
those it still reads from; a request from a released producer handshakes with it again.

Here the consumer's ``engine_ttl`` is ``IDLE_TTL_S``. It reads req-0 from producer A, stays idle for longer than the
TTL, then the router hands it req-1 from producer B (a new engine: the handshake at which A is released), then req-2
from A again. It passes when the consumer removed A's NIXL agent (``remove_remote_agent`` on its transport) by the
time it received req-1, added it again for req-2 (a second handshake) and kept B's through that handshake (B read
moments before, well within the TTL); every request's bytes are in place when the consumer reports it received
(``pair_core.py``'s witness), nothing failed or expired, and all three engines drain with no block held.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..engine.prompts import request_prompt
from ..engine.rig import Rig
from ..engine.scheduler_outputs import ReturnedOutputs
from .pair_core import (
    DRAIN_TIMEOUT_S,
    PRODUCER_REQUEST_PARAMS,
    STEP_PAUSE_S,
    CompletionWitness,
    ConsumerDoesNotRead,
    LivePair,
    PairFailure,
    SideLog,
    add_request,
    drained,
    open_pair,
    raise_if_expired,
    raise_if_failed_loads,
    raise_if_leaked,
    serving_side,
)
from .pair_transport import READ_FAULT_MODES, transfer_mode, wrap_transport

if TYPE_CHECKING:
    from vllm.config import VllmConfig

# The extra_config key of vLLM's NIXL worker for how long a remote engine may go unused before it is released.
ENGINE_TTL_KEY = "engine_ttl"
IDLE_TTL_S = 3.0  # the consumer's engine_ttl here (vLLM's default: 3600 s)
IDLE_MARGIN_S = 1.0  # how much longer than the TTL the consumer stays idle
SECOND_PRODUCER = "producer-b"  # its log's role among the pair's
SECOND_FILL_SEED = 5678  # producer B's caches (A's: open_pair's) hold other bytes, so a read from the wrong one shows
FROM_A, FROM_B = "producer A", "producer B"
FIRST_READ, NEW_PRODUCER_READ, RETURNING_READ = "req-0", "req-1", "req-2"


@dataclass
class IdleTtlRig(Rig):
    """A Rig whose engines release a remote engine unused for ``IDLE_TTL_S`` seconds."""

    def vllm_config(self, role: str) -> VllmConfig:
        config = super().vllm_config(role)
        transfer = config.kv_transfer_config
        assert transfer is not None
        transfer.kv_connector_extra_config[ENGINE_TTL_KEY] = IDLE_TTL_S
        return config


class AgentLedger:
    """Stands in for the consumer's transport: forwards everything, and notes every remote NIXL agent the consumer
    adds (one per handshake with a producer rank) and removes (when it releases a producer), with when it removed
    each (``time.monotonic()``)."""

    def __init__(self, real: Any):
        self._real = real
        self.added: list[str] = []
        self.removed: dict[str, float] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def add_remote_agent(self, *args: Any, **kwargs: Any) -> Any:
        agent = self._real.add_remote_agent(*args, **kwargs)
        self.added.append(str(agent))
        return agent

    def remove_remote_agent(self, agent: Any, *args: Any, **kwargs: Any) -> Any:
        self.removed[str(agent)] = time.monotonic()
        return self._real.remove_remote_agent(agent, *args, **kwargs)


@dataclass
class IdleProducerResult:
    released_after_s: float  # how long producer A had been idle when the consumer handshook producer B
    agents_of_a: list[str] = field(default_factory=list)


@contextmanager
def _second_producer(pair: LivePair, stored: dict[str, list[int]]) -> Iterator[LivePair]:
    """Producer B, serving its own side channel, with ``stored`` prefilled: a pair of B and ``pair``'s consumer that
    shares ``pair``'s logs (B's under ``SECOND_PRODUCER``), so stepping either steps all three engines."""
    rig = pair.rig
    producer_role, _ = rig.roles()
    producer = serving_side(rig, producer_role, fill_seed=SECOND_FILL_SEED)
    try:
        handed_over = ReturnedOutputs(producer.scheduler)
        for request_id, prompt in stored.items():
            add_request(producer, request_id, prompt, PRODUCER_REQUEST_PARAMS)
        pair.logs[SECOND_PRODUCER] = SideLog(producer)
        other = LivePair(rig, producer, pair.consumer, handed_over.params, pair.logs)
        other.step_until(lambda: set(handed_over.params) >= set(stored),
                         f"{rig.connector.name}'s second producer did not return kv_transfer_params for "
                         f"{', '.join(stored)}", roles=(SECOND_PRODUCER,))
        yield other
    finally:
        producer.close()


def _idle(pair: LivePair, seconds: float) -> None:
    """Step every engine of the pair, paced, for ``seconds``, the consumer holding no request."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for log in pair.logs.values():
            log.side.scheduler.step(log)
        time.sleep(STEP_PAUSE_S)


def _until_received(pair: LivePair, request_id: str, what: str) -> None:
    """Step all three engines until the consumer, having reported ``request_id`` received, holds no request."""
    pair.step_until(lambda: request_id in pair.logs["consumer"].received and drained(pair.consumer), what,
                    roles=tuple(pair.logs), timeout_s=DRAIN_TIMEOUT_S)


def run_pair_idle_producer(rig: IdleTtlRig) -> IdleProducerResult:
    """req-0 from producer A, an idle spell past the consumer's engine_ttl, req-1 from producer B, req-2 from A."""
    block_size, name = rig.block_size, rig.connector.name
    from_a = {FIRST_READ: request_prompt(0, 3 * block_size + 5), RETURNING_READ: request_prompt(2, 4 * block_size + 3)}
    from_b = {NEW_PRODUCER_READ: request_prompt(1, 3 * block_size + 7)}
    with open_pair(rig, from_a) as pair:
        if transfer_mode(pair.consumer) not in READ_FAULT_MODES:
            raise ConsumerDoesNotRead(
                f"{name} transfers in {transfer_mode(pair.consumer)} mode (the producer WRITEs): this situation is "
                f"built on a reading consumer's handshakes with its producers, which engine_ttl bounds")
        ledger = wrap_transport(pair.consumer, AgentLedger, "kvconform cannot see which producers' NIXL agents the "
                                                            "consumer holds")
        with _second_producer(pair, from_b) as other:
            witnesses = {FIRST_READ: CompletionWitness(pair), RETURNING_READ: CompletionWitness(pair),
                         NEW_PRODUCER_READ: CompletionWitness(other)}
            pair.logs["consumer"].on_received = lambda rid, step: witnesses[rid](rid, step)
            consumer = f"{name}'s consumer (engine_ttl {IDLE_TTL_S:g} s)"

            pair.add_consumer_requests({FIRST_READ: from_a[FIRST_READ]})
            _until_received(pair, FIRST_READ, f"{consumer} did not receive {FIRST_READ} from {FROM_A} and drain")
            agents_of_a = list(ledger.added)
            assert agents_of_a, (f"the harness meant {consumer} to handshake {FROM_A} for {FIRST_READ}, but its "
                                 f"transport saw no add_remote_agent")
            last_read = time.monotonic()
            _idle(pair, IDLE_TTL_S + IDLE_MARGIN_S)

            b_asked = time.monotonic()  # B's read is issued after this: vLLM stamps B active no earlier
            other.add_consumer_requests(from_b)
            idle_s = b_asked - last_read
            _until_received(pair, NEW_PRODUCER_READ, f"{consumer} did not receive {NEW_PRODUCER_READ} from "
                                                     f"{FROM_B} and drain")
            agents_of_b = [agent for agent in ledger.added if agent not in agents_of_a]
            kept = [agent for agent in agents_of_a if agent not in ledger.removed]
            if kept:
                raise PairFailure(
                    f"{consumer} read {FIRST_READ} from {FROM_A}, then no request for {idle_s:.1f} s; when the "
                    f"router handed it {NEW_PRODUCER_READ} from {FROM_B} and it handshook B, it still held {FROM_A}'s "
                    f"NIXL agent(s) {kept} (no remove_remote_agent on its transport): a producer idle longer than "
                    f"engine_ttl is never released, so a consumer meeting a changing fleet of producers keeps every "
                    f"one it ever read from")

            pair.add_consumer_requests({RETURNING_READ: from_a[RETURNING_READ]})
            pair.step_until(lambda: all(drained(log.side) for log in pair.logs.values()),
                            f"{name}: after releasing {FROM_A}, the consumer did not finish {RETURNING_READ} from A "
                            f"again, or a producer did not release its pages (finished_sending),",
                            roles=tuple(pair.logs), timeout_s=DRAIN_TIMEOUT_S)
            once = [agent for agent in agents_of_a if ledger.added.count(agent) < 2]
            if once:
                raise PairFailure(
                    f"{consumer} released {FROM_A}'s NIXL agent(s) after {idle_s:.1f} s idle, then read "
                    f"{RETURNING_READ} from A without handshaking it again (agent(s) {once} added once, "
                    f"add_remote_agent calls: {ledger.added})")
            # vLLM may release B only once it has been idle engine_ttl since its read was issued, after b_asked
            early = {agent: ledger.removed[agent] - b_asked for agent in agents_of_b
                     if ledger.removed.get(agent, b_asked + IDLE_TTL_S) - b_asked < IDLE_TTL_S}
            if early:
                after = ", ".join(f"{agent} {seconds:.1f} s" for agent, seconds in early.items())
                raise PairFailure(
                    f"{consumer} received {NEW_PRODUCER_READ} from {FROM_B}; when it handshook {FROM_A} again for "
                    f"{RETURNING_READ} it released B's NIXL agent(s) (remove_remote_agent) within engine_ttl of that "
                    f"request ({after} after the router handed it over): a producer still in use is let go, and "
                    f"its next request waits for a handshake")
            _judge(pair, witnesses, set(from_a) | set(from_b))
    return IdleProducerResult(released_after_s=idle_s, agents_of_a=agents_of_a)


def _judge(pair: LivePair, witnesses: dict[str, CompletionWitness], requests: set[str]) -> None:
    """Nothing failed or expired; each request was received, its bytes in place then; no engine holds a block."""
    name = pair.rig.connector.name
    raise_if_failed_loads(pair)
    raise_if_expired(pair)
    for witness in witnesses.values():
        if witness.wrong:
            raise PairFailure(witness.wrong[0])
    missing = sorted(requests - set(pair.logs["consumer"].received))
    if missing:
        raise PairFailure(f"{name}: the consumer never reported {', '.join(missing)} received (finished_recving)")
    raise_if_leaked(pair, f"{name}: ", roles=tuple(pair.logs))
