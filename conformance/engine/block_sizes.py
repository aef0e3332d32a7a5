"""Block sizes per KV cache group, resolved as vLLM's engine core resolves them after planning.

When a model's layers have different page sizes, vLLM's planner (``unify_kv_cache_spec_page_size``)
scales up the block size of the smaller pages, so groups hold different numbers of tokens per block.
The engine core then sets ``cache_config.block_size`` to the smallest prefix-cacheable group's, runs
the scheduler at the groups' LCM and hashes at their GCD (``resolve_kv_cache_block_sizes``), and records
the hash block size and cache-hit alignment in every KVCacheConfig before any connector is built (vLLM
0.31 has neither field, so there the stand-in records nothing either). A stand-in that skipped this would
judge a connector's per-group block arithmetic against a scheduler vLLM never runs. With one block size
for every group it is all a no-op.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..vllm_install import api as vllm_api

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig


def engine_block_sizes(vllm_config: VllmConfig, kv_cache_config: KVCacheConfig) -> tuple[int, int]:
    """(scheduler block size, hash block size), vLLM's own answer for this config."""
    resolve_kv_cache_block_sizes = vllm_api.find("resolve_kv_cache_block_sizes")

    sizes: tuple[int, int] = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    return sizes


def adopt_engine_block_sizes(vllm_config: VllmConfig, kv_cache_config: KVCacheConfig) -> None:
    """What the engine core writes into the configs once the KV cache is planned."""
    groups = kv_cache_config.kv_cache_groups
    if not groups:
        return
    participating = [g.kv_cache_spec.block_size for g in groups if g.kv_cache_spec.prefix_cacheable]
    vllm_config.cache_config.block_size = min(participating or group_block_sizes(kv_cache_config))
    scheduler_size, hash_size = engine_block_sizes(vllm_config, kv_cache_config)
    if vllm_api.has_field("KVCacheConfig.hash_block_size"):
        kv_cache_config.hash_block_size = hash_size
    if vllm_api.has_field("KVCacheConfig.cache_hit_alignment_tokens"):
        resolve_cache_hit_alignment_tokens = vllm_api.find("resolve_cache_hit_alignment_tokens")
        kv_cache_config.cache_hit_alignment_tokens = resolve_cache_hit_alignment_tokens(
            kv_cache_config, vllm_config, scheduler_size, hash_size)


def group_block_sizes(kv_cache_config: KVCacheConfig) -> list[int]:
    """Tokens per block of each group, in group order."""
    return [group.kv_cache_spec.block_size for group in kv_cache_config.kv_cache_groups]
