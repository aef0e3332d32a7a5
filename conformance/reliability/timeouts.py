"""A per-test timeout for conformance tests, so a hanging connector costs one test, not the run.

pytest-timeout does the timing (its signal method fails the test in the main
thread, with the connector's frames in the traceback); this plugin only chooses
the limit and names the connector in the failure. The limit is
``--kvconform-timeout`` when given, else pytest-timeout's own ``--timeout`` (or
its ini/env setting) when the user set one, else ``DEFAULT_TIMEOUT_S``.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from kvconform.reports.identity import connector_of

from ..session.options import effective_timeout
from .crashes import record_stop


def run_limit(config: pytest.Config) -> float | None:
    """The per-test limit of a test without a timeout marker: kvconform's, else pytest-timeout's own; None: none."""
    limit = effective_timeout(config)
    if limit is None and config.pluginmanager.hasplugin("timeout"):
        try:
            limit = float(config.getoption("timeout", None) or os.environ.get("PYTEST_TIMEOUT")
                          or config.getini("timeout") or 0)
        except ValueError:
            return None
    return limit or None


def limit_of(item: pytest.Item) -> float | None:
    """``item``'s per-test limit: its ``timeout`` marker's (set below for conformance tests), else the run's."""
    marker = item.get_closest_marker("timeout")
    value = (marker.args[0] if marker.args else marker.kwargs.get("timeout")) if marker is not None \
        else run_limit(item.config)
    return float(value) if isinstance(value, int | float) and value > 0 else None


def pytest_configure(config: pytest.Config) -> None:
    timeout = config.getoption("kvconform_timeout")
    if timeout is not None and timeout < 0:
        raise pytest.UsageError(f"--kvconform-timeout {timeout:g}: expected a number of seconds >= 0")
    scale = config.getoption("kvconform_wait_scale")
    if not scale > 0:
        raise pytest.UsageError(f"--kvconform-wait-scale {scale:g}: expected a factor above 0")
    if timeout and not config.pluginmanager.hasplugin("timeout"):
        raise pytest.UsageError("--kvconform-timeout needs pytest-timeout, which is not installed or is disabled")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    timeout = effective_timeout(config)
    if timeout is None:
        return
    for item in items:
        if connector_of(item) is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(timeout))


def pytest_report_header(config: pytest.Config) -> str:
    timeout = effective_timeout(config)
    if not config.pluginmanager.hasplugin("timeout"):
        limit = "none (pytest-timeout is not installed or is disabled: a hanging connector hangs the run)"
    elif timeout is None:
        limit = "pytest-timeout's --timeout"
    else:
        limit = f"{timeout:g} s" if timeout else "off (--kvconform-timeout 0)"
    return f"kvconform: per-test timeout {limit}"


def _is_timeout(call: pytest.CallInfo[None]) -> bool:
    return (call.excinfo is not None and call.excinfo.errisinstance(pytest.fail.Exception)
            and str(call.excinfo.value).startswith("Timeout"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    connector = connector_of(item)
    if connector is None or not report.failed or not _is_timeout(call):
        return report
    marker = item.get_closest_marker("timeout")
    limit = f"{marker.args[0]:g} s" if marker is not None and marker.args else "the per-test timeout"
    message = (f"{connector.name} did not finish the test's {report.when} within {limit} "
               f"(per-test timeout; change it with --kvconform-timeout)")
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        crash.message = message
    else:
        report.longrepr = f"{message}\n{report.longrepr}"
    record_stop(item, "timed out")
    return report
