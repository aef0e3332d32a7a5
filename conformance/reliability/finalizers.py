"""Connector finalizers run where they cannot break pytest: never while it formats a report.

A connector object that failed half-way (an exception in ``__init__``) or that a
failed check never shut down is finalized whenever Python's cyclic garbage
collector next runs, and its ``__del__`` often does real work (closing a store,
a transfer engine) or raises. When that happens inside pytest formatting a
failure, CPython 3.11's ``ast.parse`` (pytest reads the test's source) fails
with ``SystemError: AST constructor recursion depth mismatch`` and the run ends
in an INTERNALERROR: MooncakeConnectorWorker's ``__del__`` (its ``shutdown()``
on a worker whose ``__init__`` raised) did that. So automatic collection is
paused while a conformance test's report is made; finalizers run at the next
collection outside it, where an error is only pytest's "exception ignored"
warning. (Not an explicit collection per test: a full one costs most of a second
in a process holding vLLM and torch, times every test of the suite.)
"""

from __future__ import annotations

import gc

import pytest

from conformance.reliability.items import connector_of


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    if connector_of(item) is None or not gc.isenabled():
        return (yield)
    gc.disable()
    try:
        return (yield)
    finally:
        gc.enable()

