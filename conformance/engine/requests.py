"""A request as vLLM's engine hands it to the scheduler: a real ``Request`` with its block hasher.

vLLM's input processor builds each ``vllm.v1.request.Request`` with a block hasher
made from the cache config (block size, prefix-caching hash algorithm) after
seeding the "none" hash; prefix caching and every connector that keys on block
hashes read those hashes. The scheduler driver, the contract checks and the P/D
pair all build requests, so how is decided here once. A request may carry images
(``Image``: vLLM's ``MultiModalFeatureSpec`` with its hash and placeholder range),
whose identifiers vLLM's block hashes and some connectors' keys include.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..vllm_install import api as vllm_api

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.multimodal.inputs import MultiModalFeatureSpec
    from vllm.v1.request import Request

BlockHasher = Callable[[Any], list[Any]]  # a request -> its new block hashes (vLLM's BlockHash values)


def block_hasher(vllm_config: VllmConfig, hash_block_size: int | None = None) -> BlockHasher:
    """The request block hasher the engine uses for ``vllm_config``'s cache (seeds vLLM's none-hash first).

    ``hash_block_size``: the engine core's (``engine/block_sizes.py``) when groups differ in block size;
    None: the cache's block size, which it is otherwise."""
    get_hash_fn_by_name = vllm_api.find("get_hash_fn_by_name")
    init_none_hash = vllm_api.find("init_none_hash")
    get_request_block_hasher = vllm_api.find("get_request_block_hasher")

    cache_config = vllm_config.cache_config
    hash_fn = get_hash_fn_by_name(cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher: BlockHasher = get_request_block_hasher(hash_block_size or cache_config.block_size, hash_fn)
    return hasher


@dataclass(frozen=True)
class Image:
    """One image in a prompt: the hash vLLM's input processor gives its pixels, and the prompt tokens it fills.

    The placeholder tokens are the prompt's own ids (an image's placeholder ids are the same for every image
    of a model), so two prompts with equal token ids and different images differ only in ``identifier``."""

    identifier: str
    offset: int
    length: int

    def feature(self) -> MultiModalFeatureSpec:
        """vLLM's ``MultiModalFeatureSpec`` for it, as the engine core receives it: no pixel data (a cached item),
        and no encoder output to compute (``is_embed`` all False: no model encoder runs here, and vLLM's scheduler
        then schedules no encoder work), while its hash and placeholder range reach block hashes and connectors."""
        import torch

        feature_spec, placeholder_range = vllm_api.find("MultiModalFeatureSpec"), vllm_api.find("PlaceholderRange")
        position = placeholder_range(offset=self.offset, length=self.length,
                                     is_embed=torch.zeros(self.length, dtype=torch.bool))
        return feature_spec(data=None, modality="image", identifier=self.identifier, mm_position=position,
                            mm_hash=self.identifier)


def new_request(request_id: str, prompt: list[int], hasher: BlockHasher, max_tokens: int = 1,
                kv_transfer_params: dict[str, Any] | None = None, stop_token_ids: list[int] | None = None,
                images: tuple[Image, ...] = (), prompt_logprobs: int | None = None) -> Request:
    """A greedy ``Request`` for ``prompt``; ``kv_transfer_params`` ride in the sampling params' ``extra_args``,
    as vLLM's API server passes them through to the connector; a sampled ``stop_token_ids`` token ends it
    (``FINISHED_STOPPED``) before ``max_tokens`` would (``FINISHED_LENGTH_CAPPED``); ``images`` (in prompt
    order) become its ``mm_features``; ``prompt_logprobs`` asks for the prompt's logprobs, for which vLLM reads
    no cached prefix, the connector's included."""
    from vllm.sampling_params import SamplingParams

    Request = vllm_api.find("Request")
    extra = {"kv_transfer_params": dict(kv_transfer_params)} if kv_transfer_params is not None else None
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, extra_args=extra,
                            stop_token_ids=stop_token_ids, prompt_logprobs=prompt_logprobs)
    features = [image.feature() for image in images] or None
    return Request(request_id, list(prompt), params, None, block_hasher=hasher, mm_features=features)
