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
  publishes from the worker side (``set_xfer_handshake_metadata_pp_aware``).

The byte checks are the store-then-load round-trip's own (``verify_roundtrip``).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Iterator

from conformance.harness.distributed import free_port, single_rank_parallel_state
from conformance.harness.rig import Rig, Side
from conformance.harness.roundtrip import RoundTripResult, Scenario, scenario_prompts, verify_roundtrip

# What a P/D proxy puts on the prefill request: "after this prompt, a remote engine decodes".
PRODUCER_REQUEST_PARAMS = {"do_remote_decode": True}
# The env vars vLLM's NIXL scheduler side reads for the side channel it listens on.
SIDE_CHANNEL_HOST_VAR = "VLLM_NIXL_SIDE_CHANNEL_HOST"
SIDE_CHANNEL_PORT_VAR = "VLLM_NIXL_SIDE_CHANNEL_PORT"
# Transfers run on the connectors' own threads: the sides are stepped until this many seconds pass.
DRAIN_TIMEOUT_S = 30.0
STEP_PAUSE_S = 0.005


def pair_inapplicable(scenario: Scenario) -> str | None:
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


class PairFailure(AssertionError):
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


@contextmanager
def _kept_cpu_affinity() -> Iterator[None]:
    """Undo the CPU worker side's ``os.sched_setaffinity`` (it pins the whole process to one core per
    NUMA node for its transfers), so the tests that run after it in this process keep every core."""
    saved = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        yield
    finally:
        if saved is not None:
            os.sched_setaffinity(0, saved)


class TransferParamsLog:
    """The ``kv_transfer_params`` a scheduler returns with each finished request's output."""

    def __init__(self, side: Side):
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


def add_request(side: Side, request_id: str, prompt: list[int], kv_transfer_params: dict) -> None:
    """A request carrying ``kv_transfer_params`` in its sampling params' ``extra_args``, as vLLM's API server
    passes them through."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    driver = side.scheduler
    params = SamplingParams(max_tokens=1, temperature=0.0, extra_args={"kv_transfer_params": dict(kv_transfer_params)})
    driver.scheduler.add_request(Request(request_id, list(prompt), params, None, block_hasher=driver._block_hasher))


def publish_handshake(side: Side) -> None:
    """What the engine core does after the workers register their caches: the scheduler side serves them."""
    metadata = side.worker.connector.get_handshake_metadata()
    if metadata is not None:
        side.scheduler.connector.set_xfer_handshake_metadata_pp_aware({(0, 0): metadata})


def _drained(side: Side) -> bool:
    return not side.scheduler.scheduler.has_requests() and not side.scheduler._pending()


def _held(sides: dict[str, Side]) -> str:
    """Which requests each side still holds, e.g. ``consumer holds req-0; producer holds nothing``."""
    return "; ".join(f"{role} holds {', '.join(sorted(side.scheduler.scheduler.requests)) or 'nothing'}"
                     for role, side in sides.items())


def _step_until(sides: dict[str, Side], done, what: str) -> None:
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while not done():
        if time.monotonic() > deadline:
            raise PairFailure(f"{what} within {DRAIN_TIMEOUT_S:.0f} s ({_held(sides)})")
        for side in sides.values():
            side.scheduler.step(side.worker)
        time.sleep(STEP_PAUSE_S)


def run_pair_roundtrip(rig: Rig, scenario: Scenario) -> RoundTripResult:
    """The producer prefills and keeps its pages; the consumer pulls them; the bytes are compared."""
    producer_role, consumer_role = rig.roles()
    stored, wanted = scenario_prompts(scenario, rig.shape.block_size)
    name = rig.connector.name
    producer = consumer = None
    with single_rank_parallel_state(rig.vllm_config(producer_role)), _kept_cpu_affinity():
        try:
            with _environ({SIDE_CHANNEL_HOST_VAR: "127.0.0.1", SIDE_CHANNEL_PORT_VAR: str(free_port())}):
                producer = rig.side(producer_role, fill_seed=1234)
            publish_handshake(producer)
            handed_over = TransferParamsLog(producer)
            for request_id, prompt in stored.items():
                add_request(producer, request_id, prompt, PRODUCER_REQUEST_PARAMS)
            _step_until({"producer": producer}, lambda: set(handed_over.params) >= set(stored),
                        f"{name}'s producer did not return kv_transfer_params for every request")

            consumer = rig.side(consumer_role)
            for request_id, prompt in wanted.items():
                add_request(consumer, request_id, prompt, handed_over.params[request_id])
            _step_until({"consumer": consumer, "producer": producer}, lambda: _drained(consumer) and _drained(producer),
                        f"{name}: the consumer did not finish receiving, or the producer did not release "
                        f"its pages (finished_sending),")
        finally:
            for side in (consumer, producer):
                if side is not None:
                    side.close()
    return verify_roundtrip(rig, producer, consumer, stored, wanted, whole_blocks=True)
