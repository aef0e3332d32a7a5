"""The record of what vLLM's Scheduler returns (engine/scheduler_outputs.py), over a stand-in scheduler.

The record wraps ``update_from_output``: the outputs must reach the engine core unchanged, and the record keeps
each request's ``kv_transfer_params`` (only those returned), how each finished and the connector stats of the steps
that carried any. Two records on one Scheduler (a pair check's and a situation's) both see every step.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kvconform.conformance.engine.scheduler_outputs import ReturnedOutputs


class StandInScheduler:
    """Returns the next step's prepared outputs from ``update_from_output``, as vLLM's Scheduler returns its own."""

    def __init__(self, steps: list[dict[int, Any]]):
        self.steps = steps
        self.calls: list[tuple[object, object]] = []

    def update_from_output(self, scheduler_output: object, runner_output: object) -> dict[int, Any]:
        self.calls.append((scheduler_output, runner_output))
        return self.steps[len(self.calls) - 1]


def output(request_id: str, finish: str | None = None, params: dict[str, Any] | None = None) -> SimpleNamespace:
    reason = SimpleNamespace(name=finish) if finish is not None else None
    return SimpleNamespace(request_id=request_id, finish_reason=reason, kv_transfer_params=params)


def engine_outputs(*outputs: SimpleNamespace, connector_stats: dict[str, Any] | None = None) -> SimpleNamespace:
    stats = SimpleNamespace(kv_connector_stats=connector_stats)
    return SimpleNamespace(outputs=list(outputs), scheduler_stats=stats)


STEPS = [
    {0: engine_outputs(output("req-0"), output("req-1"), connector_stats={})},
    {0: engine_outputs(output("req-0", "LENGTH", {"remote_block_ids": [1, 2]}), output("req-1", "STOP"),
                       connector_stats={"num_kv_expired_reqs": []})},
]


def test_outputs_pass_through_and_are_recorded() -> None:
    scheduler = StandInScheduler(STEPS)
    returned = ReturnedOutputs(SimpleNamespace(scheduler=scheduler))  # type: ignore[arg-type]
    got = [scheduler.update_from_output(f"scheduled-{step}", f"ran-{step}") for step in range(len(STEPS))]
    assert got == STEPS
    assert scheduler.calls == [("scheduled-0", "ran-0"), ("scheduled-1", "ran-1")]
    assert returned.params == {"req-0": {"remote_block_ids": [1, 2]}}  # req-1 finished with none
    assert returned.finish_reasons == {"req-0": "LENGTH", "req-1": "STOP"}
    assert returned.connector_stats == [{"num_kv_expired_reqs": []}]  # the first step's stats were empty


def test_two_records_on_one_scheduler_see_every_step() -> None:
    scheduler = StandInScheduler(STEPS)
    driver = SimpleNamespace(scheduler=scheduler)
    first = ReturnedOutputs(driver)  # type: ignore[arg-type]
    second = ReturnedOutputs(driver)  # type: ignore[arg-type]
    for step in range(len(STEPS)):
        scheduler.update_from_output(step, step)
    assert len(scheduler.calls) == len(STEPS)  # the real method ran once per step, not once per record
    assert first.finish_reasons == second.finish_reasons == {"req-0": "LENGTH", "req-1": "STOP"}
    assert first.params == second.params == {"req-0": {"remote_block_ids": [1, 2]}}
