"""Each test's connectors are released when the test ends, not when Python's collector next runs.

Why: vLLM's connectors hold reference cycles (threads and executors whose targets
are their own bound methods), so ``shutdown()`` ends their work but the objects,
and whatever they own in C++, live on until the cyclic garbage collector's next
full pass. For NixlConnector that owner is a NIXL agent whose UCX progress
thread polls without pause (``poll(..., timeout=0)`` in ``nixlUcxSharedThread``,
``pthrDelay = 0`` in nixl's Python API) until the agent is destroyed. In a
process that holds vLLM and torch (about 650,000 tracked objects) full passes
are rare, so every NIXL pair a run had made kept two agents spinning: a serial
run of the suite used about 1.85 cores, its load average climbed to 10, and two
xdist workers each dragged their own dead agents along (measured per thread
from ``/proc/PID/task/*/stat`` and a ``gdb`` backtrace; README "Performance").

So after each conformance test, once its teardown has been reported (the
thread and storage checks have judged what the connector left behind, so this
hides nothing from them), one collection runs and destroys what the test's
connectors left. A full pass over everything vLLM and torch allocate would cost
seconds per test, so the objects alive once collection is over are frozen
(``gc.freeze``: never scanned again) and each pass only walks what the tests
made since: a few hundredths of a second. Finalizers run here, outside any
report being made (see ``reliability/finalizers.py``); an error in one is
pytest's usual "exception ignored" warning.
"""

from __future__ import annotations

import gc

import pytest

from kvconform.conformance.reliability.items import connector_of

_FROZEN_KEY = pytest.StashKey[bool]()
_SKIPPED_AT_SETUP_KEY = pytest.StashKey[bool]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection left alive (vLLM, torch, the items), once per process, in conformance runs only."""
    if session.config.stash.get(_FROZEN_KEY, False) or not any(connector_of(item) for item in session.items):
        return
    gc.collect()
    gc.freeze()
    session.config.stash[_FROZEN_KEY] = True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Note a test skipped at setup (over a thousand in a full run): it built nothing to release, and any
    garbage a skipping fixture did leave goes with the next test that runs (each pass is a full one)."""
    report = yield
    if call.when == "setup" and report.skipped:
        item.stash[_SKIPPED_AT_SETUP_KEY] = True
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    try:
        return (yield)
    finally:
        if (item.config.stash.get(_FROZEN_KEY, False) and connector_of(item) is not None
                and not item.stash.get(_SKIPPED_AT_SETUP_KEY, False)):
            gc.collect()


def pytest_unconfigure(config: pytest.Config) -> None:
    """The process ends as it would have without the freeze: everything collectable again."""
    if config.stash.get(_FROZEN_KEY, False):
        gc.unfreeze()
        config.stash[_FROZEN_KEY] = False
