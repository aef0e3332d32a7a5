"""Threads a connector leaves running: an error naming them, and never a pytest that cannot exit.

Each conformance test's threads are compared before its setup and after its
teardown (the harness shuts connectors down as vLLM does); new ones get
``LEAK_GRACE_S`` to finish. A leaked non-daemon thread would also keep the
interpreter from exiting once pytest is done, so at the very end, if any thread
born in this session is still running and not a daemon, the process reports
them and exits with the session's status without waiting.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ..connectors.selection import ConnectorParam

from kvconform.reports.identity import connector_of

from .left_behind import teardown_check

LEAK_GRACE_S = 2.0

_BEFORE_KEY = pytest.StashKey[set[threading.Thread]]()
_AT_START_KEY = pytest.StashKey[set[threading.Thread]]()
_EXIT_STATUS_KEY = pytest.StashKey[int]()


def describe(threads: list[threading.Thread]) -> str:
    return ", ".join(f"{t.name!r} ({'daemon' if t.daemon else 'non-daemon'})" for t in threads)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_AT_START_KEY] = set(threading.enumerate())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if connector_of(item) is not None:
        item.stash[_BEFORE_KEY] = set(threading.enumerate())


def new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads alive now that are not in ``before``."""
    return [t for t in threading.enumerate() if t not in before]


def still_running(threads: list[threading.Thread], grace_s: float = LEAK_GRACE_S) -> list[threading.Thread]:
    """Those of ``threads`` still alive after up to ``grace_s`` seconds."""
    deadline = time.monotonic() + grace_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t for t in threads if t.is_alive()]


def _leaks(item: pytest.Item, connector: ConnectorParam) -> Callable[[], list[str]]:
    """The threads born during the test, as its teardown ends; judged once its background closes have ended."""
    born = new_threads(item.stash[_BEFORE_KEY]) if _BEFORE_KEY in item.stash else []

    def judge() -> list[str]:
        leaked = still_running(born)
        return [f"{connector.name} left {len(leaked)} thread(s) running after the test and the connector's "
                f"shutdown(): {describe(leaked)}"] if leaked else []

    return judge


pytest_runtest_makereport = teardown_check(_leaks)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    session.config.stash[_EXIT_STATUS_KEY] = int(session.exitstatus)


def lingering_threads(config: pytest.Config) -> list[threading.Thread]:
    """Non-daemon threads born during this session that would keep the interpreter from exiting."""
    at_start = config.stash.get(_AT_START_KEY, set())
    return [t for t in threading.enumerate()
            if t not in at_start and t is not threading.main_thread() and t.is_alive() and not t.daemon]


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Exit now, with the session's status, when leaked non-daemon threads would block interpreter exit.

    Runs after every other plugin's unconfigure (JUnit, results and the terminal
    summary are written by then). Only threads born in this session count, so a
    pytest run inside another process (pytester, an IDE) never ends its host for
    the host's own threads.
    """
    lingering = lingering_threads(config)
    if not lingering or _EXIT_STATUS_KEY not in config.stash:
        return
    status = config.stash[_EXIT_STATUS_KEY]
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.stop_global_capturing()
    print(f"kvconform: {len(lingering)} non-daemon thread(s) still running at exit ({describe(lingering)}); "
          f"exiting with status {status} without waiting for them", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
