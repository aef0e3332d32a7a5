"""The connector kvconform's test plugin registers: vLLM's ExampleConnector, unchanged, under another name."""

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector


class PluginExampleConnector(ExampleConnector):
    """ExampleConnector as a plugin registers it: the suite must find, select and pass it like the built-in one."""
