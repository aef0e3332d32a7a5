"""vLLM's OffloadingConnector whose stores take a chunk's blocks from the wrong places when a chunk has more than
two blocks, run whole on CPU over kvconform's CPU-memory medium (the sliding-window hit's mid-chunk-hit situation on
the three-block-chunks settings catches it).

``XorOffsetChunksOffloadingConnector``: its scheduler half's ``_build_store_jobs`` is vLLM 0.32's with a chunk's
block offsets combined with ``^`` where vLLM adds them (``chunk_idx * blocks_per_chunk ^ i`` for ``+ i``: the mutation
floor's survivor ``offloading/scheduler.py:1779``). The two agree wherever the chunk's first block index has no bit in
common with the offsets: always at one block per chunk, and at two (an even first index, offsets 0 and 1). At three
blocks per chunk the second chunk's store (blocks 3, 4, 5) reads blocks 3, 2, 1, so the offloaded chunk holds the
first chunk's bytes in its last two blocks, and a later hit loads them there. The claim and the transfer jobs' sizes
are unchanged: only the loaded bytes tell. The profile (offloading_chunks_broken.yaml) gives it the three-block-chunks
variant's settings without its ``scenarios``, so every sliding-window hit situation runs; the worker half, vLLM's CPU
manager and the medium stay vLLM's own and kvconform's.
"""

from __future__ import annotations

from itertools import chain

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import TransferJob
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import _ConnectorMetricName
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
    OffloadingConnectorScheduler,
    TransferJobStatus,
)
from vllm.logger import init_logger
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.kv_offload.base import GPULoadStoreSpec, OffloadKey
from vllm.v1.request import RequestStatus

from tests.checks.scheduler_halves import OffloadingWithScheduler

logger = init_logger("vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler")


class _XorOffsetChunksScheduler(OffloadingConnectorScheduler):
    def _build_store_jobs(
        self,
        scheduler_output: SchedulerOutput,
    ) -> dict[int, TransferJob]:
        # vLLM 0.32's OffloadingConnectorScheduler._build_store_jobs, with the line marked "the bug" changed
        blocks_per_chunk = self.config.blocks_per_chunk
        store_jobs: dict[int, TransferJob] = {}
        for req_id in chain(
            scheduler_output.num_scheduled_tokens,
            scheduler_output.finished_req_ids or (),
        ):
            req_status = self._req_status.get(req_id)
            if req_status is None:
                continue
            req = req_status.req

            if req.status is RequestStatus.FINISHED_ABORTED:
                num_tokens_after_batch = req.num_computed_tokens
            elif req.is_finished():
                # Clamp to the GPU prefix cache's commit point. The final sampled
                # token's slot is never committed (under spec decode it holds a
                # rejected draft's KV), so a block ending there must not be stored.
                num_tokens_after_batch = max(req.num_prompt_tokens, req.num_tokens - 1)
            else:
                num_scheduled_tokens = scheduler_output.num_scheduled_tokens[req_id]
                num_tokens_after_batch = req.num_computed_tokens + num_scheduled_tokens

            num_offloadable_tokens = self._calc_num_offloadable_tokens(
                req_status, num_tokens_after_batch
            )
            prompt_offloadable_tokens = self._calc_num_offloadable_tokens(
                req_status, req.num_prompt_tokens
            )

            # Filter out chunks skipped due to sliding window attention / SSM
            # or unreachable by the load path's alignment constraints.
            new_offload_keys: list[OffloadKey] = []
            group_store_ranges: list[tuple[int, int]] = []

            reachable_boundaries: tuple[int, ...] = ()
            if self.config.retention_interval is not None:
                reachable_boundaries = (req.num_prompt_tokens - 1,)
                if req.shared_prefix_boundary:
                    reachable_boundaries += (req.shared_prefix_boundary,)

            for group_config, group_state in zip(  # noqa: B905 - vLLM's own line, copied
                self.config.kv_group_configs, req_status.group_states
            ):
                num_chunks = req_status.storable_chunks(
                    group_config, group_state, num_offloadable_tokens
                )

                start_chunk_idx = group_state.next_stored_chunk_idx
                prompt_horizon_chunks = (
                    prompt_offloadable_tokens // group_config.tokens_per_chunk
                )
                final_swa_alignment_blocks = self._final_swa_alignment_blocks(
                    group_config
                )
                reconsider_final_swa_tail = (
                    req.is_finished()
                    and num_chunks != prompt_horizon_chunks
                    and self.config.retention_interval is None
                    and final_swa_alignment_blocks is not None
                )
                if (
                    self.config.retention_interval is not None
                    or group_config.is_eagle_group
                ):
                    store_horizon_chunks = None
                elif req.is_finished():
                    store_horizon_chunks = num_chunks
                elif num_chunks <= prompt_horizon_chunks:
                    store_horizon_chunks = prompt_horizon_chunks
                else:
                    # An active decode frontier is not a final request
                    # boundary. Only fixed alignment tails are reachable.
                    store_horizon_chunks = None
                if reconsider_final_swa_tail:
                    assert final_swa_alignment_blocks is not None
                    horizon_blocks = num_chunks * blocks_per_chunk
                    partial_segment_start_block = (
                        horizon_blocks - horizon_blocks % final_swa_alignment_blocks
                    )
                    partial_segment_start_chunk = (
                        partial_segment_start_block // blocks_per_chunk
                    )
                    start_chunk_idx = min(start_chunk_idx, partial_segment_start_chunk)
                group_store_ranges.append((start_chunk_idx, num_chunks))

                if group_config.requires_cow_source:
                    continue

                if num_chunks <= start_chunk_idx:
                    continue
                offload_keys = group_state.offload_keys[start_chunk_idx:num_chunks]
                # For each chunk, take the last corresponding GPU block. For
                # blocks_per_chunk=3 and GPU block IDs 1 5 6 7 2 4 9 3 8,
                # this selects GPU blocks 6 4 8.
                # A block_id of 0 means either a sliding window / SSM skip
                # or a stale entry that was zeroed out — skip it either way.
                offload_block_ids = group_state.block_ids[
                    start_chunk_idx * blocks_per_chunk
                    + blocks_per_chunk
                    - 1 : num_chunks * blocks_per_chunk : blocks_per_chunk
                ]
                assert len(offload_keys) == len(offload_block_ids)

                # Use reachable_block_mask to filter unreachable chunks
                # (SWA/Mamba sparsity + retention interval).
                # reachable_block_mask operates in KV-block coordinates,
                # so convert chunk indices to block indices.
                block_mask = self._reachable_store_block_mask(
                    group_config=group_config,
                    start_chunk_idx=start_chunk_idx,
                    end_chunk_idx=num_chunks,
                    final_segment_end_chunk_idx=store_horizon_chunks,
                    reachable_boundaries=reachable_boundaries,
                )

                prompt_horizon_block_mask: list[bool] | None = None
                if reconsider_final_swa_tail:
                    prompt_horizon_block_mask = self._reachable_store_block_mask(
                        group_config=group_config,
                        start_chunk_idx=start_chunk_idx,
                        end_chunk_idx=num_chunks,
                        final_segment_end_chunk_idx=prompt_horizon_chunks,
                        reachable_boundaries=reachable_boundaries,
                    )

                for key_idx, (offload_key, block_id) in enumerate(
                    zip(offload_keys, offload_block_ids)  # noqa: B905 - vLLM's own line, copied
                ):
                    if block_id == 0:
                        continue
                    abs_chunk_idx = start_chunk_idx + key_idx
                    if (
                        reconsider_final_swa_tail
                        and abs_chunk_idx < group_state.next_stored_chunk_idx
                        and (
                            prompt_horizon_block_mask is None
                            or any(
                                prompt_horizon_block_mask[
                                    key_idx * blocks_per_chunk + block_idx
                                ]
                                for block_idx in range(blocks_per_chunk)
                            )
                        )
                    ):
                        continue
                    # A chunk is reachable if any of its constituent
                    # blocks is reachable.
                    if block_mask is not None and not any(
                        block_mask[key_idx * blocks_per_chunk + b]
                        for b in range(blocks_per_chunk)
                    ):
                        continue
                    new_offload_keys.append(offload_key)

            if not new_offload_keys:
                req_status.advance_stored_idx(num_offloadable_tokens)
                continue

            store_output = self.manager.prepare_store(
                new_offload_keys, req_status.req_context
            )
            if store_output is None:
                self._connector_stats.increase_counter(
                    _ConnectorMetricName.ALLOCATION_FAILURE
                )
                logger.warning("Request %s: cannot store chunks", req_id)
                continue

            if not store_output.keys_to_store:
                req_status.advance_stored_idx(num_offloadable_tokens)
                continue

            keys_to_store = set(store_output.keys_to_store)

            group_sizes: list[int] = []
            block_indices: list[int] = []
            src_block_ids: list[int] = []
            fenced_block_ids: list[int] = []
            deferred_fence_block_ids: list[int] = []
            for group_config, group_state, store_range in zip(  # noqa: B905 - vLLM's own line, copied
                self.config.kv_group_configs,
                req_status.group_states,
                group_store_ranges,
            ):
                is_sliding_window = (
                    group_config.sliding_window_size_in_chunks is not None
                )
                start_chunk_idx, num_chunks = store_range
                block_ids = group_state.block_ids
                num_group_blocks = 0
                start_gpu_block_idx: int | None = None
                for idx, offload_key in enumerate(
                    group_state.offload_keys[start_chunk_idx:num_chunks]
                ):
                    if offload_key not in keys_to_store:
                        continue

                    chunk_idx = start_chunk_idx + idx

                    self._events_tracker.record_store(
                        req, group_config, chunk_idx, offload_key
                    )

                    gpu_block_idx = chunk_idx * blocks_per_chunk
                    for i in range(blocks_per_chunk):
                        block_id = block_ids[gpu_block_idx ^ i]  # the bug: was gpu_block_idx + i
                        if block_id == 0:
                            continue
                        if start_gpu_block_idx is None:
                            start_gpu_block_idx = gpu_block_idx + i
                        src_block_ids.append(block_id)
                        num_group_blocks += 1
                        if is_sliding_window:
                            fenced_block_ids.append(block_id)
                        else:
                            deferred_fence_block_ids.append(block_id)

                group_sizes.append(num_group_blocks)
                block_indices.append(start_gpu_block_idx or 0)
                group_state.next_stored_chunk_idx = max(
                    group_state.next_stored_chunk_idx, num_chunks
                )

            src_spec = GPULoadStoreSpec(
                src_block_ids, group_sizes=group_sizes, block_indices=block_indices
            )
            dst_spec = store_output.store_spec

            job_id = self._generate_job_id()
            # a store can only be issued when no load is pending.
            if req_status.transfer_jobs:
                any_jid = next(iter(req_status.transfer_jobs))
                assert self._jobs[any_jid].is_store
            req_status.transfer_jobs.add(job_id)

            # Watch sliding window blocks as they may get evicted
            # before the request finishes
            for bid in fenced_block_ids:
                self._block_id_to_pending_jobs.setdefault(bid, set()).add(job_id)

            # the non-sliding window blocks will be watched only
            # when the request finishes
            self._jobs[job_id] = TransferJobStatus(
                req_id=req_id,
                pending_count=self.config.num_workers,
                keys=set(keys_to_store),
                is_store=True,
                deferred_fence_block_ids=deferred_fence_block_ids,
                fenced_block_ids=fenced_block_ids or None,
            )

            store_jobs[job_id] = TransferJob(
                req_id=req_id, src_spec=src_spec, dst_spec=dst_spec
            )

            logger.debug(
                "Request %s offloading %s chunks upto %d tokens (job %d)",
                req_id,
                len(keys_to_store),
                num_offloadable_tokens,
                job_id,
            )

            if req.is_finished():
                # Register non-sliding-window blocks for flush detection.
                for bid in deferred_fence_block_ids:
                    self._block_id_to_pending_jobs.setdefault(bid, set()).add(job_id)
                    if bid in self._current_batch_allocated_block_ids:
                        self._current_batch_jobs_to_flush.add(job_id)

        return store_jobs



class XorOffsetChunksOffloadingConnector(OffloadingWithScheduler):
    scheduler_class = _XorOffsetChunksScheduler
