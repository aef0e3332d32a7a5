"""Deliberately broken copies of vLLM's DecodeBenchConnector that get per-group block arithmetic wrong.

On a hybrid cache whose KV cache groups have different block sizes, a connector
that fills (or saves, or loads) per group must turn token counts into blocks with
each group's own block size. Each copy below uses one block size for every group;
conformance/test_block_sizes.py must fail them (tests/checks/
test_hybrid_block_sizes_catches.py). Their profiles are DecodeBenchConnector's
(hybrid_block_sizes_broken.yaml beside this file).
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.decode_bench_connector import (
    DecodeBenchConnectorScheduler,
)
from vllm.utils.math_utils import cdiv

from tests.checks.scheduler_halves import DecodeBenchWithScheduler


class _FirstGroupsBlockSize(DecodeBenchConnectorScheduler):
    def __init__(self, vllm_config, kv_cache_config):
        super().__init__(vllm_config, kv_cache_config)
        self.group_block_sizes = (self.group_block_sizes[0],) * len(self.group_block_sizes)


class FirstGroupBlockSizeConnector(DecodeBenchWithScheduler):
    """Every group's blocks counted in the first group's block size (a larger one here): too few blocks
    of the smaller groups are filled, and after a prefix hit the hit's own blocks are refilled."""

    scheduler_class = _FirstGroupsBlockSize


class _SlicedInCacheBlockSize(DecodeBenchConnectorScheduler):
    def __init__(self, vllm_config, kv_cache_config):
        super().__init__(vllm_config, kv_cache_config)
        self.block_size = vllm_config.cache_config.block_size

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        if num_external_tokens == 0:
            return
        filled = request.num_tokens - 1
        start, end = (filled - num_external_tokens) // self.block_size, cdiv(filled, self.block_size)
        table = tuple([block.block_id for block in group[start:end] if not block.is_null] for group in blocks.blocks)
        self._filled_requests.add(request.request_id)
        self._pending_fills[request.request_id] = (table, num_external_tokens)


class SlicedBlockSizeConnector(DecodeBenchWithScheduler):
    """Every group's range in the cache config's block size (the smallest group's), cut with a slice, which
    clamps instead of failing: without a local hit the range covers every block the request was allocated in
    the larger group, which is right by luck while the last prompt token (the engine computes it) shares a
    block with the filled ones, and one block too many when it opens a new one; after a prefix hit the larger
    group's range starts past its last block, so its new blocks are never filled."""

    scheduler_class = _SlicedInCacheBlockSize
