"""A hard bound on every conformance test, kept by a process outside the test's own.

``timeouts.py`` ends a slow connector through pytest-timeout, from inside the test process. A connector stuck
in native code that holds the interpreter lock, or that ignores signals, outlives it (a pyo3 core's futex wait
held a run for ten minutes, Ctrl-C included). So each process that runs conformance tests starts a watchdog
process (``watchdog_process.py``) and arms it around each test with the test's limit plus a grace: where
pytest-timeout works it has long ended the test by then, and where it cannot, the watchdog takes the stacks
(``faulthandler`` on SIGUSR2: C code that needs no lock) and kills the process. Under xdist the worker's death
is reported by ``crashes.py`` as that connector's timeout, with the stacks, and the run goes on in a fresh
worker; in a serial run the watchdog's line is the run's last word (run with ``-n 1`` to go on). The same
process ends a test process still running ``INTERRUPT_GRACE_S`` after a Ctrl-C.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import IO, Any

import pytest

from kvconform.reports.identity import connector_of

from .crashes import LEDGER_INPUT_KEY, ended_by_watchdog_file
from .timeouts import limit_of, run_limit
from .watchdog_process import INTERRUPT_GRACE_S

SCRIPT = Path(__file__).with_name("watchdog_process.py")
DUMP_SIGNAL = signal.SIGUSR2
GRACE_MIN_S, GRACE_MAX_S = 5.0, 30.0  # pytest-timeout's head start: the limit itself, within these


def hard_bound(limit: float) -> float:
    """When the watchdog ends a test whose per-test limit is ``limit``: after pytest-timeout had its chance."""
    return limit + min(GRACE_MAX_S, max(GRACE_MIN_S, limit))


class Watchdog:
    """This test process's watchdog: the process, its pipe, and the file faulthandler writes the stacks to."""

    def __init__(self, dump: IO[str], record: Path):
        self.dump = dump
        faulthandler.register(DUMP_SIGNAL, file=dump, all_threads=True, chain=False)
        # -I: the standard library only, whatever PYTHONPATH or the working folder hold
        self.process = subprocess.Popen([sys.executable, "-I", str(SCRIPT), str(os.getpid()), dump.name,
                                         str(record)], stdin=subprocess.PIPE, close_fds=True)

    def send(self, message: dict[str, Any]) -> None:
        stdin = self.process.stdin
        if stdin is None or self.process.poll() is not None:
            return
        try:
            stdin.write((json.dumps(message) + "\n").encode())
            stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def close(self) -> None:
        self.send({"exit": True})  # a forked child may hold the pipe open: closing it alone may not be seen
        faulthandler.unregister(DUMP_SIGNAL)
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.dump.close()


_WATCHDOG_KEY = pytest.StashKey[Watchdog]()


def _folder(config: pytest.Config) -> tuple[Path, str]:
    """Where the stacks and the record go, and this process's name: an xdist worker's in the run's shared
    ledger folder (``crashes.py``), a serial run's in a folder of its own."""
    worker = getattr(config, "workerinput", {})
    if LEDGER_INPUT_KEY in worker:
        return Path(worker[LEDGER_INPUT_KEY]).parent, str(worker["workerid"])
    folder = Path(tempfile.mkdtemp(prefix="kvconform-watchdog-"))
    config.add_cleanup(lambda: _remove(folder))
    return folder, "main"


def _remove(folder: Path) -> None:
    for path in folder.glob("*"):
        path.unlink(missing_ok=True)
    folder.rmdir()


@pytest.hookimpl(trylast=True)  # after crashes.py's pytest_configure has the ledger
def pytest_configure(config: pytest.Config) -> None:
    from ..session.target import is_active, targets_conformance

    # an xdist controller runs no test (xdist has set --dist by now; its own plugin registers later)
    controller = not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no"
    if controller or not is_active(config) or not targets_conformance(config) or not run_limit(config):
        return
    folder, name = _folder(config)
    dump = (folder / f"stacks-{name}.txt").open("w")
    watchdog = Watchdog(dump, ended_by_watchdog_file(folder, name))
    config.stash[_WATCHDOG_KEY] = watchdog
    config.add_cleanup(watchdog.close)


def pytest_report_header(config: pytest.Config) -> str | None:
    if _WATCHDOG_KEY not in config.stash:
        return None
    return (f"kvconform: hard bound per test: its timeout plus {GRACE_MIN_S:g}-{GRACE_MAX_S:g} s, kept by a "
            f"watchdog process (a test stuck where pytest-timeout cannot end it is killed; under xdist the run "
            f"goes on); Ctrl-C ends a stuck test within {INTERRUPT_GRACE_S:g} s")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    watchdog = item.config.stash.get(_WATCHDOG_KEY, None)
    limit = limit_of(item)
    connector = connector_of(item)
    if watchdog is None or limit is None or connector is None:
        return (yield)
    watchdog.send({"arm": hard_bound(limit), "limit": limit, "nodeid": item.nodeid, "connector": connector.name})
    try:
        return (yield)
    finally:
        watchdog.send({"disarm": True})
