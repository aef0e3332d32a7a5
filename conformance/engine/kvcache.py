"""KV cache configs and tensors, from vLLM's own grouping and allocation code.

The suite never writes a cache shape by hand: specs go through vLLM's
``get_kv_cache_config_from_groups`` and tensors through
``vllm.v1.worker.utils.allocate_kv_cache`` in the layout under test, so when vLLM
changes its layout the suite follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..vllm_install import api as vllm_api
from .model import HEAD_SIZE, MLA_HEAD_SIZE, NUM_KV_HEADS

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheConfig, KVCacheSpec

# KV dtype axis: name -> (torch dtype of the cache tensor, CacheConfig.cache_dtype, model dtype)
KV_DTYPES: dict[str, tuple[torch.dtype, str, str]] = {
    "float16": (torch.float16, "auto", "float16"),
    "bfloat16": (torch.bfloat16, "auto", "bfloat16"),
    "float32": (torch.float32, "auto", "float32"),
    # An fp8 KV cache is stored as raw bytes (uint8), as vLLM allocates it.
    "fp8": (torch.uint8, "fp8", "bfloat16"),
}

# Cache dtypes only some checks run (not an axis of every round-trip): fp8's e5m2 encoding, also stored as
# uint8, whose values the fill check decodes by the encoding the cache dtype names.
MORE_KV_DTYPES: dict[str, tuple[torch.dtype, str, str]] = {
    "fp8_e5m2": (torch.uint8, "fp8_e5m2", "bfloat16"),
}
ALL_KV_DTYPES = {**KV_DTYPES, **MORE_KV_DTYPES}

NUM_BLOCKS = 48

# One layer's entry in what ``register_kv_caches`` receives: a tensor, or a hybrid layer's tuple or list of state
# tensors (hybrid_cache.py). A tensor is Any to mypy (torch is not followed), so this alias names the meaning only.
LayerCache = Any


@dataclass(frozen=True)
class CacheShape:
    """One point of the cache axes a check runs on."""

    dtype: str = "float16"
    mla: bool = False
    block_size: int | None = None  # None: the block size vLLM prefers for the backend (resolved by the Rig)
    layout: str | None = None  # a KVCacheLayout name; None: the backend's preferred one

    @property
    def torch_dtype(self) -> torch.dtype:
        return ALL_KV_DTYPES[self.dtype][0]

    @property
    def cache_dtype(self) -> str:
        return ALL_KV_DTYPES[self.dtype][1]

    @property
    def model_dtype(self) -> str:
        return ALL_KV_DTYPES[self.dtype][2]

    def attention_spec(self) -> AttentionSpec:
        if self.mla:
            MLAAttentionSpec = vllm_api.find("MLAAttentionSpec")
            return MLAAttentionSpec(block_size=self.block_size, num_kv_heads=1, head_size=MLA_HEAD_SIZE,
                                    dtype=self.torch_dtype, cache_dtype_str=self.cache_dtype)
        FullAttentionSpec = vllm_api.find("FullAttentionSpec")
        return FullAttentionSpec(block_size=self.block_size, num_kv_heads=NUM_KV_HEADS,
                                 head_size=HEAD_SIZE, dtype=self.torch_dtype)


def preferred_layout(backend_cls: type[Any]) -> str:
    """The layout vLLM would pick for a backend alone: its first supported one."""
    KVCacheLayout = vllm_api.find("KVCacheLayout")

    layouts = backend_cls.supported_kv_cache_layouts()
    name: str = (layouts[0] if layouts else next(iter(KVCacheLayout))).name
    return name


def all_layouts() -> list[str]:
    return [layout.name for layout in vllm_api.find("KVCacheLayout")]


def record_layout(vllm_config: VllmConfig, layout: str) -> None:
    """Resolve the layout the way a worker adopts the engine core's choice."""
    record_kv_cache_layout = vllm_api.find("record_kv_cache_layout")

    record_kv_cache_layout(vllm_config.cache_config, layout)


def build_kv_cache_config(vllm_config: VllmConfig, groups: list[tuple[list[str], KVCacheSpec]],
                          num_blocks: int = NUM_BLOCKS) -> KVCacheConfig:
    """A real KVCacheConfig with ``num_blocks`` blocks for the given (layer names, spec) groups."""
    KVCacheGroupSpec = vllm_api.find("KVCacheGroupSpec")
    get_kv_cache_config_from_groups = vllm_api.find("get_kv_cache_config_from_groups")

    vllm_config.cache_config.num_gpu_blocks_override = num_blocks
    kv_groups = [KVCacheGroupSpec(list(names), spec) for names, spec in groups]
    generous = num_blocks * sum(spec.page_size_bytes * len(names) for names, spec in groups) * 4
    config = get_kv_cache_config_from_groups(vllm_config, kv_groups, generous)
    vllm_config.cache_config.num_gpu_blocks = config.num_blocks
    if vllm_api.has_field("KVCacheConfig.kv_cache_layout"):  # as the engine core hands its layout to the workers
        config.kv_cache_layout = vllm_config.cache_config.kv_cache_layout
    return config


def kernel_block_sizes(kv_cache_config: KVCacheConfig, vllm_config: VllmConfig) -> list[int] | None:
    """Per cache group, the kernel block size vLLM's GPU runner allocates with.

    The runner splits a manager block into the kernel's blocks when the backend's
    kernels take smaller ones (CPU_MLA: 16 under a 32-token block); connectors then
    see views of kernel blocks. Asked of vLLM's own ``prepare_kernel_block_sizes``,
    with the config's attention backend standing for each group's attention layers.
    None (no splitting) when the config names no backend.
    """
    from types import SimpleNamespace

    prepare_kernel_block_sizes = vllm_api.find("prepare_kernel_block_sizes")

    chosen = vllm_config.attention_config.backend
    if chosen is None:
        return None
    backend = chosen.get_class()
    groups = [[SimpleNamespace(backend=backend, kv_cache_spec=group.kv_cache_spec)]
              for group in kv_cache_config.kv_cache_groups]
    sizes: list[int] = prepare_kernel_block_sizes(kv_cache_config, groups)
    return sizes


def allocate(kv_cache_config: KVCacheConfig, vllm_config: VllmConfig, device: str) -> dict[str, torch.Tensor]:
    """Per-layer cache views, as the runner allocates them (kernel block sizes included), on ``device``."""
    allocate_kv_cache = vllm_api.find("allocate_kv_cache")

    layout = vllm_config.cache_config.get_resolved_kv_cache_layout()
    caches: dict[str, torch.Tensor] = allocate_kv_cache(kv_cache_config, torch.device(device), layout,
                                                        kernel_block_sizes(kv_cache_config, vllm_config))
    return caches


def backing_bytes(caches: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Every distinct storage behind the caches, as flat uint8 tensors."""
    seen: dict[int, torch.Tensor] = {}
    for tensor in caches.values():
        for t in tensor if isinstance(tensor, (list, tuple)) else (tensor,):
            storage = t.untyped_storage()
            if storage.data_ptr() not in seen:
                seen[storage.data_ptr()] = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
    return list(seen.values())


def fill_random(caches: dict[str, torch.Tensor], seed: int) -> None:
    """Distinct random bytes in every slot (a fresh seed per cache)."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    for flat in backing_bytes(caches):
        flat.copy_(torch.randint(0, 256, flat.shape, dtype=torch.uint8, generator=generator))


def slot_bytes(view: torch.Tensor, block: int, offset: int) -> torch.Tensor:
    """The bytes of one token slot of a standard ``[B, H, N, C]`` view."""
    return view[block, :, offset].contiguous().view(torch.uint8)
