"""Servers a connector needs (LMCache's server, Mooncake's master), run as session fixtures.

LMCache and Mooncake keep KV in a server, not in the process that asks for it. A profile declares its
servers under ``services:``; each starts the first time a test of that connector builds a rig, on a
loopback port the kernel picks (retried on a fresh one if the server dies before it is ready), lives for
the session (one per xdist worker) and stops at the end. No test sees another's data: ``per_test: reset``
calls the server's clear endpoint, ``per_test: restart`` starts a fresh instance, and a failed reset
restarts. A server that cannot start is one skip, decided once, quoting why; a failed test carries the
end of each server's log (a connector's error often says only "timed out"). A connector that hangs on
its server fails at the service's ``timeout_s`` through a SIGALRM that raises ``ServiceTimeout`` in the
test's thread, with pytest-timeout ``NATIVE_GRACE_S`` later as the backstop for a wait in native code.
docs/connectors.md says more.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.request
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import pytest

from ..engine.distributed import free_port
from .service_spec import ServiceSpec

if TYPE_CHECKING:
    from .selection import ConnectorParam

# connector_services' value: the connector's servers, started for the test -> the placeholders its config names
UseServices = Callable[["ConnectorParam"], dict[str, str]]

LOG_TAIL_LINES = 40
START_ATTEMPTS = 3  # a fresh port each time: another process may take the one we picked first
STOP_GRACE_S = 10.0
RESET_TIMEOUT_S = 30.0
NATIVE_GRACE_S = 30.0  # after timeout_s's in-process failure, the thread-method backstop for native waits
LOOPBACK = "127.0.0.1"
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class ServiceUnavailable(Exception):
    """A server did not come up; the message says why, in the server's words where it gave any."""


class ServiceTimeout(BaseException):
    """A connector with servers did not finish within its service's ``timeout_s``.

    A BaseException, as pytest's own ``Failed``: connector code that catches
    ``Exception`` around its wait (MooncakeStore's lookup does, answering "no hit")
    must not swallow the bound and carry on as though the server had answered.
    """


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def _substitute(text: str, mapping: dict[str, str]) -> str:
    for key, value in mapping.items():
        text = text.replace("{" + key + "}", value)
    return text


def _executable(word: str) -> str:
    """A command's first word: on PATH, else beside this interpreter (a venv's scripts are not on PATH)."""
    if os.sep in word:
        return word
    beside = Path(sys.executable).parent / word
    return shutil.which(word) or (str(beside) if beside.exists() else word)


def _die_with_parent() -> None:
    """In the server's process before it runs: a crashed or killed test worker takes its servers along (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: stop() at session end is then the only cleanup


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class RunningService:
    """One started server: its ports, folder, log, and process (which this module started and stops)."""

    name: str
    spec: ServiceSpec
    folder: Path
    ports: dict[str, int]
    process: subprocess.Popen[bytes]
    log: Path

    def placeholders(self) -> dict[str, str]:
        """What the connector's extra config and environment may name: ``{NAME.port:P}``, ``{NAME.dir}``."""
        found = {f"{self.name}.port:{p}": str(n) for p, n in self.ports.items()}
        found[f"{self.name}.dir"] = str(self.folder)
        return found

    def log_tail(self) -> str:
        return tail(self.log)

    def reset(self) -> str | None:
        """Empty the server through its ``reset`` call; the reason when that did not work, else None."""
        call = self.spec.reset
        if call is None:
            return "no reset call is declared"
        url = f"http://{LOOPBACK}:{self.ports[call.port]}{call.path}"
        request = urllib.request.Request(url, data=call.body.encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=RESET_TIMEOUT_S) as answer:
                return None if 200 <= answer.status < 300 else f"POST {url} answered {answer.status}"
        except OSError as exc:  # URLError, HTTPError, timeouts
            return f"POST {url} failed: {exc}"

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)  # its own session: the server and its children
        try:
            self.process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def start(name: str, spec: ServiceSpec, folder: Path) -> RunningService:
    """Start ``spec`` on fresh loopback ports and wait until it is ready; retry if it loses its port."""
    folder.mkdir(parents=True, exist_ok=True)
    failure = ""
    for attempt in range(1, START_ATTEMPTS + 1):
        ports = {p: free_port() for p in spec.ports}
        mapping = {"python": sys.executable, "dir": str(folder), **{f"port:{p}": str(n) for p, n in ports.items()}}
        for file_name, content in spec.files.items():
            (folder / file_name).write_text(_substitute(content, mapping))
        argv = [_substitute(word, mapping) for word in spec.command]
        argv[0] = _executable(argv[0])
        log = folder / f"{name}-{attempt}.log"
        with log.open("wb") as sink:
            try:
                process = subprocess.Popen(argv, cwd=folder, stdout=sink, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True,
                                           preexec_fn=_die_with_parent)
            except OSError as exc:
                raise ServiceUnavailable(f"service {name}: cannot run {argv[0]}: {exc.strerror}") from None
        service = RunningService(name, spec, folder, ports, process, log)
        deadline = time.monotonic() + spec.start_timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            if _accepts(ports[spec.ready]):
                return service
            time.sleep(0.2)
        if process.poll() is None:
            service.stop()
            raise ServiceUnavailable(f"service {name} did not accept connections on port {ports[spec.ready]} "
                                     f"within {spec.start_timeout_s:g} s; its log ends:\n{service.log_tail()}")
        failure = (f"service {name} exited with status {process.returncode} before it was ready "
                   f"(attempt {attempt} of {START_ATTEMPTS}); its log ends:\n{service.log_tail()}")
    raise ServiceUnavailable(failure)


@dataclass
class ServicePool:
    """The servers of one test session, by (connector, service) name; a failed start is remembered."""

    root: Path
    running: dict[str, RunningService] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def acquire(self, connector: str, name: str, spec: ServiceSpec) -> RunningService:
        key = f"{connector}.{name}"
        if key in self.failed:
            raise ServiceUnavailable(self.failed[key])
        current = self.running.get(key)
        if current is not None and current.process.poll() is None and spec.per_test == "reset":
            if current.reset() is None:
                return current
        if current is not None and (spec.per_test != "shared" or current.process.poll() is not None):
            current.stop()  # a fresh instance: asked for, or the reset did not work, or it died
            current = None
        if current is None:
            try:
                current = start(name, spec, self.root / key)
            except ServiceUnavailable as exc:
                self.failed[key] = str(exc)
                raise
            self.running[key] = current
        return current

    def close(self) -> None:
        for service in self.running.values():
            service.stop()
        self.running.clear()


_STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()


def waiting_in(frame: FrameType | None) -> str:
    """Where a thread waits: its innermost frame outside the standard library (whose frames are only the
    wait itself: a lock, a queue, a future), as ``path:line (function)``, the path from site-packages on."""
    innermost = frame
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if "site-packages" in path.parts or not path.resolve().is_relative_to(_STDLIB):
            break
        frame = frame.f_back
    frame = frame or innermost
    if frame is None:
        return "(no Python frame)"
    parts = Path(frame.f_code.co_filename).parts
    shown = "/".join(parts[parts.index("site-packages") + 1:]) if "site-packages" in parts else "/".join(parts[-3:])
    return f"{shown}:{frame.f_lineno} ({frame.f_code.co_name})"


@dataclass
class Watchdog:
    """A SIGALRM ``limit`` seconds after ``arm()`` that raises ServiceTimeout in the main thread, saying where
    it waited. Only the main thread receives signals: elsewhere (a test run in a thread) it stays unarmed,
    and pytest-timeout's thread-method backstop alone bounds the test."""

    label: str
    limit: float
    previous: Callable[[int, FrameType | None], Any] | int | None = None  # what signal.signal returned
    armed: bool = False

    def arm(self) -> None:
        if self.armed or threading.current_thread() is not threading.main_thread():
            return
        self.previous = signal.signal(signal.SIGALRM, self._fire)
        signal.setitimer(signal.ITIMER_REAL, self.limit)
        self.armed = True

    def disarm(self) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
            self.armed = False

    def _fire(self, signum: int, frame: FrameType | None) -> None:
        raise ServiceTimeout(f"{self.label}: no answer within {self.limit:g} s (its services' timeout_s); "
                             f"the test was waiting in {waiting_in(frame)}")


SERVICES_USED = pytest.StashKey[list[RunningService]]()
SERVICE_LIMIT = pytest.StashKey[float]()  # the in-process bound of a test whose connector has servers
WATCHDOG = pytest.StashKey[Watchdog]()  # one per test, armed by its first rig


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """The in-process bound covers the test itself only: raised later (pytest formatting the failure, a
    fixture's teardown) it would be an internal error; those are left to the thread-method backstop."""
    try:
        return (yield)
    finally:
        if WATCHDOG in item.stash:
            item.stash[WATCHDOG].disarm()


@pytest.fixture(scope="session")
def service_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServicePool]:
    pool = ServicePool(tmp_path_factory.mktemp("services"))
    yield pool
    pool.close()


@pytest.fixture
def connector_services(request: pytest.FixtureRequest, service_pool: ServicePool,
                       monkeypatch: pytest.MonkeyPatch) -> Iterator[UseServices]:
    """``use(connector) -> placeholders``: the connector's servers, fresh for this test where declared.

    Lazy (called when a rig is built, after the test's own skips), and once per test however
    many rigs it builds. A server that cannot start skips the test, quoting why.
    """
    used: dict[str, RunningService] = {}

    def use(connector: ConnectorParam) -> dict[str, str]:
        limit = request.node.stash.get(SERVICE_LIMIT, None)
        if limit and WATCHDOG not in request.node.stash:  # from the first rig on: what waits on a server runs after
            request.node.stash[WATCHDOG] = Watchdog(connector.name, limit)
            request.node.stash[WATCHDOG].arm()
        placeholders: dict[str, str] = {}
        for name, spec in connector.profile.services.items():
            if name not in used:
                try:
                    used[name] = service_pool.acquire(connector.name, name, spec)
                except ServiceUnavailable as exc:
                    pytest.skip(f"{connector.name}: {exc}")
                request.node.stash.setdefault(SERVICES_USED, []).append(used[name])
                for key, value in spec.env.items():
                    mapping = {"dir": str(used[name].folder),
                               **{f"port:{p}": str(n) for p, n in used[name].ports.items()}}
                    monkeypatch.setenv(key, _substitute(value, mapping))
            placeholders.update(used[name].placeholders())
        return placeholders

    yield use
    if WATCHDOG in request.node.stash:
        request.node.stash[WATCHDOG].disarm()


def service_timeout(connector: ConnectorParam, per_test: float | None) -> float | None:
    """The test's timeout for a connector with servers: the shortest service ``timeout_s``, if below ``per_test``."""
    limits = [s.timeout_s for s in connector.profile.services.values() if s.timeout_s]
    if not limits or not per_test:
        return None
    return min(limits) if min(limits) < per_test else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Before the per-test timeout is set: a connector with servers gets its shorter bound."""
    from kvconform.reports.identity import connector_of

    from ..session.options import effective_timeout

    per_test = effective_timeout(config)
    for item in items:
        connector = connector_of(item)
        if getattr(connector, "profile", None) is None or item.get_closest_marker("timeout") is not None:
            continue  # not a conformance test (another project's ``connector`` parameter), or timed already
        limit = service_timeout(connector, per_test)
        if limit and per_test:  # a limit is always below per_test
            item.stash[SERVICE_LIMIT] = limit  # the Watchdog's: an in-process failure, pinnable
            # the backstop, with the thread method: a connector stuck in native code (a store client waiting
            # on its server) never returns to Python for a signal to interrupt; this one ends the worker,
            # which crash isolation reports as that test's failure and replaces
            item.add_marker(pytest.mark.timeout(min(limit + NATIVE_GRACE_S, per_test), method="thread"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test shows the end of each server's log: the server often says why the connector failed."""
    report = yield
    if report.failed:
        for service in item.stash.get(SERVICES_USED, []):
            report.sections.append((f"kvconform service {service.name} log (last {LOG_TAIL_LINES} lines)",
                                    service.log_tail() or "(empty)"))
    return report
