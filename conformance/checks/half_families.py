"""The worker contracts the scheduler-half check can play, one per connector family, and what each family promises.

A connector's scheduler half talks to its own worker half through metadata only that family reads, so the check
(checks/scheduler_half.py) needs a feeder for that family's worker contract: ``WORKER_CONTRACTS``, keyed by the
class vLLM ships (a subclass, such as a broken copy, is of its base's family). Each entry says how to read the
step's metadata as per-request asks, which feeder plays the worker, and the family's own promises about its hits
that the check holds it to besides the rules every family shares; and which of the check's exercise counters its
worker's contract cannot produce, with why.
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
    unexercisable: dict[str, str] = field(default_factory=dict)  # HalfReport counter -> why this worker never does it
    # the same, on one timing: timing name -> counter -> why
    unexercisable_by_timing: dict[str, dict[str, str]] = field(default_factory=dict)

    def not_exercised(self, timing: str) -> dict[str, str]:
        """The counters this family's worker contract never produces on ``timing``, with why."""
        return {**self.unexercisable, **self.unexercisable_by_timing.get(timing, {})}


_SIMPLE_DOC = "vllm/v1/simple_kv_offload/manager.py, SimpleCPUOffloadScheduler.get_num_new_matched_tokens"

WORKER_CONTRACTS: dict[str, WorkerContract] = {c.family: c for c in (
    WorkerContract(
        "OffloadingConnector",
        feeder=lambda timing, owner, forward: OffloadingWorkerFeeder(timing, forward=forward),
        asks=lambda metadata, owner: offloading_asks(metadata),
    ),
    WorkerContract(
        "SimpleCPUOffloadConnector",
        feeder=lambda timing, owner, forward: SimpleOffloadWorkerFeeder(timing, owner, forward=forward),
        asks=simple_asks,
        leaves_last_token=f"its hits must leave at least the last token to recompute, as vLLM's KV cache manager's "
                          f"own do ({_SIMPLE_DOC})",
        capacity_key="cpu_bytes_to_use",
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
    ),
)}


def worker_contract(connector: Any) -> WorkerContract:
    """The contract of the family ``connector`` belongs to (its class or a base named in ``WORKER_CONTRACTS``)."""
    for cls in type(connector).__mro__:
        if (contract := WORKER_CONTRACTS.get(cls.__name__)) is not None:
            return contract
    raise FeederMismatch(f"the scheduler-half check has no feeder for {type(connector).__name__}'s worker contract "
                         f"(it plays those of {', '.join(WORKER_CONTRACTS)})")
