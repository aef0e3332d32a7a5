"""A consumer too busy to schedule its P/D requests before the producer's lease runs out: heartbeats must keep it.

A NIXL producer keeps a finished prefill's blocks for ``kv_lease_duration`` seconds. A consumer whose requests wait
in its queue (its running requests fill every slot) sends the producer heartbeats naming them, each extending their
lease, so the blocks are still there when the requests are finally scheduled and read. Here the producer's lease is
``LEASE_S`` seconds, the consumer runs one request at a time, and a long decode of its own holds that slot for
``WAIT_LEASES`` leases while the pair's requests wait; then it is cancelled and the requests are read.

It passes when the producer releases every request on the consumer's notification, never on a lease's expiry
(expiries are read from the connector's stats), the bytes are in place when the consumer reports each request
received (``pair_core.py``'s witness), both sides drain and no block stays held.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.prompts import request_prompt
from ..engine.rig import Rig
from .pair_core import (
    DRAIN_TIMEOUT_S,
    CompletionWitness,
    LivePair,
    abort,
    check_completion,
    drained,
    open_pair,
    raise_if_leaked,
)
from .roundtrip import ROUNDTRIP_SCENARIOS, scenario_prompts

if TYPE_CHECKING:
    from vllm.config import VllmConfig

LEASE_S = 3  # the producer's kv_lease_duration: vLLM heartbeats every lease // 6 s (here every step)
WAIT_LEASES = 1.5  # how long the pair's requests wait in the consumer's queue, in leases
WAIT_STEP_PAUSE_S = 0.02  # between steps while they wait (the busy request must not finish first)
BUSY = "busy-decode"  # the consumer's own long decode that holds its only slot
BUSY_DECODE_TOKENS = 400


@dataclass
class BusyConsumerRig(Rig):
    """A Rig whose engines lease a prefill's blocks for ``LEASE_S`` seconds and run one request at a time."""

    def vllm_config(self, role: str) -> VllmConfig:
        config = super().vllm_config(role)
        transfer = config.kv_transfer_config
        assert transfer is not None
        transfer.kv_connector_extra_config["kv_lease_duration"] = LEASE_S
        return config

    def scheduler_limits(self) -> tuple[int, int]:
        _, max_num_batched_tokens = super().scheduler_limits()
        return 1, max_num_batched_tokens


def _wait_busy(pair: LivePair, seconds: float) -> None:
    """Step both sides, paced, for ``seconds`` while the consumer's busy request holds its only slot."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for role in ("consumer", "producer"):
            log = pair.logs[role]
            log.side.scheduler.step(log)
        time.sleep(WAIT_STEP_PAUSE_S)


def run_pair_heartbeats(rig: BusyConsumerRig) -> None:
    """The pair's requests wait in the busy consumer's queue for ``WAIT_LEASES`` leases, then are read."""
    stored, _ = scenario_prompts(ROUNDTRIP_SCENARIOS["multi"], rig.block_size)
    name = rig.connector.name
    with open_pair(rig, stored) as pair:
        consumer = pair.consumer.scheduler
        consumer.add(BUSY, request_prompt(300, rig.block_size), max_tokens=BUSY_DECODE_TOKENS)
        pair.step_until(lambda: BUSY in consumer.block_ids, f"{name}'s consumer did not schedule its own request",
                        roles=("consumer",))
        witness = CompletionWitness(pair)
        pair.logs["consumer"].on_received = witness
        pair.add_consumer_requests(stored)
        _wait_busy(pair, LEASE_S * WAIT_LEASES)
        scheduled = sorted(set(stored) & set(consumer.block_ids))
        assert BUSY in consumer.scheduler.requests and not scheduled, (
            f"the harness meant the pair's requests to wait in the consumer's queue for {LEASE_S * WAIT_LEASES} s, "
            f"but {'its busy request finished' if BUSY not in consumer.scheduler.requests else scheduled} first")
        abort(pair.consumer, [BUSY])
        pair.step_until(lambda: drained(pair.consumer) and drained(pair.producer),
                        f"{name}: the pair's requests waited {LEASE_S * WAIT_LEASES} s in the consumer's queue (its "
                        f"only slot busy) under a {LEASE_S} s lease; then the consumer did not finish receiving, or "
                        f"the producer did not release its pages (finished_sending),", timeout_s=DRAIN_TIMEOUT_S)
        check_completion(pair, witness)
        raise_if_leaked(pair, f"{name}: ")
