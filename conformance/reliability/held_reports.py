"""A test's result waits for the shutdowns it left running in the background; the next test does not.

A P/D pair's scheduler shutdown waits up to a second on an idle thread (``engine/closing.py``); waiting
for it in every pair test would dominate a run. So a test may leave such closes running and its reports
are held (no result, JUnit entry or terminal line) until they end; then the teardown checks judge what it
left (``after_closes``), an exception a close raised fails its teardown, and the reports are logged in
the order the tests ran. A close not ended ``CLOSE_WAIT_S`` after it started is judged as not returned.
The protocol is pytest's, built from its public hooks (``run_phases``); under a debugger or a setup
display (``NOT_DEFERRED_UNDER``), and in runs that are not kvconform's, pytest's own runs. Under xdist a
dying worker fails the test it ran (``crashes.py``), so a close never overlaps another connector's test
(a worker waits at most once per connector and module, ``plugin/scheduling.py``); a serial run does not
wait (a crash ends it anyway). A thread a close starts after its test's teardown is charged to the test
then running. How held reports travel under xdist: ``_xdist_index_of``.
"""

from __future__ import annotations

import bdb
import sys
import time
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from kvconform.reports.identity import connector_of

from ..engine import closing
from ..session.private_apis import public_only
from .crashes import record_held
from .left_behind import CLOSES_KEY, WAITING_KEY, report_left_behind

# A close not ended by then is judged as it stands. NIXL's scheduler shutdown waits up to 1 s for its handshake
# listener, then for the zmq threads it made; on a 2-core host under load 17 that took over 2 s, so the bound is
# well above it: a shutdown that hangs still fails, one that is merely slow on a loaded machine does not.
CLOSE_WAIT_S = 5.0
POLL_S = 0.01
# pytest options under which pytest's own protocol runs: it enters the debugger, or prints the test between phases
NOT_DEFERRED_UNDER = ("usepdb", "trace", "setupshow", "setuponly", "setupplan")
PHASE_HOOKS = {"setup": "pytest_runtest_setup", "call": "pytest_runtest_call", "teardown": "pytest_runtest_teardown"}

_ENABLED_KEY = pytest.StashKey[bool]()
_HELD_KEY = pytest.StashKey["deque[_Held]"]()
_XDIST_WORKER_KEY = pytest.StashKey[bool]()
_INTERACTOR_KEY = pytest.StashKey[object]()


@dataclass
class _Held:
    item: pytest.Item
    reports: list[pytest.TestReport]
    closes: list[closing.BackgroundClose] = field(default_factory=list)

    def ready(self) -> bool:
        now = time.monotonic()
        return all(c.done() or now - c.started >= CLOSE_WAIT_S for c in self.closes)


def pytest_configure(config: pytest.Config) -> None:
    from ..session.target import is_active

    config.stash[_ENABLED_KEY] = is_active(config) and not any(config.getoption(o, False) for o in NOT_DEFERRED_UNDER)
    config.stash[_XDIST_WORKER_KEY] = hasattr(config, "workerinput")
    config.stash[_HELD_KEY] = deque()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """pytest's protocol with the reports held while earlier tests' closes run (None: pytest's own)."""
    config = item.config
    if not config.stash.get(_ENABLED_KEY, False):
        return None
    xdist = config.stash[_XDIST_WORKER_KEY]
    # under xdist a report held past its test is sent with that test's index, where xdist's has the known shape
    may_hold = not xdist or _index_keeper(item) is not None
    item.stash[CLOSES_KEY] = closing.claim()
    try:
        reports = run_phases(item, nextitem)
    finally:
        closing.release()
    held, closes = config.stash[_HELD_KEY], item.stash.get(CLOSES_KEY, [])
    if xdist and not closes:  # nothing to wait for: sent now, not kept from a crash
        _judge_and_log(_Held(item, reports))
    else:
        held.append(_Held(item, reports, closes))
    # under xdist, wait while this test is still the worker's: a crash in a close is reported as this test's
    _log_ready(config, wait=(nextitem is None or not may_hold
                             or (xdist and _would_run_another_connector(held, nextitem))))
    return True


def run_phases(item: pytest.Item, nextitem: pytest.Item | None) -> list[pytest.TestReport]:
    """pytest's test protocol from its public hooks: setup, the call unless setup failed, teardown; the reports
    returned, not logged. As pytest's own: after ``-x`` or ``--maxfail`` the teardown is everything's (its
    fixtures' errors are then reported), and the test's fixture values are dropped once it is torn down."""
    try:
        reports = [_phase(item, "setup")]
        if reports[0].passed:
            reports.append(_phase(item, "call"))
        if item.session.shouldfail or item.session.shouldstop:
            nextitem = None
        reports.append(_phase(item, "teardown", nextitem=nextitem))
    finally:
        funcargs = getattr(item, "funcargs", None)
        if isinstance(funcargs, dict):
            funcargs.clear()
    return reports


def _phase(item: pytest.Item, when: Literal["setup", "call", "teardown"], **kwargs: object) -> pytest.TestReport:
    hook = getattr(item.ihook, PHASE_HOOKS[when])
    call = pytest.CallInfo.from_call(lambda: hook(item=item, **kwargs), when=when,
                                     reraise=(pytest.exit.Exception, KeyboardInterrupt))  # never under --pdb
    report: pytest.TestReport = item.ihook.pytest_runtest_makereport(item=item, call=call)
    if _interactive(call, report):
        item.ihook.pytest_exception_interact(node=item, call=call, report=report)
    return report


def _interactive(call: pytest.CallInfo[None], report: pytest.TestReport) -> bool:
    """Whether pytest offers the exception to ``pytest_exception_interact``: an error, not a skip or an xfail."""
    if call.excinfo is None or hasattr(report, "wasxfail"):
        return False
    unittest = sys.modules.get("unittest")
    control = (pytest.skip.Exception, bdb.BdbQuit, *((unittest.SkipTest,) if unittest is not None else ()))
    return not isinstance(call.excinfo.value, control)


def _name(item: pytest.Item) -> str | None:
    connector = connector_of(item)
    return connector.name if connector is not None else None


def _would_run_another_connector(held: deque[_Held], item: pytest.Item) -> bool:
    """Whether ``item`` may run code of a connector other than one whose closes are still running."""
    if item.get_closest_marker("skip") is not None:  # skipped before any fixture runs
        return False
    return any(not h.ready() and _name(h.item) != _name(item) for h in held)


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, object, object]:
    """Whatever ends the loop (the last test, -x, an interrupt), no held report is lost.

    The last test's closes may still run while the session's fixtures (the connectors' servers) stop: only
    P/D pairs close in the background, and none of them has a server."""
    try:
        return (yield)
    finally:
        _log_ready(session.config, wait=True)


def _log_ready(config: pytest.Config, wait: bool) -> None:
    """Judge and log held tests from the oldest, while their closes have ended (all of them when ``wait``)."""
    held: deque[_Held] = config.stash.get(_HELD_KEY, deque())
    while held:
        if not held[0].ready():
            if not wait:
                break
            time.sleep(POLL_S)
            continue
        _judge_and_log(held.popleft())
    record_held(config, [h.item.nodeid for h in held])  # under xdist: what the controller reports if we die


def _judge_and_log(held: _Held) -> None:
    item = held.item
    teardown = held.reports[-1]
    for close in held.closes:
        if not close.done():
            report_left_behind(item, teardown, f"{close.what} had not returned {CLOSE_WAIT_S:g} s after it was "
                                               f"called (the test's other checks are judged without it)")
        elif close.error is not None:
            report_left_behind(item, teardown, f"{close.what} raised:\n{close.error}")
    for action in item.stash.get(WAITING_KEY, []):
        action()
    item.stash[WAITING_KEY] = []
    with _xdist_index_of(item):
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        for report in held.reports:
            ihook.pytest_runtest_logreport(report=report)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


class _xdist_index_of:  # noqa: N801 - used as a context manager, like contextlib's lowercase ones
    """An xdist worker's current test index set to ``item``'s while its held reports are sent (a report sent
    while its own test is the current one, the usual case, changes nothing).

    A worker sends each report with the index of the test it is running, and the controller asserts that
    they match; a held report goes with its own test's index, which the controller already received as
    that test's completion. Only tests with closes are held under xdist (the others' reports go at once,
    so the order may differ from the run's), and the worker keeps their ids in a file beside the crash
    ledger: if it dies first, the controller reports each as failed, "its result was never sent"
    (``crashes.py``). The index is private to xdist (``WorkerInteractor.item_index``, in
    ``private_apis.PRIVATE_USES``) and used only while it has its pytest-xdist 3.5 to 3.8 shape, an int
    that is the running test's index, checked as each test starts (``_index_keeper``); otherwise, and under
    ``--kvconform-public-apis-only``, each test waits for its own closes before its reports go (slower;
    the same results)."""

    def __init__(self, item: pytest.Item) -> None:
        worker, items = _worker_interactor(item.config), item.session.items
        current = _current_index(worker, items)
        self.worker = worker if current is not None and items[current] is not item else None
        self.index = items.index(item) if self.worker is not None else None

    def __enter__(self) -> None:
        if self.worker is not None:
            self.saved, self.worker.item_index = self.worker.item_index, self.index

    def __exit__(self, *exc: object) -> None:
        if self.worker is not None:
            self.worker.item_index = self.saved


def _index_keeper(item: pytest.Item) -> Any:
    """The feature test of xdist's private index: its worker plugin, if it holds ``item`` (the test starting)
    as the current one by index; None where it does not, outside a worker and under
    ``--kvconform-public-apis-only``, where no report is held past its test."""
    worker, items = _worker_interactor(item.config), item.session.items
    index = _current_index(worker, items)
    return worker if index is not None and items[index] is item else None


def _current_index(worker: Any, items: list[pytest.Item]) -> int | None:
    index = getattr(worker, "item_index", None)
    return index if isinstance(index, int) and 0 <= index < len(items) else None


def _worker_interactor(config: pytest.Config) -> Any:
    """xdist's worker-side plugin (it keeps the current test's index; xdist ships no types), looked up once;
    None outside a worker."""
    if _INTERACTOR_KEY not in config.stash:
        config.stash[_INTERACTOR_KEY] = None if public_only(config) else next(
            (p for p in config.pluginmanager.get_plugins()
             if type(p).__name__ == "WorkerInteractor" and hasattr(p, "item_index")
             and callable(getattr(p, "pytest_runtest_logreport", None))), None)
    return config.stash[_INTERACTOR_KEY]
