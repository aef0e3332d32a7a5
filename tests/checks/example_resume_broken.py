"""A copy of ExampleConnector whose loads of requests resumed from preemption take the wrong tokens.

``ResumedProductConnector`` is vLLM 0.32's ExampleConnector with ``build_connector_meta`` copied and one edit, the
mutant the mutation floor recorded as a survivor (example_connector.py:368): the tokens a resumed request loads are
``request.all_token_ids[:num_computed_tokens * num_new_tokens]`` where vLLM takes ``num_computed_tokens +
num_new_tokens``, the tokens the step will have computed. The product slices the same tokens whenever the step
schedules the rest of the request, so the copy differs only where a resumed request's load is scheduled in part (a
token budget) while its generated tokens carried it past a block boundary: the product's slice reaches a block that
holds generated tokens, the load is keyed on a prefix nothing stored, and ``start_load_kv`` raises
FileNotFoundError. Scenario ``resumed-chunked`` (conformance/workload/scenarios.py) fails it.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import (
    ExampleConnector,
    ExampleConnectorMetadata,
)


class ResumedProductConnector(ExampleConnector):
    """ExampleConnector, a resumed request's load keyed on ``num_computed_tokens * num_new_tokens`` tokens."""

    def build_connector_meta(self, scheduler_output):
        meta = ExampleConnectorMetadata()
        total_need_load = 0
        for new_req in scheduler_output.scheduled_new_reqs:
            token_ids = new_req.prompt_token_ids or []
            mm_hashes = [f.identifier for f in new_req.mm_features]
            if new_req.req_id in self._requests_need_load:
                meta.add_request(token_ids=token_ids, block_ids=new_req.block_ids[0], block_size=self._block_size,
                                 is_store=False, mm_hashes=mm_hashes)
                total_need_load += 1
            elif not self._found_match_for_prompt(token_ids, mm_hashes):
                meta.add_request(token_ids=token_ids, block_ids=new_req.block_ids[0], block_size=self._block_size,
                                 is_store=True, mm_hashes=mm_hashes)

        cached_reqs = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached_reqs.req_ids):
            resumed_from_preemption = req_id in cached_reqs.resumed_req_ids
            if not resumed_from_preemption or req_id not in self._requests_need_load:
                continue
            num_computed_tokens = cached_reqs.num_computed_tokens[i]
            num_new_tokens = scheduler_output.num_scheduled_tokens[req_id]
            new_block_ids = cached_reqs.new_block_ids[i]
            request = self._requests_need_load[req_id]
            total_tokens = num_computed_tokens * num_new_tokens  # the edit: vLLM adds them
            token_ids = request.all_token_ids[:total_tokens]
            assert new_block_ids is not None
            meta.add_request(token_ids=token_ids, block_ids=new_block_ids[0], block_size=self._block_size,
                             is_store=False, mm_hashes=[f.identifier for f in request.mm_features])
            total_need_load += 1

        assert total_need_load == len(self._requests_need_load)
        self._requests_need_load.clear()
        return meta
