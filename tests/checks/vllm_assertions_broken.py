"""Copies of examples/dict_connector.py's DictConnector whose return values trip an assertion in vLLM's scheduler.

vLLM checks these values with bare ``assert`` statements; the suite must fail each copy with a first line that
states the connector's mistake in connector terms (conformance/engine/vllm_assertions.py), vLLM's assertion as the
cause. Profiles: ``vllm_assertions_broken.yaml`` beside this file.
"""

from __future__ import annotations

from examples.dict_connector import DictConnector, block_keys, images_of


class EveryTokenDictConnector(DictConnector):
    """Claims every whole block of the prompt, the last token's included: vLLM has nothing left to compute."""

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        prompt = list(request.prompt_token_ids or [])
        # the original leaves out the last token
        keys = block_keys(self._config_key, images_of(request), prompt, self._block_size)
        hit = 0
        while hit < len(keys) and self._stored(keys[hit]):
            hit += 1
        self._local[request.request_id] = num_computed_tokens
        return max(0, hit * self._block_size - num_computed_tokens), False


class LocalBlindDictConnector(DictConnector):
    """Claims its whole hit without taking off the tokens vLLM's own prefix cache already computed."""

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        tokens, load_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
        return tokens + num_computed_tokens, load_async


class AsyncNothingDictConnector(DictConnector):
    """Answers every lookup as an asynchronous load, a miss included: ``(0, True)``."""

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        tokens, _ = super().get_num_new_matched_tokens(request, num_computed_tokens)
        return tokens, True


class ReportedTransfersDictConnector(DictConnector):
    """DictConnector whose worker reports, from ``get_finished``, the requests ``_reported`` picks for this step
    (sends, loads); unchanged, it reports none, as DictConnector (whose transfers are synchronous) does."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._loading: set[str] = set()

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        super().update_state_after_alloc(request, blocks, num_external_tokens)
        if num_external_tokens > 0:
            self._loading.add(request.request_id)

    def build_connector_meta(self, scheduler_output):
        meta = super().build_connector_meta(scheduler_output)
        meta.scheduled, meta.loading = set(scheduler_output.num_scheduled_tokens), self._loading
        self._loading = set()
        return meta

    def _reported(self, meta) -> tuple[set[str], set[str]]:
        return set(), set()

    def get_finished(self, finished_req_ids):
        sending, receiving = self._reported(self._get_connector_metadata())
        return sending or None, receiving or None


class SendWithoutHoldDictConnector(ReportedTransfersDictConnector):
    """Reports each scheduled request's send finished, though its request_finished returns False (vLLM frees the
    blocks at once and forgets the request)."""

    def _reported(self, meta):
        return meta.scheduled, set()


class SyncLoadReportedDictConnector(ReportedTransfersDictConnector):
    """Reports its synchronous loads received, as if they were asynchronous (load_kv_async is False)."""

    def _reported(self, meta):
        return set(), meta.loading
