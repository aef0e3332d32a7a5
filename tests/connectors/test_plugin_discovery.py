"""The connectors vLLM plugins register, read from the plugins' source: no vLLM, no plugin code run.

These tests run where vLLM is blocked (tests/conftest.py's NO_VLLM), which proves the xdist controller's half of
the discovery imports neither vLLM nor the plugins.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvconform.conformance.vllm_install.plugins import (
    ALLOW_LIST_ENV,
    PluginConnector,
    PluginOrigin,
    discover,
)
from tests.connectors.plugin_install import (
    EXAMPLE_DISTRIBUTION,
    EXAMPLE_ENTRY_POINTS,
    PLUGIN_PACKAGE,
    install_distribution,
)

IN_TREE = ("ExampleConnector", "MultiConnector")
EXAMPLE_ORIGIN = PluginOrigin(EXAMPLE_DISTRIBUTION, "kvconform_example = kvconform_example_plugin:register")


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch):
    """Puts folders first on ``sys.path``, as an installed distribution's site-packages would be."""
    monkeypatch.delenv(ALLOW_LIST_ENV, raising=False)

    def put(*folders: Path) -> None:
        monkeypatch.setattr(sys, "path", [*map(str, folders), *sys.path])
    return put


def _plugin(tmp_path: Path, source: str, entry_points: dict[str, str], distribution: str = "odd-plugin") -> Path:
    """A one-module plugin distribution (module ``odd_plugin``) in ``tmp_path``."""
    (tmp_path / "odd_plugin.py").write_text(source)
    return install_distribution(tmp_path, distribution, entry_points)


def test_the_example_plugins_connector_is_found_without_running_the_plugin(tmp_path, on_path):
    on_path(install_distribution(tmp_path, EXAMPLE_DISTRIBUTION, EXAMPLE_ENTRY_POINTS), PLUGIN_PACKAGE)
    found = discover(IN_TREE)
    assert found.connectors == {"PluginExampleConnector": PluginConnector(
        "PluginExampleConnector", "kvconform_example_plugin.connector", "PluginExampleConnector", EXAMPLE_ORIGIN)}
    assert found.notes == ()
    assert found.header_lines() == [
        "kvconform: connector PluginExampleConnector (kvconform_example_plugin.connector:PluginExampleConnector) "
        "is registered by vLLM plugin 'kvconform_example = kvconform_example_plugin:register' of distribution "
        "kvconform-example-plugin"]
    assert "kvconform_example_plugin" not in sys.modules


@pytest.mark.parametrize("allow_list,found", [("kvconform_example", True), ("other,kvconform_example", True),
                                              ("other", False), ("", False)])
def test_vllm_plugins_allow_list_is_honoured(tmp_path, on_path, monkeypatch, allow_list, found):
    on_path(install_distribution(tmp_path, EXAMPLE_DISTRIBUTION, EXAMPLE_ENTRY_POINTS), PLUGIN_PACKAGE)
    monkeypatch.setenv(ALLOW_LIST_ENV, allow_list)
    assert ("PluginExampleConnector" in discover(IN_TREE).connectors) is found


def test_registrations_in_helpers_and_keywords_are_read_in_order(tmp_path, on_path):
    source = ("from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory as F\n"
              "def _second():\n"
              "    F.register_connector(name='B', module_path='odd.b', class_name='BConn')\n"
              "def register():\n"
              "    if some_platform():\n"
              "        F.register_connector('A', 'odd.a', 'AConn')\n"
              "    _second()\n")
    on_path(_plugin(tmp_path, source, {"odd": "odd_plugin:register"}))
    found = discover(IN_TREE)
    assert [(c.name, c.module_path, c.class_name) for c in found.connectors.values()] == [
        ("A", "odd.a", "AConn"), ("B", "odd.b", "BConn")]


def test_a_name_vllm_already_registers_ends_the_loading_as_in_vllm(tmp_path, on_path):
    source = ("def register():\n"
              "    F.register_connector('Mine', 'odd.a', 'Mine')\n"
              "    F.register_connector('ExampleConnector', 'odd.a', 'Fake')\n"
              "    F.register_connector('NeverReached', 'odd.a', 'Later')\n"
              "def other():\n"
              "    F.register_connector('AfterIt', 'odd.b', 'AfterIt')\n")
    on_path(_plugin(tmp_path, source, {"clash": "odd_plugin:register", "after": "odd_plugin:other"}))
    found = discover(IN_TREE)
    assert list(found.connectors) == ["Mine"]  # registered before the ValueError, as vLLM's registry keeps it
    [note] = found.notes
    assert "registers ExampleConnector" in note and "already registered by vLLM's factory" in note
    assert "raises ValueError" in note and "nor the plugins after it (after = odd_plugin:other" in note


def test_two_plugins_with_one_name_the_first_keeps_it(tmp_path, on_path):
    source = ("def register():\n    F.register_connector('Twice', 'odd.a', 'First')\n"
              "def again():\n    F.register_connector('Twice', 'odd.b', 'Second')\n")
    on_path(_plugin(tmp_path, source, {"first": "odd_plugin:register", "second": "odd_plugin:again"}))
    found = discover(IN_TREE)
    assert found.connectors["Twice"].class_name == "First"
    assert "already registered by vLLM plugin 'first = odd_plugin:register'" in found.notes[0]


@pytest.mark.parametrize("source,entry_point,words", [
    ("def register():\n    F.register_connector(NAME, 'odd.a', 'A')\n", "odd_plugin:register",
     "with arguments that are not string literals"),
    ("def register(:\n", "odd_plugin:register", "cannot parse"),
    ("def other():\n    pass\n", "odd_plugin:register", "no module-level function 'register'"),
    ("", "missing_module:register", "no source file for module 'missing_module'"),
    ("", "odd_plugin", "names no module-level function"),
])
def test_what_cannot_be_read_is_said_not_guessed(tmp_path, on_path, source, entry_point, words):
    on_path(_plugin(tmp_path, source, {"odd": entry_point}))
    found = discover(IN_TREE)
    assert found.connectors == {}
    [note] = found.notes
    assert words in note and "vLLM plugin 'odd = " in note and "distribution odd-plugin" in note
