"""vLLM's ExampleConnector announcing evictions of blocks it never announced stored.

``UnannouncedRemovalConnector`` is vLLM 0.32's ExampleConnector, unchanged but for its KV events: when a request
finishes it hands vLLM's scheduler (``take_events``) a ``BlockRemoved`` of the request's first block, as a connector
whose store evicts would, while it never hands a ``BlockStored`` of it, the regression of a connector whose store
announcements are lost (or never written) while its evictions still go out. A KV-aware router is told to drop a
block it was never told of. Its loads and stores are ExampleConnector's, so the round-trip's bytes compare equal: only
the scheduler driver's judging of the events vLLM publishes catches it (conformance/engine/published.py), in every
check that drives vLLM's scheduler, the round-trip included.
"""

from __future__ import annotations

from vllm.distributed.kv_events import BlockRemoved, BlockStored
from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector
from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash

MEDIUM = "STORAGE"  # vllm.distributed.kv_events.MEDIUM_STORAGE: ExampleConnector's folder on disk


class UnannouncedRemovalConnector(ExampleConnector):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._unannounced: list[BlockRemoved] = []

    def request_finished(self, request, block_ids):
        """ExampleConnector's answer (base.py's: blocks not kept), with the removal of the request's first block
        queued (the edit: no BlockStored of it was ever queued)."""
        if request.block_hashes:
            self._unannounced.append(BlockRemoved(block_hashes=[maybe_convert_block_hash(request.block_hashes[0])],
                                                  medium=MEDIUM))
        return super().request_finished(request, block_ids)

    def take_events(self):
        events, self._unannounced = self._unannounced, []
        return events


class ListedWorkerEventsConnector(ExampleConnector):
    """vLLM 0.32's ExampleConnector whose worker hands vLLM's runner the blocks it saved each step as a plain list of
    ``BlockStored`` from ``get_kv_connector_kv_cache_events`` (the edit), not the ``KVConnectorKVEvents`` base.py
    promises: vLLM's runner carries the value in ``KVConnectorOutput.kv_cache_events`` to the scheduler side's
    ``update_connector_output``, where a connector that aggregates its workers' events (as LMCacheConnector does)
    calls ``get_all_events()`` on it. Its bytes are ExampleConnector's; the runner stand-in carries the worker's events
    as vLLM's runner does and judges them against base.py's promise."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._saved: list[BlockStored] = []

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs) -> None:
        super().save_kv_layer(layer_name, kv_layer, attn_metadata, **kwargs)
        tokens = [r.token_ids.tolist() for r in self._get_connector_metadata().requests if r.is_store]
        self._saved = [BlockStored(block_hashes=[hash(tuple(ids))], parent_block_hash=None, token_ids=ids,
                                   block_size=len(ids), lora_id=None, medium=MEDIUM, lora_name=None) for ids in tokens]

    def get_kv_connector_kv_cache_events(self):
        events, self._saved = self._saved, []
        return events or None
