"""The live P/D pair every pair check drives: opening it, stepping it, and what a healthy pair must show.

A NixlConnector-style pair differs from a store-then-load connector in three ways, each played as vLLM's engine
plays it: the producer stays alive while the consumer reads its pages (both sides stepped in turns until each
drains); the producer's ``kv_transfer_params`` reach the consumer's request in ``SamplingParams.extra_args``, as a
P/D proxy passes them; the handshake is published from the worker side on a port no one can take
(``side_channel.py``). This module opens such a pair (``open_pair``), logs what each side told vLLM step by step
(``SideLog``) and holds the judgements the pair checks share: the consumer's bytes are right at the step it first
reports ``finished_recving`` (``CompletionWitness``: the next step computes on them); each side releases a request
on the other's word, not a lease's expiry (``check_completion``: the profile's lease sits above the drain bound, and
expiries are read from the connector's own stats); no block stays held once both sides drained
(``raise_if_leaked``). Besides: the API server's abort (``abort``), the bounds the checks step within, and the
refusal of a situation built on the consumer's reads (``ConsumerDoesNotRead``).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..engine.affinity import restore_harness_affinity
from ..engine.check_failure import CheckFailure
from ..engine.distributed import single_rank_parallel_state
from ..engine.ranks import EXPIRY_COUNTERS, expired_requests
from ..engine.scheduler import next_token
from ..engine.scheduler_outputs import ReturnedOutputs
from ..engine.side_channel import HOST, HandshakeFailure, PortTaken, reserved_port, serve_handshake
from ..engine.slots import token_slot_bytes
from ..vllm_install import api as vllm_api
from .roundtrip import computed_locally

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput

    from ..engine.ranks import RankedEngine
    from ..engine.rig import EngineStandIn, Rig

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
# A notification crosses in well under a second once the sides have shaken hands (vLLM gives a handshake 5 s): a
# connector that never sends one fails at this bound, not at the round-trip's longer drain bound, which pinned
# findings would otherwise wait out in every run.
NOTIFY_TIMEOUT_S = 15.0
# The shortest a bound becomes when --kvconform-wait-scale shortens it: vLLM's own handshake bound (5 s)
SHORTEST_BOUND_S = 5.0


def scaled_bound(rig: Rig, seconds: float) -> float:
    """One of the pair checks' bounds as the run scales it (``Rig.wait_scale``, --kvconform-wait-scale); a bound
    shortened stays at least ``SHORTEST_BOUND_S``, and one already shorter is not shortened."""
    scaled = seconds * rig.wait_scale
    return scaled if scaled >= seconds else max(scaled, min(seconds, SHORTEST_BOUND_S))


class PairFailure(CheckFailure):
    """The pair did not complete a transfer; the message says which side stalled."""


class ConsumerDoesNotRead(Exception):
    """The pair's consumer posts no READ (push mode: the producer WRITEs), so a situation built on the consumer's
    reads does not apply: a larger consumer block (NIXL maps block sizes only where the side posting the transfers has
    the larger blocks), reads split across a producer's ranks. The message says which."""


@contextmanager
def patched_environ(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set, as it was again once the context closes."""
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


def add_request(side: EngineStandIn | RankedEngine, request_id: str, prompt: list[int],
                kv_transfer_params: dict[str, Any], stops: bool = False, prompt_logprobs: int | None = None) -> None:
    """A request carrying ``kv_transfer_params`` in its sampling params' ``extra_args``, as vLLM's API server
    passes them through; with ``stops``, the first token it samples is a stop token (two tokens allowed)."""
    if stops:
        side.scheduler.add(request_id, prompt, max_tokens=2, kv_transfer_params=kv_transfer_params,
                           stop_token_ids=[next_token(prompt)], prompt_logprobs=prompt_logprobs)
    else:
        side.scheduler.add(request_id, prompt, kv_transfer_params=kv_transfer_params, prompt_logprobs=prompt_logprobs)


def publish_handshake(side: EngineStandIn) -> None:
    """What the engine core does after the workers register their caches: the scheduler side serves them."""
    metadata = side.runner.connector.get_handshake_metadata()
    if metadata is not None:
        side.scheduler.connector.set_xfer_handshake_metadata_pp_aware({(0, 0): metadata})


@dataclass
class SideLog:
    """Stands between a side's scheduler and its worker: what the side told vLLM, step by step.

    Each step's ``KVConnectorOutput`` (received, failed receives, blocks that failed to load,
    and the worker's stats, which vLLM's runner collects every step). It also keeps the
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

    def step(self, scheduler_output: SchedulerOutput) -> KVConnectorOutput:
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
        self.expired += expired_requests(output.kv_connector_stats)
        return output


def drained(side: EngineStandIn | RankedEngine) -> bool:
    """Whether the side's scheduler holds no request and its connector reports nothing still in flight."""
    return not side.scheduler.scheduler.has_requests() and not side.scheduler._pending()


@dataclass
class LivePair:
    """A serving producer whose requests finished (their params handed over) and a fresh consumer."""

    rig: Rig
    producer: EngineStandIn
    consumer: EngineStandIn
    params: dict[str, dict[str, Any]]
    logs: dict[str, SideLog]
    producer_ids: dict[str, str] = field(default_factory=dict)  # consumer request id -> the producer's

    def add_consumer_requests(self, prompts: dict[str, list[int]], routed_ids: bool = False,
                              prompt_logprobs: int | None = None) -> None:
        """The router's requests to the consumer: each with its producer request's params, under the router's
        own id where ``routed_ids`` (the producer's travels in the params), asking for ``prompt_logprobs`` where
        given."""
        for request_id, prompt in prompts.items():
            consumer_id = f"decode-{request_id}" if routed_ids else request_id
            self.producer_ids[consumer_id] = request_id
            add_request(self.consumer, consumer_id, prompt, self.params[request_id], prompt_logprobs=prompt_logprobs)

    def compute_locally(self, prompts: dict[str, list[int]], blocks: Callable[[int, int], int]) -> None:
        """The consumer computes the first ``blocks`` whole blocks of each prompt as requests of its own, so its
        prefix cache holds them when the router's requests arrive."""
        block_size = self.rig.block_size
        for request_id, prompt in prompts.items():
            self.consumer.scheduler.add(f"local-{request_id}", prompt[:blocks(len(prompt), block_size) * block_size])
        self.step_until(lambda: drained(self.consumer), f"{self.rig.connector.name}'s consumer did not finish the "
                        f"requests it computed locally", roles=("consumer",))

    def _held(self) -> str:
        """Which requests each side still holds, e.g. ``consumer holds req-0; producer holds nothing``."""
        return "; ".join(f"{role} holds {', '.join(sorted(log.side.scheduler.scheduler.requests)) or 'nothing'}"
                         for role, log in self.logs.items())

    def step_until(self, done: Callable[[], bool], what: str | Callable[[], str],
                   roles: tuple[str, ...] = ("consumer", "producer"), timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Step the sides, consumer first, until ``done``; a ``PairFailure`` saying ``what`` after ``timeout_s``, as
        the run scales it (``scaled_bound``; ``what`` a callable: what it says then, for a message that counts what
        happened while stepping)."""
        bound = scaled_bound(self.rig, timeout_s)
        deadline = time.monotonic() + bound
        while not done():
            if time.monotonic() > deadline:
                said = what() if callable(what) else what
                raise PairFailure(f"{said} within {bound:g} s ({self._held()})")
            for role in roles:
                log = self.logs[role]
                log.side.scheduler.step(log)
            time.sleep(STEP_PAUSE_S)


def serving_side(rig: Rig, role: str, fill_seed: int | None = None) -> EngineStandIn:
    """A side whose handshake is served on a reserved port, as vLLM's engine core serves every NIXL engine's; a fresh
    port when another process took it. The producer's is what the consumer reads from (pull); the consumer's is
    what the producer writes to (push: the producer handshakes back with the host and port the consumer registers)."""
    taken = []
    for _ in range(PORT_ATTEMPTS):
        with reserved_port() as port:
            with patched_environ({SIDE_CHANNEL_HOST_VAR: HOST, SIDE_CHANNEL_PORT_VAR: str(port)}):
                side = rig.engine(role, fill_seed=fill_seed)
            try:
                serve_handshake(functools.partial(publish_handshake, side), port)
                return side
            except PortTaken as exc:
                taken.append(str(exc))
                side.close()
    raise HandshakeFailure(f"{rig.connector.name}: the {role}'s handshake side channel found each of "
                           f"{PORT_ATTEMPTS} reserved ports taken by another process: {'; '.join(taken)}")


@contextmanager
def open_pair(rig: Rig, stored: dict[str, list[int]], producer_stops: bool = False,
              prompt_logprobs: dict[str, int] | None = None) -> Iterator[LivePair]:
    """The producer prefills ``stored`` and keeps its pages; the consumer is built, with no requests yet.

    With ``producer_stops``, each prefill ends on a stop token (FINISHED_STOPPED), not by length. The requests
    ``prompt_logprobs`` names ask the producer for that many prompt logprobs (a P/D proxy forwards them).

    Both sides stay open (and the one-rank parallel state with them) until the context closes.
    """
    producer_role, consumer_role = rig.roles()
    name = rig.connector.name
    producer = consumer = None
    # each worker side restores the harness thread's affinity once built (affinity.py); this covers the
    # rest of the pair's build
    with single_rank_parallel_state(rig.vllm_config(producer_role)), restore_harness_affinity():
        try:
            producer = serving_side(rig, producer_role, fill_seed=1234)
            handed_over = ReturnedOutputs(producer.scheduler)
            for request_id, prompt in stored.items():
                add_request(producer, request_id, prompt, PRODUCER_REQUEST_PARAMS, stops=producer_stops,
                            prompt_logprobs=(prompt_logprobs or {}).get(request_id))
            producer_log = SideLog(producer)
            consumer = serving_side(rig, consumer_role)
            pair = LivePair(rig, producer, consumer, handed_over.params,
                            {"consumer": SideLog(consumer), "producer": producer_log})
            pair.step_until(lambda: set(handed_over.params) >= set(stored),
                            f"{name}'s producer did not return kv_transfer_params for every request",
                            roles=("producer",))
            expected = "STOP" if producer_stops else "LENGTH"
            assert all(handed_over.finish_reasons.get(rid) == expected for rid in stored), (
                f"the harness meant the producer's prefills to finish by {expected}, but they finished "
                f"{handed_over.finish_reasons}")
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
        block_size = rig.block_size
        local = computed_locally(consumer, request_id)  # the tokens before the loaded ones: the consumer's own
        producer_blocks = producer.scheduler.block_ids[self.pair.producer_ids.get(request_id, request_id)][0]
        for name, view in consumer.caches.items():
            saved = token_slot_bytes(producer.caches[name], producer_blocks, local + tokens, block_size)[local:]
            now = token_slot_bytes(view, consumer_blocks[0], local + tokens, block_size)[local:]
            same = (saved.to(now.device) == now).all(dim=1)
            if not bool(same.all()):
                self.wrong.append(
                    f"{rig.connector.name}: the consumer reported {request_id} received (finished_recving) at its "
                    f"step {step}, when vLLM schedules its compute, but token {local + int((~same).nonzero()[0])} "
                    f"of {local + tokens} (layer {name}) did not yet hold the producer's bytes "
                    f"({int((~same).sum())} token slot(s) wrong): it reported the read done before it completed")
                return


def raise_if_failed_loads(pair: LivePair) -> None:
    """``PairFailure`` where the consumer reported a failed receive or a load-error block, with nothing injected."""
    consumer = pair.logs["consumer"]
    if consumer.failed_requests or consumer.invalid_blocks:
        raise PairFailure(f"{pair.rig.connector.name}: nothing was injected, yet the consumer reported failed "
                          f"receive(s) {sorted(consumer.failed_requests)} and load-error block(s) "
                          f"{sorted(consumer.invalid_blocks)} "
                          f"(a failed side-channel handshake also ends this way: see the connector's log)")


def raise_if_expired(pair: LivePair) -> None:
    """``PairFailure`` where a side released a request when its lease expired, not on the other side's word."""
    expired = {role: log.expired for role, log in pair.logs.items() if log.expired}
    if expired:
        counts = ", ".join(f"the {role} released {count} request(s)" for role, count in expired.items())
        raise PairFailure(f"{pair.rig.connector.name}: {counts} when its lease expired, not on the other side's "
                          f"notification (the connector's stats count them in {', '.join(EXPIRY_COUNTERS)}): the "
                          f"transfer finished by a timeout")


def check_completion(pair: LivePair, witness: CompletionWitness, settled: Callable[[], None] | None = None) -> None:
    """A healthy pair: no failed receive, no finish by expiry, the bytes in place when reported.

    ``settled`` checks the bytes after draining, before the witness is heard: bytes still wrong then went to
    the wrong slots (its failure names them), bytes right then but not when reported arrived late."""
    raise_if_failed_loads(pair)
    raise_if_expired(pair)
    if settled is not None:
        settled()
    if witness.wrong:
        raise PairFailure(witness.wrong[0])


def leaked_blocks(side: EngineStandIn) -> int:
    """Blocks a drained side still holds (vLLM's null block aside)."""
    pool = side.scheduler.scheduler.kv_cache_manager.block_pool
    return int(pool.num_gpu_blocks - 1 - pool.get_num_free_blocks())


def raise_if_leaked(pair: LivePair, what: str, roles: tuple[str, ...] = ("consumer", "producer")) -> None:
    """``PairFailure`` naming each side of the drained ``pair`` (of ``roles``) that still holds blocks (``what``: the
    message's start, the connector and the situation)."""
    leaks = {role: leaked_blocks(pair.logs[role].side) for role in roles}
    if any(leaks.values()):
        held = ", ".join(f"the {role} still holds {count} block(s)" for role, count in leaks.items() if count)
        sides = "both sides" if len(roles) == 2 else f"the {' and the '.join(roles)}"
        raise PairFailure(f"{what}after {sides} drained, {held}: they never return to the free pool")


def abort(side: EngineStandIn, request_ids: list[str]) -> None:
    """The API server's abort of requests on one side (a client gone, a router's cancel): vLLM's scheduler finishes
    them as aborted, whether they still wait in its queue or run."""
    RequestStatus = vllm_api.find("RequestStatus")
    side.scheduler.scheduler.finish_requests(request_ids, RequestStatus.FINISHED_ABORTED)
