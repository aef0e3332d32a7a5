"""The judgement of a pair whose transfer failed: the consumer raised, or reported the request, in time.

A failed transfer reaches vLLM's scheduler as a store connector's failed load does, so the judgement is
``load_failure.py``'s: the connector raises, or reports the request in ``failed_recving`` or its blocks through
``get_block_ids_with_load_errors()``; it never reports it received; and every slot vLLM keeps as loaded holds the
producer's bytes. Every fault family of the pair (read, handshake, write, unreleasable read, vanished producer) ends
here.
"""

from __future__ import annotations

from .load_failure import (
    LoadFailureAnswer,
    LoadFailureViolation,
    PolicyRig,
    Staged,
    check_kept_slots,
    kept_tokens,
    loading_blocks,
)
from .pair_core import DRAIN_TIMEOUT_S, LivePair, SideLog, drained


def consumer_drains(pair: LivePair, requests: dict[str, list[int]], what: str,
                     timeout_s: float = DRAIN_TIMEOUT_S) -> None:
    """The router hands the consumer ``requests``; it is stepped (with the producer) until it drains or raises."""
    log = pair.logs["consumer"]
    pair.add_consumer_requests(requests)
    try:
        pair.step_until(lambda: drained(pair.consumer), what, timeout_s=timeout_s)
    except Exception as exc:
        if exc is not log.raised:
            raise


def judge_failed_load(rig: PolicyRig, pair: LivePair, stored: dict[str, list[int]], fault: Staged,
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
    check_kept_slots(rig, pair.producer, pair.consumer, answer, fault)
    return answer
