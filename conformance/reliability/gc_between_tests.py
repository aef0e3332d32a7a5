"""Each test's connectors are released when the test ends, not when Python's collector next runs.

vLLM's connectors hold reference cycles, so after ``shutdown()`` they and what they own in C++ live
until the collector's next full pass, which is rare in a process holding vLLM and torch; NixlConnector's
NIXL agent polls without pause until destroyed, so dead agents pile up and spin. So once a conformance
test's teardown is reported (the leak checks have judged), one collection destroys what it left. To keep
that pass to what one test made, the objects alive before the tests and each test's survivors are frozen
(``gc.freeze``), but only when no thread runs but those alive when the tests began (a background
shutdown still holds its connectors) and after pytest's record of the last failure
(``sys.last_traceback``, which holds its frames) is dropped. Automatic collection is off from
``pytest_configure`` until the first freeze: while vLLM and torch import it walks the growing heap again
and again. The heap is not frozen at exit: triton's nanobind bindings would report "leaked instances".
"""

from __future__ import annotations

import functools
import gc
import sys
import threading
from collections.abc import Generator

import pytest

from kvconform.reports.identity import connector_of

from .left_behind import runs_conformance_tests

POST_MORTEM = ("last_type", "last_value", "last_traceback", "last_exc")  # pytest's record of a failed call

_FROZEN_KEY = pytest.StashKey[bool]()
_SKIPPED_AT_SETUP_KEY = pytest.StashKey[bool]()
_THREADS_KEY = pytest.StashKey[set[threading.Thread]]()  # the threads alive when the tests began (xdist's, say)
_PAUSED_KEY = pytest.StashKey[bool]()  # automatic collection is off for the imports and this plugin turned it off


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """No automatic collection while collection imports vLLM and torch (left as it is where someone disabled it)."""
    if gc.isenabled():
        gc.disable()
        config.stash[_PAUSED_KEY] = True
    config.add_cleanup(functools.partial(_unfreeze, config))  # the last cleanup to run (see _unfreeze)


def _resume(config: pytest.Config) -> None:
    if config.stash.get(_PAUSED_KEY, False):
        gc.enable()
        config.stash[_PAUSED_KEY] = False


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection left alive (vLLM, torch, the items), once per process, in conformance runs only."""
    if not session.config.stash.get(_FROZEN_KEY, False) and runs_conformance_tests(session):
        gc.collect()
        gc.freeze()
        session.config.stash[_FROZEN_KEY] = True
        session.config.stash[_THREADS_KEY] = set(threading.enumerate())
    _resume(session.config)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, object, object]:
    """Tests run with automatic collection on, also where no collection ran here (the xdist controller)."""
    _resume(session.config)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Note a test skipped at setup (over a thousand in a full run): it built nothing to release, and any
    garbage a skipping fixture did leave goes with the next test that runs (each pass is a full one)."""
    report = yield
    if call.when == "setup" and report.skipped:
        item.stash[_SKIPPED_AT_SETUP_KEY] = True
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    try:
        return (yield)
    finally:
        if (item.config.stash.get(_FROZEN_KEY, False) and connector_of(item) is not None
                and not item.stash.get(_SKIPPED_AT_SETUP_KEY, False)):
            _release(item.config)


def _release(config: pytest.Config) -> None:
    """Destroy what the test left; freeze what survives, unless something still running may let go of it later."""
    for name in POST_MORTEM:  # pytest's own next test drops them too; until then they hold the test's frames
        if hasattr(sys, name):
            delattr(sys, name)
    gc.collect()
    if set(threading.enumerate()) <= config.stash[_THREADS_KEY]:
        gc.freeze()


def pytest_unconfigure(config: pytest.Config) -> None:
    _resume(config)


def _unfreeze(config: pytest.Config) -> None:
    """The process ends as it would have without the freeze: everything collectable again (see above).

    Not before pytest's own last collections: its unraisable-exception plugin collects once in
    ``pytest_unconfigure`` and once in its cleanup, about 1 s each over an unfrozen heap holding vLLM
    and torch, for finalizer errors of garbage the tests made, none of which is frozen. Registered
    by this plugin's first-run ``pytest_configure``, this cleanup runs after theirs.
    """
    if config.stash.get(_FROZEN_KEY, False):
        gc.unfreeze()
        config.stash[_FROZEN_KEY] = False
