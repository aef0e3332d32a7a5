"""KV events through a wrapper: every event each child produced reaches vLLM's event publisher, once, in its step.

vLLM's Scheduler takes the connector's ``take_events()`` at the end of each ``update_from_output`` and publishes
them, after its own KV cache manager's, as one ``KVEventBatch`` through its ``kv_event_publisher`` (vLLM's null
publisher unless ``kv_events_config`` enables one; it is handed the batch either way). KV-aware routers read those
batches to know which engine holds which blocks: an event a wrapper leaves in a child, or publishes twice, is a
block the router never learns of, or counts twice. Per step (one ``update_from_output``) ``EventsRecord`` keeps
what each child's ``take_events`` gave, what the publisher was handed, and what each child still held after the
step (asked on the child's own method, past the wrapper); ``events_problem`` judges them. What the wrapper's own
``take_events()`` hands vLLM (removals of blocks announced, published in the step) the scheduler driver judges for
every connector (engine/published.py); here, that it carries every child's events.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..engine.scheduler_outputs import around_updates

if TYPE_CHECKING:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import ModelRunnerOutput

    from ..engine.scheduler import SchedulerDriver

SHOWN = 4  # events named in a message; the rest are counted


@dataclass
class StepEvents:
    """One step's events: each child's, vLLM's own, and what the publisher got."""

    step: int  # 1: the first update_from_output the record saw
    taken: dict[int, list[Any]] = field(default_factory=dict)  # child index -> what its take_events gave
    own: list[Any] = field(default_factory=list)  # the scheduler's KV cache manager's events (vLLM's, not a child's)
    published: list[Any] = field(default_factory=list)  # the events of every batch the publisher was handed
    left: dict[int, list[Any]] = field(default_factory=dict)  # child index -> what it still held after the step


class EventsRecord:
    """Every step's ``StepEvents`` over a run of vLLM's Scheduler, whose connector's children are ``children``."""

    def __init__(self, driver: SchedulerDriver, children: list[KVConnectorBase_V1]):
        self.steps: list[StepEvents] = []
        self._current = StepEvents(0)
        self._own_takes: list[Callable[[], Iterable[Any]]] = []
        for index, child in enumerate(children):
            self._own_takes.append(child.take_events)
            child.take_events = self._taken_from(index, child.take_events)  # type: ignore[method-assign]
        self._driver = driver
        around_updates(driver, self._stepped)

    def _stepped(self, scheduler_output: SchedulerOutput, runner_output: ModelRunnerOutput,
                 update: Callable[[], Any]) -> Any:
        self._current = StepEvents(len(self.steps) + 1)
        outputs = update()
        publication = self._driver.publication  # the driver's record of this update, still open here
        if publication is not None:
            self._current.own.extend(publication.own)
            self._current.published.extend(publication.published)
        self._current.left = {i: left for i, take in enumerate(self._own_takes) if (left := list(take()))}
        self.steps.append(self._current)
        return outputs

    def _taken_from(self, index: int, take: Callable[[], Iterable[Any]]) -> Callable[[], list[Any]]:
        def taken() -> list[Any]:
            events = list(take())
            self._current.taken.setdefault(index, []).extend(events)
            return events

        return taken

    def produced(self) -> bool:
        """Whether any child produced an event over the run (taken or left behind)."""
        return any(step.taken.get(i) or step.left.get(i) for step in self.steps for i in range(len(self._own_takes)))


def describe(events: list[Any]) -> str:
    """Events as a reader tells them apart: their kind and the blocks they name (hashes shortened)."""
    def one(event: Any) -> str:
        hashes = [h.hex()[:12] if isinstance(h, bytes) else str(h) for h in getattr(event, "block_hashes", ())]
        return f"{type(event).__name__}({', '.join(hashes)})"

    more = f" and {len(events) - SHOWN} more" if len(events) > SHOWN else ""
    return f"{len(events)} event(s): {', '.join(one(e) for e in events[:SHOWN])}{more}"


def _counted(events: list[Any]) -> Counter[str]:
    return Counter(repr(event) for event in events)  # every field of a msgspec event is in its repr


def _of(events: list[Any], keys: Counter[str]) -> list[Any]:
    """The events whose keys ``keys`` counts, as many of each as it counts."""
    left, chosen = Counter(keys), []
    for event in events:
        if left[repr(event)] > 0:
            left[repr(event)] -= 1
            chosen.append(event)
    return chosen


def events_problem(steps: list[StepEvents], names: list[str]) -> str | None:
    """What went wrong with the events between the children and vLLM's publisher, step by step; None if nothing.

    ``names`` names each child (by its place in the wrapper)."""
    for step in steps:
        if step.left:
            index, left = min(step.left.items(), key=lambda item: item[0])
            return (f"{names[index]} produced {describe(left)} that the wrapper never took from it in step "
                    f"{step.step} (the child still held them after vLLM's Scheduler took the connector's events): "
                    f"vLLM's event publisher never got them, so KV-aware routers never learn of those blocks")
        children = [event for events in step.taken.values() for event in events]
        expected, got = _counted(step.own + children), _counted(step.published)
        if lost := expected - got:
            owners = sorted({names[i] for i, events in step.taken.items() if _of(events, lost)})
            return (f"in step {step.step} the wrapper took {describe(_of(children, lost))} from "
                    f"{', '.join(owners) or 'its children'}, but vLLM's event publisher was handed "
                    f"{describe(step.published) if step.published else 'no batch'}: they were lost on the way")
        if extra := got - expected:
            return (f"in step {step.step} vLLM's event publisher was handed {describe(_of(step.published, extra))} "
                    f"more than the children produced ({describe(children) if children else 'none'}): a router "
                    f"counts those blocks stored again")
    return None
