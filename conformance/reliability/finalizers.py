"""Connector finalizers run where they cannot break pytest: never while it formats a report.

A connector that failed half-way or was never shut down is finalized at the cyclic collector's next
run, and its ``__del__`` often does real work or raises. Inside pytest formatting a failure, that makes
CPython 3.11's ``ast.parse`` fail with ``SystemError: AST constructor recursion depth mismatch`` and
ends the run in an INTERNALERROR (MooncakeConnectorWorker's ``__del__`` does so). So no collection runs
inside ``ast.parse`` (wrapped for the session) nor while a conformance test's report is made; finalizers
run at the next collection outside them (``gc_between_tests.py`` runs one after each report), where an error
is only pytest's "exception ignored" warning.
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
