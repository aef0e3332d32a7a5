"""ExampleConnector subclasses that each break one promise of the connector API.

The contract check must fail every one of them, on the calls that carry the bug
and on no others; tests/checks/test_contract_catches.py proves it. Each class
changes only the answer that carries its bug.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector


class BareIntClaimConnector(ExampleConnector):
    """The claim drops the load-async flag: ``5`` where vLLM unpacks ``(5, False)``."""

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        tokens, _ = super().get_num_new_matched_tokens(request, num_computed_tokens)
        return tokens


class AsyncEmptyClaimConnector(ExampleConnector):
    """Claims to load nothing, asynchronously: base.py says the flag must be False for 0 tokens."""

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        tokens, load_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
        return tokens, load_async or tokens == 0


class DictMetadataConnector(ExampleConnector):
    """The scheduler side sends its metadata's fields as a plain dict, not a KVConnectorMetadata."""

    def build_connector_meta(self, scheduler_output):
        return dict(vars(super().build_connector_meta(scheduler_output)))


class ListFinishedConnector(ExampleConnector):
    """``get_finished`` answers with lists where vLLM expects sets (or None)."""

    def get_finished(self, finished_req_ids):
        sending, recving = super().get_finished(finished_req_ids)
        return list(sending or ()), list(recving or ())


class EchoFinishedConnector(ExampleConnector):
    """Reports every finished request as done loading, including ones it never loaded or saw."""

    def get_finished(self, finished_req_ids):
        return None, set(finished_req_ids)


class EmptyRegistrationCrashConnector(ExampleConnector):
    """Reads the first cache without looking: an empty registration crashes with StopIteration."""

    def register_kv_caches(self, kv_caches):
        self._first_cache = next(iter(kv_caches.values()))
        super().register_kv_caches(kv_caches)
