"""A connector that no profile names: what it runs, and what the run header tells its author."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from kvconform.conformance.connectors.profiles import NO_PROFILE_CHECKS, has_profile, profile_for
from kvconform.conformance.plugin import _no_profile_lines

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_PROFILES = (REPO / "examples" / "dict_connector.yaml",)


def test_a_connector_without_a_profile_runs_every_check_that_needs_none():
    profile = profile_for("NobodysConnector")
    assert not has_profile("NobodysConnector")
    assert set(NO_PROFILE_CHECKS) | {"contract", "lint"} <= set(profile.checks or [])
    assert {"roundtrip", "workload"} <= set(NO_PROFILE_CHECKS)
    assert profile.extra_config == {"shared_storage_path": "{storage}"}
    assert "no profile names it" in (profile.reason or "")


def test_the_header_names_a_connector_without_a_profile_and_how_to_add_one():
    target = SimpleNamespace(connectors=("ExampleConnector", "dict_connector:DictConnector"), profiles=())
    [line] = [line for line in _no_profile_lines(target) if "DictConnector" in line]
    assert line.startswith("kvconform: DictConnector has no profile: it runs roundtrip, workload, contract, lint")
    assert "--profiles FILE" in line


def test_a_profile_from_the_users_file_silences_the_line():
    assert has_profile("DictConnector", EXAMPLE_PROFILES)
    target = SimpleNamespace(connectors=("dict_connector:DictConnector",), profiles=EXAMPLE_PROFILES)
    assert not [line for line in _no_profile_lines(target) if "DictConnector" in line]
    assert profile_for("DictConnector", EXAMPLE_PROFILES).reason is None
