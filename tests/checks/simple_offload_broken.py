"""vLLM's SimpleCPUOffloadConnector with its scheduler half broken, one mutant (or one situation's bug) each.

Each copy is vLLM 0.32's connector whose ``SimpleCPUOffloadScheduler`` is a subclass. For the hit lookup,
``_LookupScheduler`` carries vLLM's ``get_num_new_matched_tokens``, copied with the expressions the mutants edit as
methods; each broken connector overrides one of them (survivors of conformance/mutation/floor.yaml, written by
hand):

* ``SkippedHashesSimpleOffloadConnector``: ``vllm/v1/simple_kv_offload/manager.py:366:
  core/ReplaceBinaryOperator_FloorDiv_Add:2``: the hashes to
  skip are ``num_computed_tokens + hash_block_size``, so the lookup skips past every stored block and claims none;
* ``WholePromptSimpleOffloadConnector``: ``vllm/v1/simple_kv_offload/manager.py:373:
  core/ReplaceBinaryOperator_Sub_Add:1``: the longest hit is
  ``num_tokens - 1 + num_computed_tokens``, so after a local hit the claim may cover the prompt's last token;
* ``InvertedSkipSimpleOffloadConnector``: ``vllm/v1/simple_kv_offload/manager.py:349: core/AddNot:15``: ``if not
  request.skip_reading_prefix_cache: return 0, False``, so every request that may read the prefix cache is told
  there is no hit.

The stores are broken by overriding one method of vLLM's scheduler half around a call of vLLM's own:

* ``UntokenedEventsSimpleOffloadConnector``: ``vllm/v1/simple_kv_offload/manager.py:665: core/AddNot:45``: the eager
  stores' event metadata is ``[] if not self.enable_kv_cache_events else None``; with KV events enabled (as the
  check runs this family) the metadata is None, so each BlockStored goes out without tokens or parent hash (with
  them disabled the mutant trips vLLM's own ``assert block_meta is not None`` at the first store, a crash the check
  fails on as well; the copy plays the enabled case);
* ``NoPreemptionResetSimpleOffloadConnector``: a preempted request's store state is not reset (the loop over
  ``preempted_req_ids`` in ``_prepare_eager_store_specs`` deleted: vLLM's code runs on the step's output without its
  preempted requests, which a full-attention model uses for nothing else there), so once readmitted its new block
  table is appended to the freed one and the store cursor skips the blocks it computes again: they are never
  offloaded.

The scheduler-half check (conformance/checks/scheduler_half.py) fails each; simple_offload_broken.yaml gives them
SimpleCPUOffloadConnector's settings.
"""

from __future__ import annotations

import copy

from vllm.distributed.kv_transfer.kv_connector.v1.simple_cpu_offload_connector import SimpleCPUOffloadConnector
from vllm.v1.simple_kv_offload.manager import SimpleCPUOffloadScheduler


class _LookupScheduler(SimpleCPUOffloadScheduler):
    def skipped_hashes(self, num_computed_tokens):
        return num_computed_tokens // self.hash_block_size

    def max_hit_len(self, request, num_computed_tokens):
        return request.num_tokens - 1 - num_computed_tokens

    def skips_reading(self, request):
        return request.skip_reading_prefix_cache

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        """vLLM 0.32's, the edited expressions as methods (its comments and warning left out)."""
        if stale := self._pending_cpu_hits.pop(request.request_id, None):
            self._free_pending_cpu_hit(stale)
        if self.skips_reading(request):
            return 0, False
        if num_computed_tokens % self.block_size != 0:
            return 0, False
        num_skipped_hashes = self.skipped_hashes(num_computed_tokens)
        remaining_hashes = request.block_hashes[num_skipped_hashes:]
        if not remaining_hashes:
            return 0, False
        max_hit_len = self.max_hit_len(request, num_computed_tokens)
        if max_hit_len <= 0:
            return 0, False
        cpu_hit_blocks, hit_length, _ = self.cpu_coordinator.find_longest_cache_hit(remaining_hashes, max_hit_len)
        if hit_length > 0:
            pin_blocks = [blk for grp in cpu_hit_blocks for blk in grp if not blk.is_null]
            self.cpu_block_pool.touch(pin_blocks)
            self._pending_cpu_hits[request.request_id] = (cpu_hit_blocks, hit_length, num_computed_tokens)
            return hit_length, True
        return 0, False


class _SkippedHashesScheduler(_LookupScheduler):
    def skipped_hashes(self, num_computed_tokens):
        return num_computed_tokens + self.hash_block_size  # the edit: + for //


class _WholePromptScheduler(_LookupScheduler):
    def max_hit_len(self, request, num_computed_tokens):
        return request.num_tokens - 1 + num_computed_tokens  # the edit: + for the second -


class _InvertedSkipScheduler(_LookupScheduler):
    def skips_reading(self, request):
        return not request.skip_reading_prefix_cache  # the edit: not added


class _UntokenedEventsScheduler(SimpleCPUOffloadScheduler):
    def _prepare_eager_store_specs(self, scheduler_output):
        gpu_ids, cpu_ids, req_ids, block_meta = super()._prepare_eager_store_specs(scheduler_output)
        # the edit: the metadata list only where events are off ([] then; vLLM's assert trips on it)
        return gpu_ids, cpu_ids, req_ids, None if self.enable_kv_cache_events else block_meta


class _NoPreemptionResetScheduler(SimpleCPUOffloadScheduler):
    def _prepare_eager_store_specs(self, scheduler_output):
        unpreempted = copy.copy(scheduler_output)
        unpreempted.preempted_req_ids = set()  # the edit: the preempted requests' state reset never runs
        return super()._prepare_eager_store_specs(unpreempted)


class _WithScheduler(SimpleCPUOffloadConnector):
    scheduler_class: type[SimpleCPUOffloadScheduler] = _LookupScheduler

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.scheduler_manager is not None:
            self.scheduler_manager.__class__ = self.scheduler_class


class SkippedHashesSimpleOffloadConnector(_WithScheduler):
    scheduler_class = _SkippedHashesScheduler


class WholePromptSimpleOffloadConnector(_WithScheduler):
    scheduler_class = _WholePromptScheduler


class InvertedSkipSimpleOffloadConnector(_WithScheduler):
    scheduler_class = _InvertedSkipScheduler


class UntokenedEventsSimpleOffloadConnector(_WithScheduler):
    scheduler_class = _UntokenedEventsScheduler


class NoPreemptionResetSimpleOffloadConnector(_WithScheduler):
    scheduler_class = _NoPreemptionResetScheduler
