"""The environment a connector needs (profile key ``env``), set for each of its tests and restored after.

A connector may read settings from the environment (a native cache's variables, a library's switches).
The test process is the connector's process: the profile's ``env`` is set there from before a test's
setup to after its teardown, so its fixtures, the construction probe (``construction.py``), the threads
it starts and the engine processes it spawns all see it; and restored after, so one connector's
variables never reach another connector's tests in the same worker. A shutdown still running in the
background after the test (``engine/closing.py``) runs with the environment restored. Values are
literal strings (``profiles.py`` rejects anything else); the run header lists them.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from kvconform.reports.identity import connector_of


def connector_env(item: pytest.Item) -> dict[str, str]:
    """The variables ``item``'s connector's profile sets: none for a test with no connector."""
    env: dict[str, str] = getattr(getattr(connector_of(item), "profile", None), "env", None) or {}
    return env


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    env = connector_env(item)
    if not env:
        return (yield)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        return (yield)


def header_line(name: str, env: dict[str, str]) -> str:
    return f"kvconform: {name} runs with env {', '.join(f'{k}={v}' for k, v in env.items())}"


def pytest_report_header(config: pytest.Config) -> list[str]:
    from .selection import header_params

    lines = dict.fromkeys(header_line(p.name, p.profile.env) for p in header_params(config) if p.profile.env)
    return list(lines)
