"""Deliberately broken copies of vLLM's MultiConnector, each mishandling one thing it carries between vLLM and its
children (tests/checks/test_wrapper_catches.py runs them).

The first, a wrapper whose bind leaves its own flag unset: vLLM's attention layers call ``wait_for_layer_load`` and
``save_kv_layer`` only while the connector ``has_connector_metadata()`` (``kv_transfer_utils.maybe_transfer_kv_layer``).
A wrapper that binds its children's metadata but not its own answers False, so under vLLM no layer is ever saved
through it. The others are described on their classes.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.multi_connector import MultiConnector, MultiKVConnectorStats


class UnflaggedMultiConnector(MultiConnector):
    """Binds each child's metadata, never its own: ``has_connector_metadata()`` stays False."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        # vLLM's config knows MultiConnector's children decide its HMA support only by the registered name
        # (KVConnectorFactory.supports_hma_config); a copy under its own name gets what vLLM decides for the
        # original over ExampleConnector children: no hybrid KV cache manager
        vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True
        super().__init__(vllm_config, role, kv_cache_config)

    def bind_connector_metadata(self, connector_metadata) -> None:
        for child, metadata in zip(self._connectors, connector_metadata.metadata, strict=True):
            child.bind_connector_metadata(metadata)


class FirstChildFinishMultiConnector(MultiConnector):
    """Reports a request's saves finished when its first child does, ignoring the saves other children still have
    in flight (``_extra_async_saves``): vLLM frees the blocks while a slower child has yet to read them."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True  # as UnflaggedMultiConnector's
        super().__init__(vllm_config, role, kv_cache_config)

    def get_transfer_results(self, finished_req_ids):
        self._extra_async_saves.clear()
        return super().get_transfer_results(finished_req_ids)


class EmptyBlocksMultiConnector(MultiConnector):
    """Hands the children it does not load from empty blocks, as MultiConnector did before it passed every child
    the request's real blocks: a child that stores from the blocks it is handed stores nothing."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True  # as UnflaggedMultiConnector's
        super().__init__(vllm_config, role, kv_cache_config)

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        chosen = self._requests_to_connector.get(request.request_id, -1)
        for i, child in enumerate(self._connectors):
            child.update_state_after_alloc(request, blocks if i == chosen else blocks.new_empty(),
                                           num_external_tokens if i == chosen else 0)


class StopsAtFailedShutdownMultiConnector(MultiConnector):
    """Shuts its children down one after another with nothing to catch a child's error: once one child's shutdown
    raises, the children after it are never shut down (their threads, sockets and buffers left running)."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True  # as UnflaggedMultiConnector's
        super().__init__(vllm_config, role, kv_cache_config)

    def shutdown(self) -> None:
        for child in self._connectors:
            child.shutdown()


class FirstChildResetMultiConnector(MultiConnector):
    """Forwards a cache reset to its first child only, and answers with that child's answer: the other children
    keep what vLLM's ``reset_prefix_cache(reset_connector=True)`` was meant to drop."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True  # as UnflaggedMultiConnector's
        super().__init__(vllm_config, role, kv_cache_config)

    def reset_cache(self) -> bool:
        return self._connectors[0].reset_cache() is not False


class LastStatsWinMultiConnector(MultiConnector):
    """Groups its children's transfer stats by class, each child's replacing the one before of its class instead of
    merging with it: over two children of one class, the first child's transfers vanish from vLLM's logs and
    metrics."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True  # as UnflaggedMultiConnector's
        super().__init__(vllm_config, role, kv_cache_config)

    def get_kv_connector_stats(self):
        grouped = None
        for child in self._connectors:
            stats = child.get_kv_connector_stats()
            if stats is not None:
                grouped = grouped if grouped is not None else MultiKVConnectorStats()
                grouped[type(child).__name__] = stats
        return grouped


class FirstChildEventsMultiConnector(MultiConnector):
    """Takes the KV events of its first child only: the blocks the other children store are never published to vLLM's
    event publisher, so KV-aware routers route on stale state."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True  # as UnflaggedMultiConnector's
        super().__init__(vllm_config, role, kv_cache_config)

    def take_events(self):
        yield from self._connectors[0].take_events()


class DroppedLoadErrorsMultiConnector(MultiConnector):
    """Reports the blocks its first child failed to load only: another child's failed blocks never reach vLLM's
    scheduler, which takes the garbage they hold for computed KV."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True  # as UnflaggedMultiConnector's
        super().__init__(vllm_config, role, kv_cache_config)

    def get_block_ids_with_load_errors(self):
        return self._connectors[0].get_block_ids_with_load_errors()


class LastHitMultiConnector(MultiConnector):
    """Assigns a request to the last child that claims a hit instead of the first (vLLM 0.32's lookup with ``>=`` for
    ``==``, a survivor of the mutation floor): where two children hold the prompt, the last one loads it, though
    vLLM's MultiConnector loads from the first in the config's order."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True  # as UnflaggedMultiConnector's
        super().__init__(vllm_config, role, kv_cache_config)

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        to_return = (0, False)
        for i, c in enumerate(self._connectors):
            toks, load_async = c.get_num_new_matched_tokens(request, num_computed_tokens)
            if toks is None:
                return (None, False)
            if to_return[0] >= 0 and toks > 0:  # the fault: `>=` for `==`, so each later hit takes the request
                self._requests_to_connector[request.request_id] = i
                to_return = (toks, load_async)
        return to_return
