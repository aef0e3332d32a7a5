"""ExampleConnector copies that break a promise of the connector API only in a situation a workload reaches.

test_contract asks each method once with hand-made inputs (a fresh request, no output tokens, one finished
request per connector); these copies answer those calls correctly, so only the contract oracle
(conformance/engine/promises.py), which judges every answer in every check that drives vLLM's scheduler,
can fail them: tests/checks/test_oracle_catches.py proves the workload check does, naming the step, the
request, the channel and the value. Profiles: ``oracle_broken.yaml`` beside this file.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector


class PairsParamsConnector(ExampleConnector):
    """Hands a request that decoded more than one token kv_transfer_params as a list of (key, value) pairs,
    where base.py promises ``dict[str, Any] | None`` (an API server reads them as a dict)."""

    def request_finished(self, request, block_ids):
        delay_free, params = super().request_finished(request, block_ids)
        if request.num_output_tokens > 1:
            return delay_free, [("decoded_tokens", request.num_output_tokens)]
        return delay_free, params


class ListRecvingConnector(ExampleConnector):
    """Once a second request has finished, answers get_finished's receiving ids as a list (built from the
    history it keeps as a list), where base.py promises a set or None."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._finished_history: list[str] = []

    def get_finished(self, finished_req_ids):
        sending, recving = super().get_finished(finished_req_ids)
        self._finished_history.extend(sorted(finished_req_ids))
        if len(self._finished_history) > 1 and finished_req_ids:
            return sending, [rid for rid in self._finished_history if rid in (recving or ())]
        return sending, recving
