"""Shared set-up of the project's own tests."""

import pytest


@pytest.fixture(autouse=True)
def _output_as_on_a_terminal(monkeypatch):
    """pytest stops truncating its short summary lines when CI or BUILD_NUMBER is set, so a test
    that counts a message in a pytester run would count differently on a CI host; every run these
    tests start sees the environment a developer's terminal has."""
    for variable in ("CI", "BUILD_NUMBER"):
        monkeypatch.delenv(variable, raising=False)
