"""Deliberately broken copies of vLLM connectors, each with a bug behind a pinned finding of the real one.

tests/checks/test_pins_catches.py proves that the suite fails each although the finding it inherits is pinned
(conformance/expectations/any.yaml's globs take connectors named ``*NixlPushConnector`` and ``*ExampleConnector``):
the checks judge the copy's bug apart from the pinned assertion (conformance/checks/verdicts.py), so the pin covers
that assertion alone. When each check stopped at its first failed assertion, each copy failed with the words the
pin expects and passed as the known finding.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector
from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlPushConnector


class HeldEmptyReadNixlPushConnector(NixlPushConnector):
    """The consumer keeps a request that reads nothing (vLLM's empty-receive path in request_finished: aborted
    before it was scheduled, or one that needs no remote block) until the notification that frees the producer has
    gone: its request_finished returns True, as a producer's does for a send. Its worker never sends that
    notification (finding 20) nor reports the request finished_sending, so vLLM holds the request forever.
    Behind test_pair_notify_only's pin (finding 20)."""

    def request_finished_all_groups(self, request, block_ids):  # vLLM's scheduler asks an HMA connector this
        reads_nothing = bool((request.kv_transfer_params or {}).get("do_remote_prefill"))
        delay_free, params = super().request_finished_all_groups(request, block_ids)
        return delay_free or reads_nothing, params


class WriteDroppedNixlPushConnector(NixlPushConnector):
    """The producer never posts its WRITE: its worker's _xfer_blocks returns no handle without a transfer, as for a
    request with no blocks to push, so the consumer's blocks are never written. Behind test_pair_write_failure's pin
    (finding 23: the consumer is not told of a failed WRITE), which it meets for another reason: no WRITE failed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.connector_worker is not None:
            self.connector_worker._xfer_blocks = lambda *args, **kwargs: None


class ScribblingExampleConnector(ExampleConnector):
    """Every load step writes the first slot of the null block (block 0, which no request owns) in each attention
    layer's cache: a stray write. Behind the one-past-block round-trip's pin (the lost hit of a prompt one token past
    a block boundary), which it inherits."""

    def start_load_kv(self, forward_context, **kwargs):
        super().start_load_kv(forward_context, **kwargs)
        for layer in forward_context.no_compile_layers.values():
            cache = getattr(layer, "kv_cache", None)
            if cache is not None:
                cache[0, :, 0] = 1
