"""A profile's ``env`` (conformance/connectors/connector_env.py): set around each of the connector's tests, restored
after, never seen by another connector's tests, shown in the run header; a value that is not a string is a usage
error naming the file, line and key (``--profiles`` turns it into pytest's usage error:
tests/reliability/test_bad_input.py)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from kvconform.conformance.connectors import connector_env, selection
from kvconform.conformance.connectors.profiles import ConnectorProfile, ProfileError, load_profiles
from kvconform.conformance.session.target import TARGET_KEY

VARIABLE = "KVCONFORM_TEST_NATIVE_CACHE"


class FakeItem:
    """What the env hook reads of a pytest item: its connector parameter."""

    def __init__(self, connector: object) -> None:
        self.callspec = SimpleNamespace(params={"connector": connector})


def _param(name: str, env: dict[str, str]) -> selection.ConnectorParam:
    return selection.ConnectorParam(name=name, class_name=name, module_path=None, profile=ConnectorProfile(env=env))


def _run_test(item: FakeItem, seen: dict[str, str | None]) -> None:
    """pytest's protocol through the env hook's wrapper: ``seen`` gets the variable as the test saw it."""
    wrapper = connector_env.pytest_runtest_protocol(item, None)
    next(wrapper)
    seen["during"] = os.environ.get(VARIABLE)
    with pytest.raises(StopIteration):
        wrapper.send(True)


def test_set_during_its_tests_and_restored_after(monkeypatch):
    monkeypatch.setenv(VARIABLE, "the user's own")
    seen: dict[str, str | None] = {}
    _run_test(FakeItem(_param("NativeCacheConnector", {VARIABLE: "1"})), seen)
    assert seen["during"] == "1"
    assert os.environ[VARIABLE] == "the user's own"
    monkeypatch.delenv(VARIABLE)
    _run_test(FakeItem(_param("NativeCacheConnector", {VARIABLE: "on"})), seen)
    assert seen["during"] == "on"
    assert VARIABLE not in os.environ


def test_another_connectors_tests_do_not_see_it(monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    seen: dict[str, str | None] = {}
    _run_test(FakeItem(_param("NativeCacheConnector", {VARIABLE: "1"})), seen)
    _run_test(FakeItem(_param("ExampleConnector", {})), seen)
    assert seen["during"] is None
    _run_test(FakeItem(None), seen)  # a test with no connector
    assert seen["during"] is None


def test_the_run_header_shows_it(monkeypatch):
    params = [_param("NativeCacheConnector", {VARIABLE: "1", "NATIVE_CACHE_MB": "64"}),
              _param("ExampleConnector", {})]
    monkeypatch.setattr(selection, "connector_params", lambda config: params)
    config = SimpleNamespace(stash={TARGET_KEY: object()})
    assert connector_env.pytest_report_header(config) == [
        f"kvconform: NativeCacheConnector runs with env {VARIABLE}=1, NATIVE_CACHE_MB=64"]


@pytest.mark.parametrize(("line", "says"), [
    ("A: 1", 'connectors.Mine.env: Value error, A: 1 is a int; env values are strings (quote it: A: "1")'),
    ("A: yes", "A: True is a bool; env values are strings"),
    ("A: '{storage}/cache'", "env values are set as written (no placeholders"),
    ("1A: x", "'1A' is not an environment variable name"),
])
def test_a_value_that_is_not_a_plain_string_is_a_clear_error(tmp_path, line, says):
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(f"connectors:\n  Mine:\n    env:\n      {line}\n")
    with pytest.raises(ProfileError) as error:
        load_profiles(profiles)
    assert str(error.value).startswith(f"{profiles}:3: connectors.Mine.env: "), str(error.value)
    assert says in str(error.value)

