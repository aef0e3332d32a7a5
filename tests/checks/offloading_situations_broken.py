"""vLLM's OffloadingConnector with one scheduler-half bug each, run whole on CPU over kvconform's CPU-memory medium.

Each copy is vLLM 0.32's OffloadingConnector whose scheduler half differs in the smallest piece that carries one
situation of issue 60's CPU-offload family (the worker half, vLLM's CPU manager and the medium stay unmodified;
the profile, offloading_situations_broken.yaml, gives each the cpu-medium variant's settings):

* ``UnfencedFinishOffloadingConnector``: ``request_finished`` no longer fences the blocks of the request's stores
  still in flight, so vLLM hands them to another request before the worker has read them (the workload's
  block-boundary and abort-mid-save scenarios: the medium runs stores two polls late, as a device stream may);
* ``SampledSlotOffloadingConnector``: a finished request's last store reaches its final sampled token, whose KV
  was never computed (vLLM's clamp to ``num_tokens - 1`` dropped; the workload's next-turn scenario).
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import OffloadingConnectorScheduler

from tests.checks.scheduler_halves import OffloadingWithScheduler


class _UnfencedFinishScheduler(OffloadingConnectorScheduler):
    def request_finished(self, request):
        """vLLM 0.32's, without registering the deferred fences of the request's stores in flight (the edit)."""
        req_status = self._req_status.get(request.request_id)
        if req_status is None:
            return super().request_finished(request)
        self._maybe_observe_lookup_async_delay(req_status)
        req_status.update_offload_keys()
        return False, None


class UnfencedFinishOffloadingConnector(OffloadingWithScheduler):
    scheduler_class = _UnfencedFinishScheduler


class _SampledSlotScheduler(OffloadingConnectorScheduler):
    def _build_store_jobs(self, scheduler_output):
        """vLLM 0.32's, a finished request counting its last sampled token as computed (the edit: its
        ``max(num_prompt_tokens, num_tokens - 1)`` clamp read as ``num_tokens``)."""
        finished = [self._req_status[rid].req for rid in scheduler_output.finished_req_ids or ()
                    if rid in self._req_status and self._req_status[rid].req.is_finished()]
        saved = [(req, req.num_prompt_tokens) for req in finished]
        for req in finished:
            req.num_prompt_tokens = req.num_tokens  # max(prompt, num_tokens - 1) becomes num_tokens
        try:
            return super()._build_store_jobs(scheduler_output)
        finally:
            for req, prompt in saved:
                req.num_prompt_tokens = prompt


class SampledSlotOffloadingConnector(OffloadingWithScheduler):
    scheduler_class = _SampledSlotScheduler
