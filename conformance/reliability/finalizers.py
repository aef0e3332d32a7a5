"""Connector finalizers run where they cannot break pytest: never while it formats a report.

A connector object that failed half-way (an exception in ``__init__``) or that a
failed check never shut down is finalized whenever Python's cyclic garbage
collector next runs, and its ``__del__`` often does real work (closing a store,
a transfer engine) or raises. When that happens inside pytest formatting a
failure, CPython 3.11's ``ast.parse`` (pytest reads the test's source) fails
with ``SystemError: AST constructor recursion depth mismatch`` and the run ends
in an INTERNALERROR: MooncakeConnectorWorker's ``__del__`` (its ``shutdown()``
on a worker whose ``__init__`` raised) did that, in pytest's report and in the
lint check's own parse. So no collection runs inside ``ast.parse`` (wrapped for
the session: automatic collection is paused for the call) nor while a conformance
test's report is made; finalizers run at the next collection outside them, where
an error is only pytest's "exception ignored" warning. One such collection is the
one ``gc_per_test.py`` runs after each test's report, over only what that test made;
this module keeps the others (automatic ones, between) out of pytest's reports.
"""

from __future__ import annotations

import ast
import gc
from collections.abc import Callable, Generator
from typing import Any

import pytest

from kvconform.reports.identity import connector_of


def _without_collection(parse: Callable[..., ast.AST]) -> Callable[..., ast.AST]:
    def parse_without_collection(*args: Any, **kwargs: Any) -> ast.AST:
        if not gc.isenabled():
            return parse(*args, **kwargs)
        gc.disable()
        try:
            return parse(*args, **kwargs)
        finally:
            gc.enable()

    parse_without_collection._kvconform_original = parse  # type: ignore[attr-defined]  # a marker on the function
    return parse_without_collection


def pytest_configure(config: pytest.Config) -> None:
    from ..session.target import is_active

    if is_active(config) and not hasattr(ast.parse, "_kvconform_original"):  # only in kvconform's own runs
        ast.parse = _without_collection(ast.parse)  # type: ignore[assignment]  # the same signature, wrapped


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    if connector_of(item) is None or not gc.isenabled():
        return (yield)
    gc.disable()
    try:
        return (yield)
    finally:
        gc.enable()
