"""Copies of vLLM 0.32's Scheduler with one bug each on vLLM's side of the connector path, run with
``--kvconform-scheduler-cls`` (test_scheduler_paths_catches.py).

The connectors are vLLM's own, unchanged: only a check of what vLLM's scheduler hands them catches these.
``SampledBlockFinishedScheduler``: ``_connector_finished`` reserves the slot of the token sampled last (as a
scheduler that allocates the next decode slot ahead would) and hands ``request_finished`` the blocks of every token,
that one included. When the computed tokens fill their blocks exactly, that is one block more, never computed, which
a producer publishes.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1 import SupportsHMA
from vllm.v1.core.sched.scheduler import Scheduler


class SampledBlockFinishedScheduler(Scheduler):
    def _connector_finished(self, request):
        # vLLM 0.32's Scheduler._connector_finished, with the two lines marked "the bug" changed
        if self.connector is None:
            return False, None

        finished_partial_tails = []
        kv_transfer_config = self.vllm_config.kv_transfer_config
        if kv_transfer_config is not None and kv_transfer_config.is_kv_producer:
            finished_partial_tails = self.kv_cache_manager.finalize_partial_tail_offloads(request)

        self.kv_cache_manager.remove_skipped_blocks(
            request_id=request.request_id,
            processed_computed_tokens=max(0, request.num_computed_tokens - request.num_in_flight_tokens),
            num_prompt_tokens=request.num_prompt_tokens,
        )

        if request.num_tokens - request.num_computed_tokens == 1:  # the bug: the sampled token's slot is reserved
            self.kv_cache_manager.allocate_slots(request, 1, delay_cache_blocks=True)
        block_ids = self.kv_cache_manager.get_block_ids_for_computed_tokens(
            request_id=request.request_id,
            num_computed_tokens=request.num_tokens,  # the bug: was request.num_computed_tokens
        )
        partial_tail_delay = False
        if finished_partial_tails:
            partial_tail_delay = self.connector.register_finished_partial_tail(
                request, block_ids, finished_partial_tails)

        if not isinstance(self.connector, SupportsHMA):
            assert len(self.kv_cache_config.kv_cache_groups) == 1
            delay_free, kv_xfer_params = self.connector.request_finished(request, block_ids[0])
        else:
            delay_free, kv_xfer_params = self.connector.request_finished_all_groups(request, block_ids)
        return delay_free or partial_tail_delay, kv_xfer_params
