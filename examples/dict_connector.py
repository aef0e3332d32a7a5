"""DictConnector: a small out-of-tree KV connector, the worked example of testing your own connector.

It keeps KV in one dictionary for the whole process, block by block, the way in-memory and server-backed
stores (LMCache, Mooncake's store) keep it: each whole block of a prompt is stored under a chain hash of
the prompt's blocks up to it, so a later prompt with the same first blocks finds them. Two things make it
correct where such stores commonly go wrong, and kvconform checks both:

* the key includes the engine's configuration (model, and each KV cache group's layers, dtype, heads,
  head size and block size), so an engine never claims or loads KV another configuration saved;
* the key includes the request's images (their hashes, vLLM's ``mm_features``): an image's placeholder
  tokens are the same ids whatever the image, so two prompts alike in token ids may differ in KV;
* it never assumes a device: stored blocks live on the CPU and go back ``.to(`` the cache's own device.

Run it (from the repository root; see docs/testing-your-connector.md)::

    PYTHONPATH=examples python -m pytest --pyargs kvconform.conformance --platform=cpu \
        --connector dict_connector:DictConnector
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

# (configuration and block chain hash) -> layer name -> that block's KV, on the CPU. One for the process: every
# engine built in it shares the store, as engines share a server.
STORE: dict[str, dict[str, torch.Tensor]] = {}


def images_of(request: Any) -> list[str]:
    """The hashes of a request's images (a scheduler ``Request`` or the worker's ``NewRequestData``)."""
    return [feature.identifier for feature in getattr(request, "mm_features", None) or []]


def block_keys(config_key: str, images: list[str], tokens: list[int], block_size: int) -> list[str]:
    """The key of each whole block of ``tokens``: a hash of the configuration, the request's images and every
    token up to the block's end. Every image is in every key: simpler than vLLM's own block hashes, which put an
    image only in the blocks it covers, at the price of no hit across requests with different images."""
    keys, chain = [], hashlib.sha256(repr((config_key, images)).encode())
    for start in range(0, len(tokens) - block_size + 1, block_size):
        chain.update(repr(tokens[start:start + block_size]).encode())
        keys.append(chain.copy().hexdigest())
    return keys


@dataclass
class DictConnectorMetadata(KVConnectorMetadata):
    loads: list[tuple[str, int]] = field(default_factory=list)  # (block key, block id) to copy into the cache
    saves: list[tuple[str, int]] = field(default_factory=list)  # (block key, block id) to copy out of it


@dataclass
class _Tracked:
    """A running request, on the scheduler side: its prompt's block keys and its block ids."""

    keys: list[str]
    block_ids: list[int]
    saved: int = 0  # blocks of the prompt handed to the worker to save so far


class DictConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self._block_size = vllm_config.cache_config.block_size
        groups = kv_cache_config.kv_cache_groups if kv_cache_config is not None else []
        self._layers = [name for group in groups for name in group.layer_names]
        self._config_key = repr((vllm_config.model_config.model,
                                 [(group.layer_names, repr(group.kv_cache_spec)) for group in groups]))
        self._local: dict[str, int] = {}  # request id -> tokens it had computed locally when it asked for a hit
        self._pending_loads: list[tuple[str, int]] = []
        self._tracked: dict[str, _Tracked] = {}

    # ---- scheduler side ---------------------------------------------------------------------------------------

    def _stored(self, key: str) -> bool:
        return len(STORE.get(key, {})) >= max(1, len(self._layers))  # every layer of the block was saved

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int) -> tuple[int | None, bool]:
        prompt = list(request.prompt_token_ids or [])
        # every whole block before the prompt's last token (vLLM computes a prompt's last token itself)
        keys = block_keys(self._config_key, images_of(request), prompt[:len(prompt) - 1], self._block_size)
        hit = 0
        while hit < len(keys) and self._stored(keys[hit]):
            hit += 1
        self._local[request.request_id] = num_computed_tokens
        return max(0, hit * self._block_size - num_computed_tokens), False

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        if num_external_tokens <= 0:
            return
        block_ids = blocks.get_block_ids()[0]
        keys = block_keys(self._config_key, images_of(request), list(request.prompt_token_ids or []), self._block_size)
        first = self._local.get(request.request_id, 0) // self._block_size
        last = first + num_external_tokens // self._block_size
        self._pending_loads += [(keys[i], block_ids[i]) for i in range(first, last)]

    def build_connector_meta(self, scheduler_output) -> KVConnectorMetadata:
        meta = DictConnectorMetadata(loads=self._pending_loads)
        self._pending_loads = []
        for new in scheduler_output.scheduled_new_reqs:
            keys = block_keys(self._config_key, images_of(new), list(new.prompt_token_ids or []), self._block_size)
            self._tracked[new.req_id] = _Tracked(keys, list(new.block_ids[0]))
            self._save_computed(meta, new.req_id, new.num_computed_tokens, scheduler_output)
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            tracked = self._tracked.get(req_id)
            if tracked is None:
                continue
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:  # back from preemption: its block ids are all new
                tracked.block_ids, tracked.saved = list(new_ids[0]) if new_ids else [], 0
            elif new_ids:
                tracked.block_ids += new_ids[0]
            self._save_computed(meta, req_id, cached.num_computed_tokens[i], scheduler_output)
        for req_id in scheduler_output.finished_req_ids:
            self._forget(req_id)
        return meta

    def _save_computed(self, meta: DictConnectorMetadata, req_id: str, computed: int, scheduler_output) -> None:
        """Hand the worker the prompt's whole blocks that this step completes and the store lacks."""
        tracked = self._tracked[req_id]
        done = min(len(tracked.keys), (computed + scheduler_output.num_scheduled_tokens.get(req_id, 0))
                   // self._block_size, len(tracked.block_ids))
        # a block already in the store is not sent again, as shared stores save bandwidth: its KV is the same
        meta.saves += [(tracked.keys[i], tracked.block_ids[i]) for i in range(tracked.saved, done)
                       if not self._stored(tracked.keys[i])]
        tracked.saved = max(tracked.saved, done)

    def _forget(self, req_id: str) -> None:
        self._tracked.pop(req_id, None)
        self._local.pop(req_id, None)

    def request_finished(self, request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        self._forget(request.request_id)
        return False, None  # saved synchronously: vLLM may free the blocks now

    # ---- worker side ------------------------------------------------------------------------------------------

    def start_load_kv(self, forward_context, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, DictConnectorMetadata)
        if not meta.loads:
            return
        keys, block_ids = zip(*meta.loads, strict=True)
        for name, layer in forward_context.no_compile_layers.items():
            kv_cache = getattr(layer, "kv_cache", None)
            if not isinstance(kv_cache, torch.Tensor):
                continue  # a layer without a KV cache, or state that is not block-indexed
            # every block at once, on the cache's own device (never a hard-coded one)
            blocks = torch.stack([STORE[key][name] for key in keys]).to(kv_cache.device)
            kv_cache[torch.tensor(block_ids, device=kv_cache.device)] = blocks

    def wait_for_layer_load(self, layer_name: str) -> None:
        return

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, DictConnectorMetadata)
        if not isinstance(kv_layer, torch.Tensor):
            return
        for key, block_id in meta.saves:
            STORE.setdefault(key, {})[layer_name] = kv_layer[block_id].to("cpu", copy=True)

    def wait_for_save(self) -> None:
        return
