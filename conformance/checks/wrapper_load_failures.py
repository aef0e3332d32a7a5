"""A child's failed load through a wrapper: the blocks it reports reach vLLM's scheduler, which applies its policy.

A connector reports the blocks it could not load through ``get_block_ids_with_load_errors`` (base.py: a
synchronous load's in the pass that found them); vLLM's runner hands them to the scheduler as the step's
``KVConnectorOutput.invalid_block_ids``, and ``Scheduler.update_from_output`` finds the requests among whose
computed blocks they are. Under ``kv_load_failure_policy`` "recompute" it cuts each one's computed tokens back to
its first failed block and schedules the rest again; under "fail" it finishes the request with an error. A wrapper
that drops a child's report leaves vLLM taking blocks that hold garbage for computed KV. Per step
``LoadFailureRecord`` keeps what each child reported (a child the wrapper did not ask that step is asked on its own
method, past the wrapper, before the scheduler's update), what vLLM's scheduler was handed, which requests held
those blocks, and how the scheduler left them; ``load_failures_problem`` judges them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..engine.scheduler_outputs import around_updates

if TYPE_CHECKING:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import ModelRunnerOutput

    from ..engine.scheduler import SchedulerDriver

ERROR = "ERROR"  # vLLM's FinishReason for a request it failed (a KV load failure under the "fail" policy)


@dataclass
class RequestAfter:
    """How vLLM's scheduler left a request after the step that reported its blocks failed."""

    computed_tokens: int | None  # None: the scheduler no longer holds it (finished)
    status: str


@dataclass
class FailedLoad:
    """One child's report of failed blocks, in one step, and what vLLM made of it."""

    step: int  # 1: the first update_from_output the record saw
    child: int
    blocks: set[int]
    handed: set[int]  # the invalid_block_ids vLLM's scheduler got that step, from the wrapper
    # request -> where its computed tokens must be cut back to: the start of its first failed block
    recompute_from: dict[str, int] = field(default_factory=dict)
    after: dict[str, RequestAfter] = field(default_factory=dict)


class LoadFailureRecord:
    """Every ``FailedLoad`` over a run of vLLM's Scheduler whose worker-side children are ``children``."""

    def __init__(self, driver: SchedulerDriver, children: list[KVConnectorBase_V1]):
        self.failed: list[FailedLoad] = []
        self._pending: list[tuple[int, set[int]]] = []  # this step's reports, until the scheduler's update
        self._asked: set[int] = set()  # the children the wrapper asked this step
        self._steps = 1
        # each child's own report, unrecorded: what it still holds where the wrapper did not ask it
        self._own_reports: list[Callable[[], set[int]]] = []
        for index, child in enumerate(children):
            self._own_reports.append(child.get_block_ids_with_load_errors)
            child.get_block_ids_with_load_errors = self._reported_by(  # type: ignore[method-assign]
                index, child.get_block_ids_with_load_errors)
        self._scheduler = driver.scheduler
        around_updates(driver, self._stepped)

    def _stepped(self, scheduler_output: SchedulerOutput, runner_output: ModelRunnerOutput,
                 update: Callable[[], Any]) -> Any:
        scheduler, output = self._scheduler, runner_output.kv_connector_output
        handed = set(output.invalid_block_ids or ()) if output is not None else set()
        unasked = [(i, set(blocks)) for i, report in enumerate(self._own_reports) if i not in self._asked
                   and (blocks := report())]
        reports, self._pending, self._asked = self._pending + unasked, [], set()
        loads = [FailedLoad(self._steps, index, blocks, handed, self._holders(scheduler, scheduler_output, blocks))
                 for index, blocks in reports]
        outputs = update()
        for load in loads:
            load.after = {request_id: self._after(scheduler, request_id) for request_id in load.recompute_from}
        self.failed.extend(loads)
        self._steps += 1
        return outputs

    def _reported_by(self, index: int, report: Callable[[], set[int]]) -> Callable[[], set[int]]:
        def reported() -> set[int]:
            self._asked.add(index)
            blocks = report()
            if blocks:
                self._pending.append((index, set(blocks)))
            return blocks

        return reported

    @staticmethod
    def _holders(scheduler: Any, scheduler_output: SchedulerOutput, blocks: set[int]) -> dict[str, int]:
        """Each request with a failed block among its computed ones (as vLLM's scheduler counts them before this
        step's update): the token its computed tokens must go back to."""
        holders: dict[str, int] = {}
        for request_id, request in scheduler.requests.items():
            computed = request.num_computed_tokens - scheduler_output.num_scheduled_tokens.get(request_id, 0)
            computed_blocks = -(-computed // scheduler.block_size)
            table = scheduler.kv_cache_manager.get_block_ids(request_id)[0][:computed_blocks]
            first = next((i for i, block in enumerate(table) if block in blocks), None)
            if first is not None:
                holders[request_id] = first * scheduler.block_size
        return holders

    @staticmethod
    def _after(scheduler: Any, request_id: str) -> RequestAfter:
        request = scheduler.requests.get(request_id)
        if request is None:
            return RequestAfter(None, "finished")
        return RequestAfter(request.num_computed_tokens, request.status.name)

    def reported(self) -> bool:
        return bool(self.failed)


def _recomputed(load: FailedLoad, request_id: str, finish_reason: str | None) -> str | None:
    """"recompute": the request goes on, its computed tokens cut back to its first failed block, and ends normally."""
    after, cut_to = load.after[request_id], load.recompute_from[request_id]
    if after.computed_tokens is None or finish_reason == ERROR:
        return f"vLLM's scheduler finished {request_id} ({finish_reason or after.status}) instead of recomputing"
    if after.computed_tokens > cut_to:
        return (f"vLLM's scheduler left {request_id} with {after.computed_tokens} computed tokens, past its first "
                f"failed block (from token {cut_to}): it takes that block's KV for computed")
    return None


def _failed(load: FailedLoad, request_id: str, finish_reason: str | None) -> str | None:
    """"fail": the request is finished with an error."""
    if finish_reason != ERROR:
        return (f"vLLM's scheduler left {request_id} {load.after[request_id].status} and it finished "
                f"{finish_reason or 'not at all'}, not with an error")
    return None


# kv_load_failure_policy -> what vLLM's scheduler must have done with a request whose loaded blocks failed
POLICY_OUTCOMES: dict[str, Callable[[FailedLoad, str, str | None], str | None]] = {
    "recompute": _recomputed,
    "fail": _failed,
}


def load_failures_problem(failed: list[FailedLoad], names: list[str], policy: str,
                          finish_reasons: dict[str, str]) -> str | None:
    """What went wrong with the children's failed loads on their way to vLLM and in its handling; None if nothing.

    ``names`` names each child; ``finish_reasons`` is how each request finished, as vLLM's Scheduler returned it."""
    for load in failed:
        held = ", ".join(sorted(load.recompute_from)) or "no request's computed blocks"
        if lost := load.blocks - load.handed:
            return (f"{names[load.child]} reported blocks {sorted(lost)} (of {held}) as failed to load in step "
                    f"{load.step}, but vLLM's scheduler got invalid_block_ids {sorted(load.handed) or 'none'} from "
                    f"the wrapper that step: those blocks never reached vLLM, which takes the garbage they hold for "
                    f"computed KV (its kv_load_failure_policy {policy!r} never applies)")
        for request_id in sorted(load.recompute_from):
            if problem := POLICY_OUTCOMES[policy](load, request_id, finish_reasons.get(request_id)):
                return (f"{names[load.child]} reported blocks {sorted(load.blocks)} of {request_id} as failed to load "
                        f"in step {load.step}, and the wrapper handed them on, but under kv_load_failure_policy "
                        f"{policy!r} {problem}")
    return None
