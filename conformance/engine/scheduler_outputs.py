"""What vLLM's Scheduler returns to the engine core, recorded as each step returns it.

The engine core sends on what ``Scheduler.update_from_output`` returns: per client, each request's output (how it
finished, and the ``kv_transfer_params`` a P/D proxy hands the other engine) and the scheduler's stats (the
connector's among them, which vLLM's stats loggers read). The harness steps the Scheduler itself (``scheduler.py``),
so a check that judges what vLLM returned reads it here. Several records may watch one Scheduler (``around_updates``:
each wraps the method as it finds it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.engine import EngineCoreOutputs
    from vllm.v1.outputs import ModelRunnerOutput

    from .scheduler import SchedulerDriver


# (this step's SchedulerOutput, the runner's output, the update itself) -> what the update returned
AroundUpdate = Callable[["SchedulerOutput", "ModelRunnerOutput", Callable[[], Any]], Any]


def around_updates(driver: SchedulerDriver, around: AroundUpdate) -> None:
    """Every later ``Scheduler.update_from_output`` of ``driver`` runs through ``around``, which calls the update
    (the method as this found it, so records made one after another all see each step) and returns its result."""
    scheduler = driver.scheduler
    update = scheduler.update_from_output

    def wrapped(scheduler_output: SchedulerOutput, runner_output: ModelRunnerOutput) -> Any:
        return around(scheduler_output, runner_output, lambda: update(scheduler_output, runner_output))

    scheduler.update_from_output = wrapped


class ReturnedOutputs:
    """Every request output and stats vLLM's Scheduler returned since this record was made, kept as they came."""

    def __init__(self, driver: SchedulerDriver):
        self.params: dict[str, dict[str, Any]] = {}  # request -> the kv_transfer_params returned with its output
        self.finish_reasons: dict[str, str] = {}  # request -> how it finished (FinishReason's name: STOP, LENGTH)
        self.connector_stats: list[dict[str, Any]] = []  # SchedulerStats.kv_connector_stats, each step with any
        around_updates(driver, self._recorded)

    def _recorded(self, scheduler_output: SchedulerOutput, runner_output: ModelRunnerOutput,
                  update: Callable[[], Any]) -> Any:
        outputs = update()
        for engine_outputs in outputs.values():
            self._note(engine_outputs)
        return outputs

    def _note(self, engine_outputs: EngineCoreOutputs) -> None:
        for output in engine_outputs.outputs:
            if output.kv_transfer_params is not None:
                self.params[output.request_id] = output.kv_transfer_params
            if output.finish_reason is not None:
                self.finish_reasons[output.request_id] = getattr(output.finish_reason, "name",
                                                                 str(output.finish_reason))
        stats = getattr(engine_outputs, "scheduler_stats", None)
        if stats is not None and stats.kv_connector_stats:
            self.connector_stats.append(stats.kv_connector_stats)
