"""Each test's connectors are released when the test ends, not when Python's collector next runs.

Why: vLLM's connectors hold reference cycles (threads and executors whose targets
are their own bound methods), so ``shutdown()`` ends their work but the objects,
and whatever they own in C++, live on until the cyclic garbage collector's next
full pass. For NixlConnector that owner is a NIXL agent whose UCX progress
thread polls without pause (``poll(..., timeout=0)`` in ``nixlUcxSharedThread``,
``pthrDelay = 0`` in nixl's Python API) until the agent is destroyed. In a
process that holds vLLM and torch (about 650,000 tracked objects) full passes
are rare, so every NIXL pair a run had made kept two agents spinning, and each
xdist worker dragged its own dead agents along (``benchmarks/HISTORY.md``).

So after each conformance test, once its teardown has been reported (the thread and
storage checks have judged what the connector left behind, so this hides nothing
from them), one collection runs and destroys what the test's connectors left. A full
pass over everything vLLM and torch allocate would cost seconds per test, so the
objects alive once collection is over are frozen (``gc.freeze``: never scanned
again), and so is what survives each test's pass, so the next pass walks only what
one test made. Frozen too early, an object that dies later would never be collected,
so a test's survivors are frozen only when no thread runs but those alive when the
tests began (a P/D pair's shutdown still running in the background holds its
connectors: the next pass takes them), and pytest's record of the last failed call
(``sys.last_traceback`` and its siblings, which pytest drops at the next test's call
anyway) is dropped first: it holds the failed test's frames, connectors and caches.
No NIXL agent outlives its test, and a pass costs what one test made, not what the
run has made. Finalizers run here, outside any report being made (see
``reliability/finalizers.py``); an error in one is pytest's usual "exception
ignored" warning.

Collection itself (pytest's) is cheaper with the collector paused: while vLLM
and torch are being imported the automatic collector walks the growing heap
again and again (a fifth of the import's CPU); nothing a test checks lives yet,
so automatic collection is off from ``pytest_configure`` until the one
collection before the freeze. The heap is not frozen at exit: triton's nanobind
bindings would then print "leaked instances" at every exit.
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
