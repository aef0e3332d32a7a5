"""A connector that claims stored KV but loads nothing: the bench must refuse to time it."""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector


class NoLoadConnector(ExampleConnector):
    """ExampleConnector whose ``start_load_kv`` returns at once: a fast load that moves no bytes."""

    def start_load_kv(self, forward_context, **kwargs) -> None:
        return None


class LazyImportConnector(ExampleConnector):
    """ExampleConnector whose save imports a module nobody declares: a crash the bench must report as an
    error, not a skip for a missing package (only a package the profile declares is a skip)."""

    def save_kv_layer(self, *args, **kwargs) -> None:
        import kvconform_no_such_module  # noqa: F401

        super().save_kv_layer(*args, **kwargs)
