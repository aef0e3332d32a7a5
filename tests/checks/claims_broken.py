"""ExampleConnector copies whose claims are wrong, or right but late: how vLLM's scheduler reads a claim.

``UnderClaimingConnector`` claims one block fewer than it stored: vLLM checks a
claim only from above (a bare ``assert``), so the lost hit goes unnoticed unless
the suite checks the promised hit exactly. ``AskAgainConnector`` answers ``None``
("ask again", as OffloadingConnector does while its lookup runs) on its first
lookup of each request and is correct otherwise: the suite must pass it, because
vLLM's scheduler asks again rather than reading ``None`` as no hit.
Profiles (``promised_hit``) for both: ``claims_broken.yaml`` beside this file.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector


class UnderClaimingConnector(ExampleConnector):
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        tokens, load_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
        return (tokens - self._block_size if tokens > self._block_size else tokens), load_async


class AskAgainConnector(ExampleConnector):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._asked: set[str] = set()

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        if request.request_id not in self._asked:
            self._asked.add(request.request_id)
            return None, False
        return super().get_num_new_matched_tokens(request, num_computed_tokens)
