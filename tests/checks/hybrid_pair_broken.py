"""Deliberately broken copies of vLLM's NixlConnector for hybrid caches.

conformance/test_block_sizes_pair.py must fail them (tests/checks/test_hybrid_block_sizes_catches.py;
TruncatesSkippingNixlConnector, a copy of vLLM 0.32's code: tests/checks/test_hybrid_prefill_catches.py);
their profile is NixlConnector's (hybrid_pair_broken.yaml beside this file).
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlConnector


class FirstGroupOnlyNixlConnector(NixlConnector):
    """Exchanges only the first KV cache group's block ids, as code written for one group does (``block_ids[0]``):
    on both sides every other group's list is empty, so those groups are never transferred."""

    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        if role == KVConnectorRole.SCHEDULER:
            clip = self.connector_scheduler.get_exchange_clipped_blocks

            def first_group_only(block_ids, *args, **kwargs):
                clipped = clip(block_ids, *args, **kwargs)
                return type(clipped)([group if i == 0 else [] for i, group in enumerate(clipped)])

            self.connector_scheduler.get_exchange_clipped_blocks = first_group_only


def _truncate_skipping_requests(scheduler, request):
    """vLLM 0.32's ``_truncate_request_for_prefill`` (nixl/base_scheduler.py:405) with one ``not`` dropped: the
    producer truncates the requests that skip reading the prefix cache, and leaves every other request whole."""
    backoff = scheduler._prefill_backoff()
    params = request.kv_transfer_params
    if (
        backoff
        and params is not None
        and not params.get("_p_side_truncated")
        and request.num_prompt_tokens > backoff
        and request.get_skip_reading_prefix_cache()  # the edit: `not` dropped
    ):
        if request.prompt_token_ids is not None:
            del request.prompt_token_ids[-backoff:]
        elif request.prompt_embeds is not None:
            request.prompt_embeds = request.prompt_embeds[:-backoff]
        else:
            return
        del request._all_token_ids[-backoff:]
        request.num_prompt_tokens -= backoff
        request.max_tokens = 1
        params["_p_side_truncated"] = True


class TruncatesSkippingNixlConnector(NixlConnector):
    """A producer whose prefill stops short where the consumer reads nothing (a request asking for prompt logprobs)
    and runs to the prompt's end where the consumer loads all but the tokens it recomputes (vLLM 0.32's code with
    the ``not`` of its skip_reading_prefix_cache test dropped: a mutant of the mutation floor)."""

    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        if role == KVConnectorRole.SCHEDULER:
            scheduler = self.connector_scheduler
            scheduler._truncate_request_for_prefill = lambda request: _truncate_skipping_requests(scheduler, request)
