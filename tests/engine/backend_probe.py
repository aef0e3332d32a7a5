"""A connector that records what vLLM tells it about the attention backend, as NixlConnector asks it."""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector

SEEN: list[list[str]] = []  # per worker-side construction: the backends' names vLLM answered


class BackendProbeConnector(ExampleConnector):
    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        if role == KVConnectorRole.WORKER:
            SEEN.append([backend.get_name() for backend in get_current_attn_backends(vllm_config)])
