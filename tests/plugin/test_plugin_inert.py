"""Installed by entry point, the plugin does nothing in another project's pytest run.

vLLM's CI images hold kvconform beside vLLM's own tests: there the plugin must not
import torch (nor probe a device: every probe imports torch), nor parametrize that
project's own ``platform`` or ``connector`` fixtures, nor watch its tests that have a
``connector`` parameter of their own. Each run is a real pytest in a subprocess, with
the plugin loaded the way an installed kvconform loads it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kvconform.conformance.session.options import OPTIONS
from kvconform.conformance.session.target import is_active
from tests.load import stretched

pytest_plugins = ["pytester"]

UNRELATED_CONFTEST = textwrap.dedent('''
    import pytest

    @pytest.fixture
    def platform():
        return "their-platform"

    @pytest.fixture
    def connector():
        return "their-connector"
''')

UNRELATED_TEST = textwrap.dedent('''
    import sys

    def test_their_own_fixtures(platform, connector, pytestconfig):
        assert pytestconfig.pluginmanager.has_plugin("kvconform"), "the plugin must be loaded for this to mean anything"
        assert (platform, connector) == ("their-platform", "their-connector")

    def test_torch_never_imported():
        assert "torch" not in sys.modules, "kvconform's plugin imported torch in an unrelated project"
''')

# a module of its own: a run made ours parametrizes ``connector`` itself, and pytest refuses a second one
UNRELATED_PARAMETRIZED_TEST = textwrap.dedent('''
    import pytest

    @pytest.mark.parametrize("connector", ["theirs"])
    def test_their_own_connector_parameter(connector):
        assert connector == "theirs"
''')


@pytest.fixture
def unrelated_project(tmp_path):
    (tmp_path / "conftest.py").write_text(UNRELATED_CONFTEST)
    (tmp_path / "test_theirs.py").write_text(UNRELATED_TEST)
    (tmp_path / "test_their_parameters.py").write_text(UNRELATED_PARAMETRIZED_TEST)
    return tmp_path


def _pytest(project, *args: str, path: str = ".") -> subprocess.CompletedProcess:
    # the plugin loads through kvconform's pytest11 entry point, as in any environment it is installed in
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, path],
                          cwd=project, capture_output=True, text=True, timeout=stretched(300))


def test_unrelated_project_is_left_alone(unrelated_project):
    out = _pytest(unrelated_project)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "3 passed" in out.stdout
    assert "kvconform: platform" not in out.stdout, "no platform resolved (nor header) in someone else's run"


def test_one_of_our_options_makes_the_run_ours(unrelated_project):
    """The control: with ``--platform`` given, the plugin does parametrize ``platform``.

    So the guard is what spares a project that never asked for the plugin."""
    out = _pytest(unrelated_project, "--platform=cpu", "-k", "their_own_fixtures", path="test_theirs.py")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]
    assert "kvconform: platform cpu" in out.stdout
    assert "test_their_own_fixtures[cpu" in out.stdout


SAMPLE_VALUES = {"platform": "cpu", "kvconform_timeout": "5", "kvconform_explore": "3", "kvconform_wait_scale": "2"}


@pytest.mark.parametrize("option", OPTIONS, ids=lambda option: option.flag)
def test_every_option_in_the_table_makes_the_run_ours(pytester, option):
    """is_active reads the same table the options are registered from: none can be missed."""
    value = None if option.action == "store_true" else SAMPLE_VALUES.get(option.dest, "x")
    config = pytester.parseconfig(option.flag if value is None else f"{option.flag}={value}")
    assert config.getoption(option.dest) != option.default
    assert is_active(config)
    assert not is_active(pytester.parseconfig())
