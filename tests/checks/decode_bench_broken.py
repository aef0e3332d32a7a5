"""Deliberately broken copies of vLLM's DecodeBenchConnector, one bug class each.

The fill checks must fail every one of them (tests/checks/test_fill_catches.py).
Each class replaces only the code that carries its bug; their profiles are
DecodeBenchConnector's (decode_bench_broken.yaml beside this file).
"""

from __future__ import annotations

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.decode_bench_connector import (
    DecodeBenchConnector,
    DecodeBenchConnectorScheduler,
    DecodeBenchConnectorWorker,
    _get_fp8_dtype,
)
from vllm.platforms import current_platform
from vllm.v1.kv_cache_interface import CircularBufferSpec, iter_layer_specs


class _WithWorker(DecodeBenchConnector):
    """DecodeBenchConnector whose worker (or scheduler) half is a subclass carrying the bug."""

    worker_class = DecodeBenchConnectorWorker
    scheduler_class = DecodeBenchConnectorScheduler

    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        if role == KVConnectorRole.WORKER:
            self.connector_worker = self.worker_class(vllm_config, kv_cache_config)
        else:
            self.connector_scheduler = self.scheduler_class(vllm_config, kv_cache_config)


class _EveryLayerIsATensor(DecodeBenchConnectorWorker):
    def _fill_blocks(self, group_idx, block_ids, num_tokens):
        if not block_ids:
            return
        fill_mean, fill_std = (0.0, 0.0) if group_idx in self._zero_fill_group_ids else (self.fill_mean, self.fill_std)
        for layer_name in self.group_to_layers.get(group_idx, []):
            kv_cache = self.kv_caches[layer_name]
            ids = torch.tensor(block_ids, dtype=torch.long, device=kv_cache.device)
            ids = ids[ids < kv_cache.shape[0]]
            fill_dtype = self._fp8_dtypes.get(layer_name, kv_cache.dtype)
            values = self._make_fill_values((len(ids),) + kv_cache.shape[1:], kv_cache.device, fill_dtype,
                                            fill_mean, fill_std)
            kv_cache[ids] = values.view(kv_cache.dtype)


class DeviceOfEveryLayerConnector(_WithWorker):
    """vLLM PR #45080's bug: ``kv_cache.device`` on every layer; a list/tuple of state tensors crashes."""

    worker_class = _EveryLayerIsATensor


class _StatesLeftAlone(DecodeBenchConnectorWorker):
    def _fill_tensor(self, kv_cache, fill_mean, fill_std, fill_dtype):
        return  # the state tensors of list/tuple entries are never written


class UnfilledStatesConnector(_WithWorker):
    """Accepts list/tuple entries without crashing but leaves their state tensors as they were."""

    worker_class = _StatesLeftAlone


class _WholeBlockTable(DecodeBenchConnectorScheduler):
    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        super().update_state_after_alloc(request, blocks, num_external_tokens)
        pending = self._pending_fills.get(request.request_id)
        if pending is not None:
            table = tuple([block.block_id for block in group] for group in blocks.blocks)
            self._pending_fills[request.request_id] = (table, pending[1])


class NullBlockFillConnector(_WithWorker):
    """Fills every entry of the request's block table, not just the blocks of its external tokens: the
    null block (block 0, which no request owns; it stands in for blocks outside a sliding window and
    Mamba's dropped states) included."""

    scheduler_class = _WholeBlockTable


class _NoStartupFill(DecodeBenchConnectorWorker):
    def _fill_all_kv_caches(self):
        return  # the worker keeps the caches but never fills them; the scheduler still skips the groups per request


class SkippedStartupFillConnector(_WithWorker):
    """startup_fill honoured by the scheduler half only: it leaves the startup groups out of every request's
    fill, but the worker half never fills them at registration, so they keep whatever the model left there."""

    worker_class = _NoStartupFill


def _every_group_but_circular(kv_cache_config):
    return {index for index, group in enumerate(kv_cache_config.kv_cache_groups)
            if not any(isinstance(spec, CircularBufferSpec) for spec in iter_layer_specs(group.kv_cache_spec))}


class _StartupIgnoresZeroingScheduler(DecodeBenchConnectorScheduler):
    def __init__(self, vllm_config, kv_cache_config):
        super().__init__(vllm_config, kv_cache_config)
        if self.startup_fill:
            self._startup_fill_group_ids = _every_group_but_circular(kv_cache_config)


class _StartupIgnoresZeroingWorker(DecodeBenchConnectorWorker):
    def __init__(self, vllm_config, kv_cache_config):
        super().__init__(vllm_config, kv_cache_config)
        if self.startup_fill:
            self._startup_fill_group_ids = _every_group_but_circular(kv_cache_config)


class StartupFillsZeroedGroupsConnector(_WithWorker):
    """startup_fill covers attention groups even where vLLM zeroes new blocks before use (Mamba layers beside
    them): the engine's zeroing wipes that fill, and no request fills its attention blocks."""

    worker_class = _StartupIgnoresZeroingWorker
    scheduler_class = _StartupIgnoresZeroingScheduler


class _LooksUpEveryLayer(DecodeBenchConnectorWorker):
    def _fill_blocks(self, group_idx, block_ids, num_tokens):
        if block_ids:
            for layer_name in self.group_to_layers.get(group_idx, []):
                self.kv_caches[layer_name]  # noqa: B018  # every layer of the group is assumed registered
        super()._fill_blocks(group_idx, block_ids, num_tokens)


class UnregisteredLayerCrashConnector(_WithWorker):
    """Looks each of a group's layers up in the registered caches without checking it is there: a layer of the
    KV cache config that register_kv_caches did not receive raises KeyError in the step that fills."""

    worker_class = _LooksUpEveryLayer


class _PlatformFp8Worker(DecodeBenchConnectorWorker):
    def __init__(self, vllm_config, kv_cache_config):
        super().__init__(vllm_config, kv_cache_config)
        self._fp8_dtypes = {layer: current_platform.fp8_dtype() for layer in self._fp8_dtypes}


class PlatformFp8OnlyConnector(_WithWorker):
    """Encodes every fp8 cache's fill in the platform's fp8 (e4m3), whatever encoding the cache dtype names: an
    fp8_e5m2 cache then holds bytes that decode to other values."""

    worker_class = _PlatformFp8Worker


class _GroupSpecFp8Worker(DecodeBenchConnectorWorker):
    def __init__(self, vllm_config, kv_cache_config):
        super().__init__(vllm_config, kv_cache_config)
        self._fp8_dtypes = {}
        for group in kv_cache_config.kv_cache_groups:  # the group's spec, not each layer's
            fp8_dtype = _get_fp8_dtype(group.kv_cache_spec, vllm_config.cache_config.cache_dtype)
            if fp8_dtype is not None:
                self._fp8_dtypes.update(dict.fromkeys(group.layer_names, fp8_dtype))


class GroupSpecFp8Connector(_WithWorker):
    """Asks each group's spec, not each layer's, whether a cache holds fp8: a group of layers of several head
    sizes (UniformTypeKVCacheSpecs) is no attention spec, so its fp8 pages are filled as raw bytes (zeros)."""

    worker_class = _GroupSpecFp8Worker


class _StopsAtStartupGroupScheduler(DecodeBenchConnectorScheduler):
    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        super().update_state_after_alloc(request, blocks, num_external_tokens)
        pending = self._pending_fills.get(request.request_id)
        if pending is None or not self._startup_fill_group_ids:
            return
        # what vLLM 0.32's per-group loop hands on with `break` for the `continue` after a startup group (line 338)
        kept = (*pending[0][:min(self._startup_fill_group_ids)], [])
        if any(kept):
            self._pending_fills[request.request_id] = (kept, pending[1])
        else:  # as the loop's caller returns when no group has blocks to fill
            del self._pending_fills[request.request_id]


class StopsAtStartupGroupConnector(_WithWorker):
    """startup_fill: the scheduler's per-group loop stops at the first group filled at startup (``break`` for
    ``continue``), so every group after it is left out of the request's fill. It shows only where a startup group
    precedes a group filled per request: state layers before attention, as in Qwen3-Next or Nemotron-H."""

    scheduler_class = _StopsAtStartupGroupScheduler


class _LastDimensionBoundWorker(DecodeBenchConnectorWorker):
    def _fill_block_tensor(self, kv_cache, block_ids, fill_mean, fill_std, fill_dtype):
        # vLLM 0.32's valid-id mask `block_ids_tensor < kv_cache.shape[0]` with the last dimension for the first
        in_range = [block_id for block_id in block_ids if block_id < kv_cache.shape[-1]]
        super()._fill_block_tensor(kv_cache, in_range, fill_mean, fill_std, fill_dtype)


class LastDimensionBoundConnector(_WithWorker):
    """Drops the block ids at or past the size of a cache tensor's last dimension, not its first (the blocks'): a
    block-indexed tensor's blocks with ids of 64 and more (K|V channels on CPU) are never filled, where a real
    engine's pool has thousands of blocks."""

    worker_class = _LastDimensionBoundWorker
