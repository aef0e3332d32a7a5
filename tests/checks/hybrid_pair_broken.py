"""A deliberately broken copy of vLLM's NixlConnector for hybrid caches.

conformance/test_block_sizes_pair.py must fail it (tests/checks/test_hybrid_block_sizes_catches.py);
its profile is NixlConnector's (hybrid_pair_broken.yaml beside this file).
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlConnector


class FirstGroupOnlyNixlConnector(NixlConnector):
    """Exchanges only the first KV cache group's block ids, as code written for one group does (``block_ids[0]``):
    on both sides every other group's list is empty, so those groups are never transferred."""

    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        if role == KVConnectorRole.SCHEDULER:
            clip = self.connector_scheduler.get_exchange_clipped_blocks

            def first_group_only(block_ids, *args, **kwargs):
                clipped = clip(block_ids, *args, **kwargs)
                return type(clipped)([group if i == 0 else [] for i, group in enumerate(clipped)])

            self.connector_scheduler.get_exchange_clipped_blocks = first_group_only
