"""A connector a vLLM plugin registers runs like a built-in one: selected by name and by default, built through
vLLM's factory once vLLM's own ``load_general_plugins`` has run the plugin, and named in the run header."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kvconform.conformance.connectors.selection import registered_names, resolve_connectors
from kvconform.conformance.vllm_install.plugins import ALLOW_LIST_ENV
from tests.connectors.plugin_install import (
    EXAMPLE_DISTRIBUTION,
    EXAMPLE_ENTRY_POINTS,
    PLUGIN_PACKAGE,
    install_distribution,
)
from tests.suite_run import REPO, run_suite

CONNECTOR = "PluginExampleConnector"
HEADER = (f"kvconform: connector {CONNECTOR} (kvconform_example_plugin.connector:{CONNECTOR}) is registered by "
          f"vLLM plugin 'kvconform_example = kvconform_example_plugin:register' of distribution {EXAMPLE_DISTRIBUTION}")


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The example plugin installed for this process (``sys.path``) and the suite runs it starts (``PYTHONPATH``)."""
    folders = [str(install_distribution(tmp_path / "site", EXAMPLE_DISTRIBUTION, EXAMPLE_ENTRY_POINTS)),
               str(PLUGIN_PACKAGE)]
    monkeypatch.delenv(ALLOW_LIST_ENV, raising=False)
    monkeypatch.setattr(sys, "path", [*folders, *sys.path])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([*folders, os.environ.get("PYTHONPATH", "")]))
    return tmp_path


def test_selected_by_name_and_by_default_after_the_factorys_connectors(installed):
    names = registered_names()
    assert names[-1] == CONNECTOR and "ExampleConnector" in names[:-1]
    [param] = resolve_connectors([CONNECTOR])
    assert (param.name, param.class_name, param.module_path) == (CONNECTOR, CONNECTOR, None)
    assert param.plugin is not None and param.plugin.origin.distribution == EXAMPLE_DISTRIBUTION
    assert param.transfer_config_fields() == {"kv_connector": CONNECTOR}  # by name, as a vLLM user selects it
    assert param.is_third_party  # out of vLLM's tree: linted from its own source, its classes' storage looked up
    assert CONNECTOR in [p.name for p in resolve_connectors([])]


def test_outside_the_allow_list_it_is_unknown(installed, monkeypatch):
    monkeypatch.setenv(ALLOW_LIST_ENV, "some_other_plugin")
    assert CONNECTOR not in registered_names()


def test_the_suite_runs_and_passes_it_and_says_which_plugin_registered_it(installed):
    # -v undoes the helper's -q, which hides the run header
    code, outcomes, output = run_suite(installed, ["--connector", CONNECTOR, "-v",
                                                   "-k", "test_roundtrip and float32 and not mla"])
    assert HEADER in output, output[-3000:]
    assert outcomes and all(o.outcome == "passed" for o in outcomes), output[-3000:]
    assert [o.nodeid for o in outcomes] == [f"test_roundtrip::test_roundtrip[cpu-CPU_ATTN-{CONNECTOR}-float32]"]
    assert code == 0, output[-3000:]


FAILING_PLUGIN = "def register():\n    raise RuntimeError('the plugin fails')\n"
LOAD = """
from kvconform.conformance.vllm_install.plugins import PluginConnector, PluginOrigin, register_in_vllm
register_in_vllm(PluginConnector("Lost", "failing_plugin", "Lost",
                                 PluginOrigin("failing-plugin", "failing = failing_plugin:register")))
"""


def test_a_plugin_that_raises_fails_its_connector_quoting_the_error(tmp_path, monkeypatch):
    (tmp_path / "failing_plugin.py").write_text(FAILING_PLUGIN)
    install_distribution(tmp_path, "failing-plugin", {"failing": "failing_plugin:register"})
    monkeypatch.delenv(ALLOW_LIST_ENV, raising=False)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert ("PluginLoadError: Lost: loading vLLM's plugins raised RuntimeError: the plugin fails, and Lost is not "
            "registered after it") in proc.stderr, proc.stderr[-2000:]
