"""OffloadingConnector whose lookup counts a block being stored as a hit, for the async scheduling situation.

vLLM's offloading manager answers ``HIT_PENDING`` for a block whose store has not been reported finished,
and the scheduler half's ``_maximal_prefix_lookup`` then defers (``None``: ask again). This copy's one edit
counts ``HIT_PENDING`` as ``HIT``. Without async scheduling no lookup of the scheduler-half workload meets
a store in flight (the sync timings report ``lookups with store in flight 0``) and they pass it; under
async scheduling the preempted request's prompt is looked up again before step N's output reports its
flushed store, and the check fails it (tests/checks/test_offloading_async_catches.py).
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import OffloadingConnectorScheduler
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector
from vllm.v1.kv_offload.base import LookupResult


class _PendingAsHitScheduler(OffloadingConnectorScheduler):
    """vLLM 0.32's ``_maximal_prefix_lookup``, with ``HIT_PENDING`` in the ``HIT`` case (the one edit)."""

    def _maximal_prefix_lookup(self, keys, req_context, req, group_config, start_chunk_idx):
        hit_count = 0
        defer_lookup = False
        for local_idx, key in enumerate(keys):
            result = self.manager.lookup(key, req_context)
            match result:
                case LookupResult.HIT | LookupResult.HIT_PENDING:  # the edit: was HIT only, HIT_PENDING deferred
                    self._events_tracker.record_lookup(req, group_config, start_chunk_idx + local_idx, key)
                    hit_count += 1
                case LookupResult.RETRY:
                    defer_lookup = True
                case LookupResult.MISS:
                    break
        return hit_count if not defer_lookup else None


class PendingAsHitOffloadingConnector(OffloadingConnector):
    """Its scheduler half takes a block whose store is in flight for a stored one."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.connector_scheduler is not None:
            self.connector_scheduler.__class__ = _PendingAsHitScheduler
