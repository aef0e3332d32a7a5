"""A connector that claims stored KV but loads nothing: the bench must refuse to time it."""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector


class NoLoadConnector(ExampleConnector):
    """ExampleConnector whose ``start_load_kv`` returns at once: a fast load that moves no bytes."""

    def start_load_kv(self, forward_context, **kwargs) -> None:
        return None
