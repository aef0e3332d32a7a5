"""vLLM's OffloadingConnector whose KV events go astray, run whole on CPU over kvconform's CPU-memory medium.

Each copy's scheduler half differs from vLLM's only in ``take_events``, the hook vLLM's Scheduler drains into its
KV event publisher each step (the worker half, vLLM's CPU manager and the medium stay unmodified; the profile,
offloading_events_broken.yaml, gives each the cpu-medium variant's settings, and the last two a tier of four
chunks, so the workload's stores evict):

* ``DroppedEventsOffloadingConnector``: takes its manager's events and returns none of them;
* ``DroppedRemovalsOffloadingConnector``: returns the stores but drops every ``BlockRemoved`` (the evictions);
* ``SmallTierOffloadingConnector``: no edit, the control: the same small tier, every event where it belongs.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import OffloadingConnectorScheduler
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector

from tests.checks.scheduler_halves import OffloadingWithScheduler


class _DroppingScheduler(OffloadingConnectorScheduler):
    def take_events(self):
        """The manager's events taken (its list emptied) and none returned (the edit)."""
        list(super().take_events())
        return []


class _DroppingRemovalsScheduler(OffloadingConnectorScheduler):
    def take_events(self):
        """vLLM's events without the BlockRemoved ones (the edit)."""
        return [event for event in super().take_events() if type(event).__name__ != "BlockRemoved"]


class DroppedEventsOffloadingConnector(OffloadingWithScheduler):
    scheduler_class = _DroppingScheduler


class DroppedRemovalsOffloadingConnector(OffloadingWithScheduler):
    scheduler_class = _DroppingRemovalsScheduler


class SmallTierOffloadingConnector(OffloadingConnector):
    """vLLM's OffloadingConnector unmodified; its profile gives it a tier of four chunks."""
