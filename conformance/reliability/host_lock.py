"""Under pytest-xdist, a connector that cannot share the host runs one test at a time across the workers.

A connector may bind fixed resources of the host from its own defaults (a ZeroMQ port, a shared-memory
name): two workers that build it at once collide (``Address already in use``), and the harness's
collision would read as the connector's failure. So each test of a connector whose profile says
``host: exclusive`` (the default for a connector no profile names, whose needs nobody has written down)
holds an ``fcntl.flock`` on a file of its own, in the folder the xdist controller shares with its workers
(the crash ledger's, ``crashes.py``), from before its setup to after its teardown, which
covers the construction probe (``construction.py``: it runs inside the first test that builds the
connector). The lock is kept until the shutdowns the test left running in the background
(``engine/closing.py``) have ended, or have been judged not returned (``held_reports.CLOSE_WAIT_S``).
A wait for the lock is bounded by the test's timeout and then fails the test, naming the holder (a
holder that hangs is the per-test timeout's business; one that dies lets go with its process). A serial run has
no other worker: no lock.
A connector that collides with itself within one test (two of its instances at once) is its own failure.
"""

from __future__ import annotations

import fcntl
import re
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from kvconform.check_table import STATIC_CHECKS
from kvconform.reports.identity import connector_of, needed_check

from ..engine.closing import BackgroundClose
from ..session.target import TARGET_KEY
from .crashes import LEDGER_INPUT_KEY
from .held_reports import CLOSE_WAIT_S
from .left_behind import CLOSES_KEY
from .timeouts import limit_of

POLL_S = 0.05

_LOCKS_KEY = pytest.StashKey["HostLocks"]()
_WAIT_FAILED_KEY = pytest.StashKey[str]()  # why a test did not get its connector's lock


@dataclass
class _Held:
    """One connector's lock held by this process, and the background closes it waits for before its release."""

    handle: IO[str]
    closes: list[BackgroundClose] = field(default_factory=list)

    def closes_ended(self) -> bool:
        now = time.monotonic()
        self.closes = [c for c in self.closes if not c.done() and now - c.started < CLOSE_WAIT_S]
        return not self.closes


class HostLocks:
    """This worker's side of the per-connector locks in ``folder``; ``worker`` names it to the others."""

    def __init__(self, folder: Path, worker: str) -> None:
        self.folder = folder
        self.worker = worker
        self.held: dict[str, _Held] = {}

    def path(self, connector: str) -> Path:
        return self.folder / (re.sub(r"[^\w.-]", "_", connector) + ".lock")

    def acquire(self, connector: str, nodeid: str, limit_s: float | None) -> str | None:
        """Take ``connector``'s lock for the test ``nodeid`` (kept if this worker holds it still); None, or why it
        could not be had within ``limit_s`` seconds (None or 0: no limit)."""
        if connector in self.held:
            return None
        path = self.path(connector)
        handle = path.open("a+")
        started = time.monotonic()
        while True:
            self.release_ended(keep=None)  # a lock this worker holds only for ended closes never blocks another
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if limit_s and time.monotonic() - started >= limit_s:
                    handle.close()
                    holder = _read(path) or "another worker"
                    return (f"not run: {connector} keeps the host to itself (host: exclusive) and its lock was "
                            f"still held after {limit_s:g} s (the test's timeout), by {holder}")
                time.sleep(POLL_S)
        handle.seek(0)
        handle.truncate()
        handle.write(f"{self.worker} running {nodeid}")
        handle.flush()
        self.held[connector] = _Held(handle)
        return None

    def leave(self, connector: str, closes: list[BackgroundClose]) -> None:
        """The test is over: release now, or once ``closes`` (its background shutdowns) have ended."""
        held = self.held[connector]
        held.closes += closes
        if held.closes_ended():
            self._release(connector)

    def release_ended(self, keep: str | None) -> None:
        """Release every lock whose closes have ended, but ``keep``'s (the test about to start builds it)."""
        for connector, held in list(self.held.items()):
            if connector != keep and held.closes_ended():
                self._release(connector)

    def release_all(self) -> None:
        """The tests are over: wait for the closes (each bounded), then release every lock."""
        while not all(held.closes_ended() for held in self.held.values()):
            time.sleep(POLL_S)
        for connector in list(self.held):
            self._release(connector)

    def _release(self, connector: str) -> None:
        handle = self.held.pop(connector).handle
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def exclusive_connector(item: pytest.Item) -> str | None:
    """The name of the connector whose lock ``item`` needs: one that keeps the host to itself, in a test that may
    build it (not a static check, not skipped before its setup); None otherwise."""
    connector = connector_of(item)
    profile = getattr(connector, "profile", None)
    if getattr(profile, "host", None) != "exclusive" or item.get_closest_marker("skip") is not None:
        return None
    if needed_check(item) in STATIC_CHECKS:
        return None
    name: str = connector.name  # a ConnectorParam: it has a profile
    return name


# --- an xdist worker ----------------------------------------------------------------------------


@pytest.hookimpl(trylast=True)  # after the plugin resolved the run's target
def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker of a kvconform run keeps its locks in the folder the controller shares with its workers (the
    crash ledger's, ``crashes.py``); a serial run has no other worker, and no locks."""
    workerinput = getattr(config, "workerinput", {})
    if TARGET_KEY in config.stash and LEDGER_INPUT_KEY in workerinput:
        config.stash[_LOCKS_KEY] = HostLocks(Path(workerinput[LEDGER_INPUT_KEY]).parent, workerinput["workerid"])


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    """The lock around the whole test: outside pytest-timeout's timer (the wait has its own bound) and outside the
    per-test garbage collection (``gc_between_tests.py``), so what a dropped connector still bound is freed first."""
    locks = item.config.stash.get(_LOCKS_KEY, None)
    if locks is None:
        return (yield)
    connector = exclusive_connector(item)
    locks.release_ended(keep=connector)
    failure = locks.acquire(connector, item.nodeid, limit_of(item)) if connector is not None else None
    if failure is not None:
        item.stash[_WAIT_FAILED_KEY] = failure
    try:
        return (yield)
    finally:
        if connector is not None and failure is None:
            closes: list[BackgroundClose] = item.stash.get(CLOSES_KEY, [])
            locks.leave(connector, list(closes))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that did not get its connector's lock in time fails, saying who held it."""
    failure = item.stash.get(_WAIT_FAILED_KEY, None)
    if failure is not None:
        pytest.fail(failure, pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, object, object]:
    try:
        return (yield)
    finally:
        locks = session.config.stash.get(_LOCKS_KEY, None)
        if locks is not None:
            locks.release_all()


def pytest_report_header(config: pytest.Config) -> list[str]:
    """A line for each connector a profile marks ``host: exclusive`` (the header's no-profile lines say it for
    the connectors no profile names)."""
    from ..connectors.selection import header_params

    names = dict.fromkeys(p.name for p in header_params(config) if p.profile.named and p.profile.host == "exclusive")
    return [f"kvconform: {name} keeps the host to itself (host: exclusive): under -n N its tests that build it "
            f"never run on two workers at once" for name in names]
