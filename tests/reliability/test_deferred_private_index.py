"""The feature test in front of xdist's private test index (``reliability/held_reports.py``), on fake workers.

A held report is sent with its own test's index only while xdist's worker plugin
has the known shape (an int ``item_index`` that is the test being run); otherwise,
and under ``--kvconform-public-apis-only``, no report is held past its test.
The suite runs with both are in ``tests/checks/test_shutdown_catches.py``.
"""

from __future__ import annotations

import types

import pytest

from kvconform.conformance.reliability.held_reports import _index_keeper, _xdist_index_of
from kvconform.conformance.session.private_apis import PUBLIC_ONLY_DEST


class WorkerInteractor:
    """What the feature test looks for in xdist's worker plugin (pytest-xdist 3.5 to 3.8)."""

    def __init__(self, item_index) -> None:
        self.item_index = item_index

    def pytest_runtest_logreport(self, report) -> None:
        raise AssertionError("not called here")


def _items(plugin, public_only: bool = False, count: int = 3) -> list:
    plugins = [] if plugin is None else [plugin]
    config = types.SimpleNamespace(
        stash=pytest.Stash(), pluginmanager=types.SimpleNamespace(get_plugins=lambda: set(plugins)),
        getoption=lambda name, default=None: public_only if name == PUBLIC_ONLY_DEST else default)
    session = types.SimpleNamespace(items=[])
    session.items.extend(types.SimpleNamespace(config=config, session=session, name=f"t{i}") for i in range(count))
    return session.items


def test_the_worker_plugin_is_used_while_it_holds_the_running_test():
    worker = WorkerInteractor(1)
    items = _items(worker)
    assert _index_keeper(items[1]) is worker
    assert _index_keeper(items[2]) is None  # its index is not the test starting: shape changed, public fallback


@pytest.mark.parametrize("index", [None, "1", 7], ids=["unset", "not-an-int", "out-of-range"])
def test_an_index_of_another_shape_is_not_used(index):
    items = _items(WorkerInteractor(index))
    assert _index_keeper(items[1]) is None
    with _xdist_index_of(items[1]):  # and nothing is rewritten
        pass


def test_no_worker_plugin_or_public_apis_only_means_no_index():
    assert _index_keeper(_items(None)[1]) is None
    worker = WorkerInteractor(1)
    items = _items(worker, public_only=True)
    assert _index_keeper(items[1]) is None
    with _xdist_index_of(items[0]):
        assert worker.item_index == 1  # not rewritten either


def test_a_held_report_goes_with_its_own_tests_index_and_the_current_one_comes_back():
    worker = WorkerInteractor(2)
    items = _items(worker)
    with _xdist_index_of(items[0]):
        assert worker.item_index == 0
    assert worker.item_index == 2
    with _xdist_index_of(items[2]):  # its own test is the current one: unchanged
        assert worker.item_index == 2
