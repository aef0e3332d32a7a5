"""ZeroMQ contexts a connector leaves open: kept alive, so that no garbage collection can hang the run.

pyzmq's ``Context.__del__`` calls ``term()``, which waits for every socket of the context to close;
collected in a reference cycle, the context's socket list (weak references) is already cleared, so
``term()`` waits forever, in whatever code triggered the collection. MooncakeStoreConnector's scheduler
never closes its LookupKeyClient and hangs runs that way. So every context a conformance test leaves open
is referenced here until the process ends (pyzmq skips that destroy at exit) and named in the test's
report as a section, without judging the test, like a failed test's leaked threads.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from kvconform.reports.identity import connector_of

from .left_behind import after_closes

_CREATED_KEY = pytest.StashKey[list[Any]]()  # pyzmq's Contexts (pyzmq is not followed: Any)
_PARKED: list[Any] = []  # open contexts of finished tests: never collected, so never destroyed mid-run
_watching: list[Any] | None = None  # the running conformance test's new contexts


def _zmq_context_class() -> type[Any] | None:
    try:
        from zmq.sugar.context import Context
    except ImportError:  # pyzmq absent: nothing to watch
        return None
    context: type[Any] = Context
    return context


def pytest_configure(config: pytest.Config | None) -> None:
    from ..session.target import is_active

    if config is not None and not is_active(config):  # another project's run: leave its pyzmq alone
        return
    context_class = _zmq_context_class()
    if context_class is None or getattr(context_class.__init__, "_kvconform_watched", False):
        return
    original = context_class.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if _watching is not None:
            _watching.append(self)

    __init__._kvconform_watched = True  # type: ignore[attr-defined]  # a marker on the function
    context_class.__init__ = __init__


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    global _watching
    if connector_of(item) is not None:
        _watching = item.stash[_CREATED_KEY] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    global _watching
    report = yield
    if call.when == "teardown" and _CREATED_KEY in item.stash:
        _watching = None
        created = item.stash[_CREATED_KEY]
        del item.stash[_CREATED_KEY]
        after_closes(item, lambda: _park_open(item, report, created))
    return report


def _park_open(item: pytest.Item, report: pytest.TestReport, created: list[Any]) -> None:
    left_open = [c for c in created if not c.closed]
    if left_open:
        _PARKED.extend(left_open)
        report.sections.append(("kvconform: zmq contexts left open",
                                f"{connector_of(item).name} left {len(left_open)} zmq context(s) open after "
                                f"the test and the connector's shutdown(); kept referenced until the process "
                                f"exits, so that pyzmq's destroy-on-collection cannot hang the run"))
