"""The worker contracts the scheduler-half check can play, one per connector family, and what each family promises.

A connector's scheduler half talks to its own worker half through metadata only that family reads, so the check
(checks/scheduler_half.py) needs a feeder for that family's worker contract: ``WORKER_CONTRACTS``, keyed by the
class vLLM ships (a subclass, such as a broken copy, is of its base's family). Each entry says how to read the
step's metadata as per-request asks, which feeder plays the worker, and the family's own promises about its hits,
its stores and its KV events that the check holds it to besides the rules every family shares; which of the check's
exercise counters its worker's contract cannot produce, with why; and which situations of the CPU-offload family
the check does not meet for it, with why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..engine.offloading_worker_feeder import FeederMismatch, OffloadingWorkerFeeder, offloading_asks
from ..engine.simple_offload_worker_feeder import Owner, SimpleOffloadWorkerFeeder, simple_asks

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput

    from ..engine.offloading_worker_feeder import Ask, JobId, Timing, Transfer


class WorkerFeeder(Protocol):
    """What the check reads of a feeder: its timing, its transfers and one worker step."""

    timing: Timing
    transfers: dict[JobId, Transfer]
    step_index: int

    def in_flight(self) -> list[Transfer]: ...

    def idle(self) -> bool: ...

    def step(self, scheduler_output: SchedulerOutput) -> KVConnectorOutput: ...


Forward = Callable[[object], None]


@dataclass(frozen=True)
class WorkerContract:
    family: str  # the connector class vLLM ships
    feeder: Callable[[Timing, Owner, Forward], WorkerFeeder]
    asks: Callable[[object, Owner], Sequence[Ask]]  # the step's metadata as per-request asks
    # why a claim must leave the prompt's last token to compute (the family's documented contract); None where
    # the family may claim a whole prompt (vLLM's scheduler takes the last token back after an async load)
    leaves_last_token: str | None = None
    # the kv_connector_extra_config key giving the offload cache's size in bytes: while every block the scheduler
    # half was asked to store fits in it, nothing was evicted, so each block whose store was reported finished is a
    # hit; None where the check does not hold the family to its hits
    capacity_key: str | None = None
    # why the family's scheduler half offloads every block a request computed, by the time the store its finish
    # queues is asked for (its eager mode's documented contract); None where the check does not hold it to that
    stores_computed_blocks: str | None = None
    # the kv_connector_extra_config key that turns those eager stores off (the family's lazy mode), if any
    lazy_key: str | None = None
    # whether the check enables vLLM's KV cache events for the family (kv_events_config, as a user does) and holds
    # the events its take_events hands vLLM's publisher to the stores it made (checks/half_events.py)
    kv_events: bool = False
    unexercisable: dict[str, str] = field(default_factory=dict)  # HalfReport counter -> why this worker never does it
    # the same, on one timing: timing name -> counter -> why
    unexercisable_by_timing: dict[str, dict[str, str]] = field(default_factory=dict)
    # situations of issue 60's CPU-offload family the check does not meet for this family (its design rules them out,
    # or its profile's settings do), with why: recorded with the result, so a reader sees they were weighed
    not_met: dict[str, str] = field(default_factory=dict)

    def not_exercised(self, timing: str) -> dict[str, str]:
        """The counters this family's worker contract never produces on ``timing``, with why."""
        return {**self.unexercisable, **self.unexercisable_by_timing.get(timing, {})}


_SIMPLE_DOC = "vllm/v1/simple_kv_offload/manager.py, SimpleCPUOffloadScheduler.get_num_new_matched_tokens"
_SIMPLE_STORES = "vllm/v1/simple_kv_offload/manager.py, SimpleCPUOffloadScheduler._prepare_eager_store_specs"

WORKER_CONTRACTS: dict[str, WorkerContract] = {c.family: c for c in (
    WorkerContract(
        "OffloadingConnector",
        feeder=lambda timing, owner, forward: OffloadingWorkerFeeder(timing, forward=forward),
        asks=lambda metadata, owner: offloading_asks(metadata),
        unexercisable={
            "stored_events": "the check does not enable KV events for it: checks/offload_events.py follows its "
                             "manager's stores to vLLM's publisher",
            "finished_fully_offloaded": "the check does not hold it to storing every computed block: its scheduler "
                                        "half stores what its OffloadingSpec asks for, and no contract says when",
        },
    ),
    WorkerContract(
        "SimpleCPUOffloadConnector",
        feeder=lambda timing, owner, forward: SimpleOffloadWorkerFeeder(timing, owner, forward=forward),
        asks=simple_asks,
        leaves_last_token=f"its hits must leave at least the last token to recompute, as vLLM's KV cache manager's "
                          f"own do ({_SIMPLE_DOC})",
        capacity_key="cpu_bytes_to_use",
        stores_computed_blocks=f"in eager mode (its default) it stores each block once vLLM has computed it, on "
                               f"the next step, and the rest by the store request_finished queues "
                               f"({_SIMPLE_STORES})",
        lazy_key="lazy_offload",
        kv_events=True,
        unexercisable={
            "out_of_order": "its worker reports each stream's events up to a high-water mark: never one before an "
                            "event launched earlier",
            "reused_after_preemption": "its scheduler half holds a reference on every GPU block a store reads "
                                       "until the store is reported, so vLLM reuses none while it is read",
            "reused_after_finish": "as for preemption: GPU blocks of stores in flight stay referenced",
        },
        unexercisable_by_timing={
            "immediate": dict.fromkeys(
                ("flushes", "preempted_in_flight", "finished_in_flight"),
                "its worker launches a step's store in that step's wait_for_save, so with every event reported at "
                "the end of the step that launched it nothing is in flight between steps"),
            "async": dict.fromkeys(
                ("flushes", "preempted_in_flight", "finished_in_flight", "lookups_with_store_in_flight"),
                "its worker launches a step's store in that step (not the next, as OffloadingConnector's does), so "
                "on this timing every store of the workload's preempted, finished and re-asked requests is "
                "reported before they are; the next-step and late timings meet them in flight"),
        },
        not_met={
            "a final slot stored that was never computed":
                "it stores only GPU blocks vLLM's block pool has hashed, and vLLM hashes a block once all its tokens "
                "are computed; it picks them up to the request's computed tokens (num_computed_tokens less the "
                "output placeholders), not by the block list vLLM hands request_finished, so the block of a sampled "
                "token never qualifies",
            "BlockRemoved events": "its CPU cache (the profile's cpu_bytes_to_use) holds every block the workload "
                                   "stores, so nothing is evicted; a BlockRemoved is still held to name only a block "
                                   "an earlier BlockStored named",
        },
    ),
)}


def worker_contract(connector: Any) -> WorkerContract:
    """The contract of the family ``connector`` belongs to (its class or a base named in ``WORKER_CONTRACTS``)."""
    return contract_of_class(type(connector))


def contract_of_class(connector_class: type) -> WorkerContract:
    """The contract of the family of ``connector_class`` (it or a base named in ``WORKER_CONTRACTS``)."""
    for cls in connector_class.__mro__:
        if (contract := WORKER_CONTRACTS.get(cls.__name__)) is not None:
            return contract
    raise FeederMismatch(f"the scheduler-half check has no feeder for {connector_class.__name__}'s worker contract "
                         f"(it plays those of {', '.join(WORKER_CONTRACTS)})")
