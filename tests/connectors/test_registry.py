"""The registry read from factory.py's source is the registry vLLM builds when it imports it."""

from __future__ import annotations

import pytest

from kvconform.conformance.connectors.selection import registry_modules
from kvconform.conformance.vllm_install.factory import FactorySourceError, parse_registrations


def test_source_registry_matches_the_imported_factory():
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    from_source = registry_modules()
    assert list(from_source) == list(KVConnectorFactory._registry)
    for name, (module, class_name) in from_source.items():
        assert module.startswith("vllm.distributed.kv_transfer.kv_connector"), (name, module)
        assert class_name


def test_keyword_and_positional_registrations():
    source = ('F.register_connector("A", "pkg.a", "ClassA")\n'
              'F.register_connector(name="B", module_path="pkg.b", class_name="ClassB")\n'
              'F.register_connector(computed_name(), "pkg.c", "C")\n')
    assert parse_registrations(source) == {"A": ("pkg.a", "ClassA"), "B": ("pkg.b", "ClassB")}


@pytest.mark.parametrize("source,words", [("def broken(:\n", "cannot parse"), ("x = 1\n", "registers no connectors")])
def test_unreadable_factory(source, words):
    with pytest.raises(FactorySourceError, match=words):
        parse_registrations(source, "factory.py")
