"""A vLLM general plugin for kvconform's self-tests, laid out as an out-of-tree package ships one.

Its ``register`` is the ``vllm.general_plugins`` entry point (tests/connectors/plugin_install.py writes the
distribution's metadata at test time): it registers ``PluginExampleConnector``, vLLM's ExampleConnector under a
name of its own, with ``KVConnectorFactory.register_connector`` as platform plugins do. Importing this module
imports nothing of vLLM, as a plugin should; vLLM imports the connector only when it builds one.
"""

CONNECTOR = "PluginExampleConnector"


def register() -> None:
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    KVConnectorFactory.register_connector(
        "PluginExampleConnector", "kvconform_example_plugin.connector", "PluginExampleConnector")
