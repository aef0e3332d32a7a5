"""The round-trip for connectors that only work as a pair: a live producer serves, a consumer pulls.

NixlConnector-style P/D transfer differs from a store-then-load connector in
three ways, and this module plays each the way vLLM's engine does:

- the producer must stay alive while the consumer loads (the consumer reads
  the producer's pages), so both sides are stepped in turns until each drains;
- the producer's scheduler side hands the consumer its ``kv_transfer_params``
  (engine id, side-channel host and port, block ids) when a request finishes;
  the consumer's request carries them in ``SamplingParams.extra_args``, as a
  P/D proxy passes them on;
- the producer's scheduler side serves a handshake that the engine core
  publishes from the worker side (``set_xfer_handshake_metadata_pp_aware``),
  on a port that cannot be taken from under it (``side_channel.py``).

A pair passes only when it completes the way vLLM relies on: the consumer's
bytes are right at the step it first reports ``finished_recving`` (the next
step computes on them), not only after draining; and each side releases a
request because the other side said so, not because a lease ran out. The
producer's lease (``kv_lease_duration`` in its profile) is set well above the
drain bound, and expiry is also recognised from the connector's own stats, so
a finish that is really a timeout fails whatever the lease.

The byte checks after draining are the store-then-load round-trip's own (``verify_roundtrip``).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..engine.affinity import restore_harness_affinity
from ..engine.check_failure import CheckFailure
from ..engine.distributed import single_rank_parallel_state
from ..engine.rig import EngineStandIn, Rig
from ..engine.side_channel import HOST, HandshakeFailure, PortTaken, reserved_port, serve_handshake
from ..engine.slots import token_slot_bytes
from ..vllm_build import api as vllm_api
from .roundtrip import (
    RoundTripResult,
    RoundTripScenario,
    scenario_prompts,
    verify_roundtrip,
)

# What a P/D proxy puts on the prefill request: "after this prompt, a remote engine decodes".
PRODUCER_REQUEST_PARAMS = {"do_remote_decode": True}
# The env vars vLLM's NIXL scheduler side reads for the side channel it listens on.
SIDE_CHANNEL_HOST_VAR = "VLLM_NIXL_SIDE_CHANNEL_HOST"
SIDE_CHANNEL_PORT_VAR = "VLLM_NIXL_SIDE_CHANNEL_PORT"
# Transfers run on the connectors' own threads: the sides are stepped until this many seconds pass.
# A producer's lease must be well above it (see connectors.yaml), or a finish by expiry fits inside it.
DRAIN_TIMEOUT_S = 30.0
STEP_PAUSE_S = 0.005
PORT_ATTEMPTS = 3  # fresh side-channel ports tried when another process bound the reserved one first
# Counters in a connector's get_kv_connector_stats() that count requests released because a lease
# ran out, not because the other side said it was done (NIXL: "Releasing expired KV blocks ...").
EXPIRY_COUNTERS = ("num_kv_expired_reqs",)


def pair_inapplicable(scenario: RoundTripScenario) -> str | None:
    """Why a scenario does not apply to a P/D pair, or None.

    A pair hands over one request, not a prefix: the proxy sends the same prompt to both sides, and
    NIXL's consumer claims its whole prompt from the producer's params (its worker asserts it needs no
    more blocks than the producer sent). A consumer prompt that extends the stored one is outside that
    contract.
    """
    if scenario.extend:
        return (f"scenario {scenario.name}: a P/D pair transfers one request, so the consumer's prompt is the "
                f"producer's; a prompt that extends it is not part of the pair's contract")
    return None


class PairFailure(CheckFailure):
    """The pair did not complete a transfer; the message says which side stalled."""


@contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class TransferParamsLog:
    """The ``kv_transfer_params`` a scheduler returns with each finished request's output."""

    def __init__(self, side: EngineStandIn):
        self.params: dict[str, dict] = {}
        scheduler = side.scheduler.scheduler
        update = scheduler.update_from_output

        def recorded(scheduler_output, runner_output):
            outputs = update(scheduler_output, runner_output)
            for engine_outputs in outputs.values():
                for output in engine_outputs.outputs:
                    if output.kv_transfer_params is not None:
                        self.params[output.request_id] = output.kv_transfer_params
            return outputs

        scheduler.update_from_output = recorded


def add_request(side: EngineStandIn, request_id: str, prompt: list[int], kv_transfer_params: dict) -> None:
    """A request carrying ``kv_transfer_params`` in its sampling params' ``extra_args``, as vLLM's API server
    passes them through."""
    side.scheduler.add(request_id, prompt, kv_transfer_params=kv_transfer_params)


def publish_handshake(side: EngineStandIn) -> None:
    """What the engine core does after the workers register their caches: the scheduler side serves them."""
    metadata = side.runner.connector.get_handshake_metadata()
    if metadata is not None:
        side.scheduler.connector.set_xfer_handshake_metadata_pp_aware({(0, 0): metadata})


def expired_requests(connector) -> int:
    """Requests this connector released on lease expiry since it was last asked (its stats reset, as vLLM's
    runner has them each step)."""
    stats = connector.get_kv_connector_stats() if hasattr(connector, "get_kv_connector_stats") else None
    data = getattr(stats, "data", None) or {}
    return sum(len(data.get(counter) or ()) for counter in EXPIRY_COUNTERS)


@dataclass
class SideLog:
    """Stands between a side's scheduler and its worker: what the side told vLLM, step by step.

    Each step's ``KVConnectorOutput`` (received, failed receives, blocks that failed to load)
    and the connector's stats, which vLLM's runner collects every step. It also keeps the
    block ids of requests that hold blocks while waiting for remote KV (the scheduler driver
    records only scheduled requests).
    """

    side: EngineStandIn
    steps: int = 0
    received: dict[str, int] = field(default_factory=dict)  # request -> step it was first reported received
    failed_requests: set[str] = field(default_factory=set)
    invalid_blocks: set[int] = field(default_factory=set)
    expired: int = 0
    raised: BaseException | None = None
    on_received: Callable[[str, int], None] | None = None

    def _note_block_ids(self) -> None:
        driver = self.side.scheduler
        manager = driver.scheduler.kv_cache_manager
        for request_id in driver.scheduler.requests:
            held = manager.get_block_ids(request_id)
            if held and held[0]:
                driver.block_ids.setdefault(request_id, held)

    def step(self, scheduler_output):
        self._note_block_ids()
        try:
            output = self.side.runner.step(scheduler_output)
        except vllm_api.VllmApiError:
            raise  # kvconform cannot drive this vLLM: not the connector's answer to a fault
        except Exception as exc:
            self.raised = exc
            raise
        self.steps += 1
        failed = set(output.failed_recving or ())
        self.failed_requests |= failed
        self.invalid_blocks |= set(output.invalid_block_ids or ())
        for request_id in sorted(set(output.finished_recving or ()) - failed - set(self.received)):
            self.received[request_id] = self.steps
            if self.on_received is not None:
                self.on_received(request_id, self.steps)
        self.expired += expired_requests(self.side.runner.connector)
        return output


def drained(side: EngineStandIn) -> bool:
    return not side.scheduler.scheduler.has_requests() and not side.scheduler._pending()


@dataclass
class LivePair:
    """A serving producer whose requests finished (their params handed over) and a fresh consumer."""

    rig: Rig
    producer: EngineStandIn
    consumer: EngineStandIn
    params: dict[str, dict]
    logs: dict[str, SideLog]

    def add_consumer_requests(self, prompts: dict[str, list[int]]) -> None:
        for request_id, prompt in prompts.items():
            add_request(self.consumer, request_id, prompt, self.params[request_id])

    def _held(self) -> str:
        """Which requests each side still holds, e.g. ``consumer holds req-0; producer holds nothing``."""
        return "; ".join(f"{role} holds {', '.join(sorted(log.side.scheduler.scheduler.requests)) or 'nothing'}"
                         for role, log in self.logs.items())

    def step_until(self, done: Callable[[], bool], what: str,
                   roles: tuple[str, ...] = ("consumer", "producer")) -> None:
        """Step the sides, consumer first, until ``done``; a ``PairFailure`` saying ``what`` after the drain bound."""
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while not done():
            if time.monotonic() > deadline:
                raise PairFailure(f"{what} within {DRAIN_TIMEOUT_S:.0f} s ({self._held()})")
            for role in roles:
                log = self.logs[role]
                log.side.scheduler.step(log)
            time.sleep(STEP_PAUSE_S)


def _serving_producer(rig: Rig, role: str) -> EngineStandIn:
    """A producer whose handshake is served on a reserved port; a fresh port when another process took it."""
    taken = []
    for _ in range(PORT_ATTEMPTS):
        with reserved_port() as port:
            with _environ({SIDE_CHANNEL_HOST_VAR: HOST, SIDE_CHANNEL_PORT_VAR: str(port)}):
                producer = rig.engine(role, fill_seed=1234)
            try:
                serve_handshake(functools.partial(publish_handshake, producer), port)
                return producer
            except PortTaken as exc:
                taken.append(str(exc))
                producer.close()
    raise HandshakeFailure(f"{rig.connector.name}: the producer's handshake side channel found each of "
                           f"{PORT_ATTEMPTS} reserved ports taken by another process: {'; '.join(taken)}")


@contextmanager
def open_pair(rig: Rig, stored: dict[str, list[int]]) -> Iterator[LivePair]:
    """The producer prefills ``stored`` and keeps its pages; the consumer is built, with no requests yet.

    Both sides stay open (and the one-rank parallel state with them) until the context closes.
    """
    producer_role, consumer_role = rig.roles()
    name = rig.connector.name
    producer = consumer = None
    # each worker side restores the harness thread's affinity once built (affinity.py); this covers the
    # rest of the pair's build
    with single_rank_parallel_state(rig.vllm_config(producer_role)), restore_harness_affinity():
        try:
            producer = _serving_producer(rig, producer_role)
            handed_over = TransferParamsLog(producer)
            for request_id, prompt in stored.items():
                add_request(producer, request_id, prompt, PRODUCER_REQUEST_PARAMS)
            producer_log = SideLog(producer)
            consumer = rig.engine(consumer_role)
            pair = LivePair(rig, producer, consumer, handed_over.params,
                            {"consumer": SideLog(consumer), "producer": producer_log})
            pair.step_until(lambda: set(handed_over.params) >= set(stored),
                            f"{name}'s producer did not return kv_transfer_params for every request",
                            roles=("producer",))
            yield pair
        finally:
            for side in (consumer, producer):
                if side is not None:
                    side.close()


@dataclass
class CompletionWitness:
    """Compares a request's bytes the moment the consumer first reports it received.

    vLLM schedules the request's compute on the next step, so its KV must be in place
    then; a consumer that reports a read done when it posts it fails here even when the
    bytes arrive a few steps later.
    """

    pair: LivePair
    wrong: list[str] = field(default_factory=list)

    def __call__(self, request_id: str, step: int) -> None:
        rig, producer, consumer = self.pair.rig, self.pair.producer, self.pair.consumer
        tokens = consumer.scheduler.external_tokens(request_id)
        consumer_blocks = consumer.scheduler.scheduler.kv_cache_manager.get_block_ids(request_id)
        if tokens <= 0 or not consumer_blocks or not consumer_blocks[0]:
            return  # no claim: verify_roundtrip reports it
        block_size = rig.shape.block_size
        for name, view in consumer.caches.items():
            producer_blocks = producer.scheduler.block_ids[request_id][0]
            saved = token_slot_bytes(producer.caches[name], producer_blocks, tokens, block_size)
            now = token_slot_bytes(view, consumer_blocks[0], tokens, block_size)
            same = (saved.to(now.device) == now).all(dim=1)
            if not bool(same.all()):
                self.wrong.append(
                    f"{rig.connector.name}: the consumer reported {request_id} received (finished_recving) at its "
                    f"step {step}, when vLLM schedules its compute, but token {int((~same).nonzero()[0])} of "
                    f"{tokens} (layer {name}) did not yet hold the producer's bytes ({int((~same).sum())} token "
                    f"slot(s) wrong): it reported the read done before it completed")
                return


def check_completion(pair: LivePair, witness: CompletionWitness) -> None:
    """A healthy pair: no failed receive, no finish by expiry, the bytes in place when reported."""
    name = pair.rig.connector.name
    consumer = pair.logs["consumer"]
    if consumer.failed_requests or consumer.invalid_blocks:
        raise PairFailure(f"{name}: nothing was injected, yet the consumer reported failed receive(s) "
                          f"{sorted(consumer.failed_requests)} and load-error block(s) "
                          f"{sorted(consumer.invalid_blocks)} "
                          f"(a failed side-channel handshake also ends this way: see the connector's log)")
    expired = {role: log.expired for role, log in pair.logs.items() if log.expired}
    if expired:
        counts = ", ".join(f"the {role} released {count} request(s)" for role, count in expired.items())
        raise PairFailure(f"{name}: {counts} when its lease expired, not on the other side's notification "
                          f"(the connector's stats count them in {', '.join(EXPIRY_COUNTERS)}): the transfer "
                          f"finished by a timeout")
    if witness.wrong:
        raise PairFailure(witness.wrong[0])


def run_pair_roundtrip(rig: Rig, scenario: RoundTripScenario,
                       prepare: Callable[[LivePair], None] | None = None) -> RoundTripResult:
    """The producer prefills and keeps its pages; the consumer pulls them; the bytes are compared.

    ``prepare`` runs on the open pair before the consumer gets its requests (a slow transport goes in there).
    """
    stored, wanted = scenario_prompts(scenario, rig.shape.block_size)
    name = rig.connector.name
    with open_pair(rig, stored) as pair:
        if prepare is not None:
            prepare(pair)
        witness = CompletionWitness(pair)
        pair.logs["consumer"].on_received = witness
        pair.add_consumer_requests(wanted)
        pair.step_until(lambda: drained(pair.consumer) and drained(pair.producer),
                        f"{name}: the consumer did not finish receiving, or the producer did not release "
                        f"its pages (finished_sending),")
        check_completion(pair, witness)
    return verify_roundtrip(rig, pair.producer, pair.consumer, stored, wanted, whole_blocks=True)
