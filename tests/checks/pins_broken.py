"""A deliberately broken copy of vLLM's NixlPushConnector with a bug behind a pinned finding (finding 20).

tests/checks/test_pins_catches.py proves that test_pair_notify_only fails it although the finding it inherits is
pinned (conformance/expectations/any.yaml takes every connector named ``*NixlPushConnector``): the check judges the
consumer's side apart from the producer's release (conformance/checks/verdicts.py), so the pin covers the release
alone. When one assertion judged both sides, the copy's consumer, which never finishes its requests, failed with the
words the pin expects and passed as the known finding.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlPushConnector


class HeldEmptyReadNixlPushConnector(NixlPushConnector):
    """The consumer keeps a request that reads nothing (vLLM's empty-receive path in request_finished: aborted
    before it was scheduled, or one that needs no remote block) until the notification that frees the producer has
    gone: its request_finished returns True, as a producer's does for a send. Its worker never sends that
    notification (finding 20) nor reports the request finished_sending, so vLLM holds the request forever."""

    def request_finished_all_groups(self, request, block_ids):  # vLLM's scheduler asks an HMA connector this
        reads_nothing = bool((request.kv_transfer_params or {}).get("do_remote_prefill"))
        delay_free, params = super().request_finished_all_groups(request, block_ids)
        return delay_free or reads_nothing, params
