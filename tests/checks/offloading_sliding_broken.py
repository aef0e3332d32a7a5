"""vLLM's OffloadingConnector with a wrong hit where a sliding-window group is present, run whole on CPU over
kvconform's CPU-memory medium (conformance/checks/sliding_window_hit.py catches both).

``WholePromptSlidingOffloadingConnector``: its scheduler half's ``_lookup_complete_chunks`` is vLLM 0.32's without the
one token it takes off the hit where the cache has a sliding-window group, so a prompt stored whole (the leading blocks
of a longer stored one) is claimed whole, and vLLM is left no prompt token to compute. The profile
(offloading_sliding_broken.yaml) gives it the cpu-medium variant's settings.

``PowerPaddingSlidingOffloadingConnector``: the window a sliding-window group must hold at a hit's end
(``GroupOffloadConfig.load_window_size_in_chunks``) raises the window's tokens to the power of the tokens the hit falls
short of its chunk's end, where vLLM 0.32 adds them. A hit on a chunk boundary (padding 0) or one token short of it
asks for the same window; from two tokens short the window asked for spans more chunks than the prompt has, so where
the sliding group's chunks held at the hit's end follow one never stored, nothing is a hit. (The mutation floor's
survivor ``offloading/scheduler.py:122`` writes ``** right_padding`` without the parentheses, so its power binds to
``extra_retained_tokens`` alone, and no CPU run tells it apart: floor.yaml says why.) Only groups whose chunks differ
in tokens leave a hit that far inside a sliding group's chunk: its profile gives it the two-block-chunks variant's
settings (two blocks per chunk, without that variant's ``scenarios``, so every situation runs).

The worker half, vLLM's CPU manager and the medium stay vLLM's own and kvconform's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
    GroupOffloadConfig,
    OffloadingConnectorScheduler,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector
from vllm.logger import init_logger
from vllm.utils.math_utils import cdiv, round_down
from vllm.v1.kv_cache_interface import SlidingWindowSpec

from tests.checks.scheduler_halves import OffloadingWithScheduler

if TYPE_CHECKING:
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        RequestGroupState,
        RequestOffloadState,
    )

logger = init_logger("vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler")


class _WholePromptSlidingScheduler(OffloadingConnectorScheduler):
    def _lookup_complete_chunks(
        self,
        req_status: RequestOffloadState,
        max_num_new_tokens: int | None = None,
    ) -> int | None:
        """Find how many tokens beyond num_locally_computed_tokens can be loaded.

        Iterates full-attention groups first (prefix lookup), then sliding-window
        groups (suffix lookup). Each group may tighten max_hit_size_tokens, which
        can invalidate an earlier group's result, so the loop re-runs when that
        happens until num_hit_tokens converges.
        """
        # vLLM 0.32's OffloadingConnectorScheduler._lookup_complete_chunks, with the line marked "the bug" changed
        num_computed_tokens = req_status.num_locally_computed_tokens
        max_hit_size_tokens: int = req_status.req.num_tokens
        if max_num_new_tokens is not None:
            max_hit_size_tokens = min(
                max_hit_size_tokens, num_computed_tokens + max_num_new_tokens
            )
        if req_status.max_load_tokens is not None:
            max_hit_size_tokens = min(
                max_hit_size_tokens,
                num_computed_tokens + req_status.max_load_tokens,
            )
        if self._sliding_window_groups:
            # the last prompt token has to be recomputed to get the logprobs
            # for sliding window attention, we must reduce by 1 to make sure
            # we still have a hit after reduction
            pass  # the bug: was max_hit_size_tokens -= 1, so a hit may cover every prompt token
            if self._mamba_align_size is not None:
                # Constrain hit-window to the mamba block size.
                max_hit_size_tokens = round_down(
                    max_hit_size_tokens, self._mamba_align_size
                )

        num_hit_tokens: int = 0
        defer_lookup = False
        lookup_groups = self._lookup_groups

        # Tracks which eagle groups have already popped their volatile trailing chunk
        # in the current convergence iteration. Reset when a non-eagle group
        # tightens the hit boundary, requiring a fresh pop.
        eagle_verified: set[int] = set()
        while lookup_groups:
            looked_up_sliding_window: bool = False
            groups_iter = iter(lookup_groups)
            lookup_groups = ()
            for group_idx in groups_iter:
                group_config: GroupOffloadConfig = self.config.kv_group_configs[
                    group_idx
                ]
                group_state: RequestGroupState = req_status.group_states[group_idx]
                tokens_per_chunk = group_config.tokens_per_chunk
                offload_keys = group_state.offload_keys

                assert (
                    len(offload_keys) >= req_status.req.num_tokens // tokens_per_chunk
                )

                is_eagle_unverified = (
                    group_config.is_eagle_group and group_idx not in eagle_verified
                )

                # Constrain to a chunk-aligned boundary for this group.
                max_hit_size_tokens = min(
                    max_hit_size_tokens, len(offload_keys) * tokens_per_chunk
                )
                if req_status.max_load_tokens is not None:
                    max_hit_size_tokens = round_down(
                        max_hit_size_tokens, tokens_per_chunk
                    )
                if max_hit_size_tokens - num_computed_tokens < tokens_per_chunk:
                    # We can only load less than a chunk, so skip.
                    return 0

                sliding_window_size_in_chunks = (
                    group_config.sliding_window_size_in_chunks
                )

                # For eagle groups, query one extra chunk that will be popped.
                # Widening applies to every group type: without it, the pop
                # below shrinks max_hit_size_tokens past what was queried,
                # which can push the confirmed boundary under a coarser
                # sibling group's chunk granularity and zero the whole
                # request's hit (issue #52735).
                query_max = max_hit_size_tokens
                if is_eagle_unverified:
                    query_max = min(
                        max_hit_size_tokens + tokens_per_chunk,
                        len(offload_keys) * tokens_per_chunk,
                    )

                num_chunks = min(cdiv(query_max, tokens_per_chunk), len(offload_keys))
                start_chunk_idx = num_computed_tokens // tokens_per_chunk
                offload_keys = offload_keys[start_chunk_idx:num_chunks]

                # end index (in the sliced offload_keys) up to which we
                # have backend-confirmed hits
                num_hit_chunks: int | None
                if sliding_window_size_in_chunks is None:
                    num_hit_chunks = self._maximal_prefix_lookup(
                        offload_keys,
                        req_status.req_context,
                        req_status.req,
                        group_config,
                        start_chunk_idx,
                    )
                else:
                    required_window = sliding_window_size_in_chunks
                    if is_eagle_unverified:
                        required_window += 1
                    candidate_end = min(
                        max_hit_size_tokens,
                        (num_chunks - int(is_eagle_unverified)) * tokens_per_chunk,
                    )
                    initial_window = group_config.load_window_size_in_chunks(
                        candidate_end
                    )
                    assert initial_window is not None
                    num_hit_chunks = self._sliding_window_lookup(
                        offload_keys,
                        required_window,
                        req_status.req_context,
                        initial_window + int(is_eagle_unverified),
                    )
                if num_hit_chunks == 0:
                    return 0

                if num_hit_chunks is None:
                    defer_lookup = True
                else:
                    if is_eagle_unverified:
                        num_hit_chunks -= 1
                        eagle_verified.add(group_idx)

                    max_hit_size_tokens = min(
                        max_hit_size_tokens,
                        tokens_per_chunk * (start_chunk_idx + num_hit_chunks),
                    )

                new_num_hit_tokens = max_hit_size_tokens - num_computed_tokens
                if new_num_hit_tokens < tokens_per_chunk:
                    # We can only load less than a chunk, so skip.
                    return 0

                if new_num_hit_tokens < num_hit_tokens:
                    if not group_config.is_eagle_group:
                        eagle_verified.clear()
                    if defer_lookup:
                        # make another iteration on all groups to check
                        # if we still need to defer lookup
                        defer_lookup = False
                        lookup_groups = self._lookup_groups
                    elif looked_up_sliding_window and not lookup_groups:
                        # we need another iteration to confirm previously looked up
                        # sliding window works with the new_num_hit_tokens
                        lookup_groups = self._sliding_window_groups

                looked_up_sliding_window |= sliding_window_size_in_chunks is not None
                num_hit_tokens = new_num_hit_tokens

        if defer_lookup:
            logger.debug(
                "Offloading manager delayed request %s as backend requested",
                req_status.req.request_id,
            )
            return None

        # Possibly delay the request if any hit chunk is already being loaded.
        if self._chunks_being_loaded:
            for group_config, group_state in zip(  # noqa: B905 - vLLM's own line, copied
                self.config.kv_group_configs, req_status.group_states
            ):
                tokens_per_chunk = group_config.tokens_per_chunk
                sliding_window_size_in_chunks = group_config.load_window_size_in_chunks(
                    num_computed_tokens + num_hit_tokens
                )
                offload_keys = group_state.offload_keys
                num_chunks = cdiv(
                    num_computed_tokens + num_hit_tokens, tokens_per_chunk
                )
                start_chunk_idx = num_computed_tokens // tokens_per_chunk
                offload_keys = offload_keys[start_chunk_idx:num_chunks]
                if sliding_window_size_in_chunks is not None:
                    offload_keys = offload_keys[-sliding_window_size_in_chunks:]
                if any(key in self._chunks_being_loaded for key in offload_keys):
                    # Hit chunks are being loaded, so delay the request.
                    logger.debug(
                        "Delaying request %s since some of its"
                        " chunks are already being loaded",
                        req_status.req.request_id,
                    )
                    return None

        logger.debug(
            "Request %s hit %s offloaded tokens after %s GPU hit tokens",
            req_status.req.request_id,
            num_hit_tokens,
            num_computed_tokens,
        )

        return num_hit_tokens


class WholePromptSlidingOffloadingConnector(OffloadingWithScheduler):
    scheduler_class = _WholePromptSlidingScheduler


class _PowerPaddingGroupConfig(GroupOffloadConfig):
    __slots__ = ()

    def load_window_size_in_chunks(self, num_tokens: int) -> int | None:
        # vLLM 0.32's GroupOffloadConfig.load_window_size_in_chunks, with the line marked "the bug" changed
        window = self.sliding_window_size_in_chunks
        if isinstance(self.kv_cache_spec, SlidingWindowSpec):
            assert window is not None
            # Lookup rounds the right edge up, but allocation retains the
            # window ending at the actual hit boundary, possibly one chunk left.
            right_padding = -num_tokens % self.tokens_per_chunk
            window = max(
                window,
                cdiv(
                    (
                        self.kv_cache_spec.sliding_window
                        - 1
                        + self.kv_cache_spec.extra_retained_tokens
                    )
                    ** right_padding,  # the bug: was + right_padding
                    self.tokens_per_chunk,
                ),
            )
        return window


class PowerPaddingSlidingOffloadingConnector(OffloadingConnector):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        scheduler = self.connector_scheduler
        if scheduler is not None:  # its scheduler half's group settings, each with the wrong window
            scheduler.config = scheduler.config._replace(kv_group_configs=tuple(
                _PowerPaddingGroupConfig(*group) for group in scheduler.config.kv_group_configs))
