"""Under pytest-xdist, each worker runs one connector's tests of one test module at a time.

xdist's ``--dist load`` deals tests in collection order, where the connectors interleave, and a worker waits
for the previous connector's background P/D shutdowns (``reliability/held_reports.py``) before another
connector's test. Here a scope is one connector's tests (name and variant) in one module, handed out whole
in collection order; tests with no connector are scoped by module or class, as ``--dist loadscope`` does.
Only ``--dist load`` is replaced, through xdist's public hook ``pytest_xdist_make_scheduler`` and its
``Scheduling`` protocol; nothing of xdist is imported or overridden. A dead worker's running test keeps its
crash as its result and the rest of its scope goes back to the front of the queue. Why not
``--dist loadgroup``: docs/maintaining.md, "Public and private pytest APIs".
"""

from __future__ import annotations

import difflib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import pytest

from kvconform.reports.identity import connector_in_nodeid


class _Gateway(Protocol):
    id: str


class Worker(Protocol):
    """What this scheduler uses of an xdist worker (its ``WorkerController``; xdist ships no types)."""

    gateway: _Gateway
    shutting_down: bool

    def send_runtest_some(self, indices: Sequence[int]) -> None: ...

    def shutdown(self) -> None: ...


TOP_UP = 2  # tests a worker holds before it is given no more (it runs one once it knows the next)


def worker_count(config: pytest.Config) -> int:
    """How many workers xdist starts: its ``--tx`` specs, ``N*popen`` counting N (what ``-n N`` sets)."""
    count = 0
    for spec in config.getoption("tx") or []:
        times, star, _ = spec.partition("*")
        count += int(times) if star and times.isdigit() else 1
    return count


class ConnectorScheduling:
    """A connector's tests in one module as one scope, queued in collection order (xdist's scheduler contract)."""

    def __init__(self, config: pytest.Config, connector_ids: Iterable[str],
                 log: Callable[..., None] | None = None) -> None:
        self.config = config
        self.log = log if log is not None else (lambda *args: None)
        self.connector_ids = tuple(connector_ids)
        self.numnodes = worker_count(config)
        self.collection: list[str] | None = None
        self.workqueue: OrderedDict[str, dict[str, bool]] = OrderedDict()  # scope -> {test id: done}
        self.assigned_work: dict[Worker, dict[str, dict[str, bool]]] = {}  # worker -> its scopes
        self.registered_collections: dict[Worker, list[str]] = {}

    # --- what xdist's session reads ---

    @property
    def nodes(self) -> list[Worker]:
        return list(self.assigned_work)

    @property
    def collection_is_completed(self) -> bool:
        return len(self.registered_collections) >= self.numnodes

    @property
    def tests_finished(self) -> bool:
        """Nothing queued and no worker holds more than its last test (which it runs once told to stop)."""
        if not self.collection_is_completed or self.workqueue:
            return False
        return all(self._pending_of(work) < TOP_UP for work in self.assigned_work.values())

    @property
    def has_pending(self) -> bool:
        return bool(self.workqueue) or any(self._pending_of(work) for work in self.assigned_work.values())

    # --- what xdist's session calls ---

    def add_node(self, node: Worker) -> None:
        assert node not in self.assigned_work
        self.assigned_work[node] = {}

    def add_node_collection(self, node: Worker, collection: Sequence[str]) -> None:
        """A worker's collection; a worker that replaces a dead one must have collected the same tests."""
        assert node in self.assigned_work
        if self.collection_is_completed and self.collection is not None and list(collection) != self.collection:
            self.log(_collection_diff(self.collection, collection, node))
            return
        self.registered_collections[node] = list(collection)

    def mark_test_complete(self, node: Worker, item_index: int, duration: float = 0) -> None:
        nodeid = self.registered_collections[node][item_index]
        self.assigned_work[node][self._split_scope(nodeid)][nodeid] = True
        self._reschedule(node)

    def mark_test_pending(self, item: str) -> None:
        raise NotImplementedError("only --dist each sends a test back as pending")

    def remove_pending_tests_from_node(self, node: Worker, indices: Sequence[int]) -> None:
        raise NotImplementedError("only --dist worksteal takes tests back from a worker")

    def remove_node(self, node: Worker) -> str | None:
        """Forget a worker; if it died mid-scope, return the test it was running and requeue the rest, first."""
        workload = self.assigned_work.pop(node)  # its collection stays: a replacement's is compared with it
        pending = [(scope, nodeid) for scope, unit in workload.items() for nodeid, done in unit.items() if not done]
        if not pending:
            return None
        crash_scope, crashitem = pending[0]
        workload[crash_scope][crashitem] = True  # its result is the crash
        for scope in reversed(list(workload)):
            if not all(workload[scope].values()):
                self.workqueue[scope] = workload[scope]
                self.workqueue.move_to_end(scope, last=False)
        for other in self.assigned_work:
            self._reschedule(other)
        return crashitem

    def schedule(self) -> None:
        """The first call queues the scopes and starts every worker; later ones (a new worker) top workers up."""
        assert self.collection_is_completed
        if self.collection is not None:
            for node in self.nodes:
                self._reschedule(node)
            return
        collections = list(self.registered_collections.items())
        first_node, first = collections[0]
        differing = [(node, c) for node, c in collections[1:] if c != first]
        for node, collection in differing:
            message = _collection_diff(first, collection, node, first_node)
            self.log(message)
            self.config.hook.pytest_collectreport(
                report=pytest.CollectReport(node.gateway.id, "failed", longrepr=message, result=[]))
        if differing:
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(first)
        if not self.collection:
            return
        for nodeid in self.collection:
            self.workqueue.setdefault(self._split_scope(nodeid), {})[nodeid] = False
        for _ in range(len(self.assigned_work) - len(self.workqueue)):  # more workers than scopes
            unused, _work = self.assigned_work.popitem()
            unused.shutdown()
        for node in self.nodes:
            self._assign_work_unit(node)
        for node in self.nodes:
            self._reschedule(node)
        if not self.workqueue:
            for node in self.nodes:
                node.shutdown()

    # --- ours ---

    def _split_scope(self, nodeid: str) -> str:
        connector = connector_in_nodeid(nodeid, self.connector_ids)
        if connector is None:
            return nodeid.rsplit("::", 1)[0]  # its module or class, as --dist loadscope
        return f"connector {connector} in {nodeid.split('::', 1)[0]}"

    @staticmethod
    def _pending_of(workload: dict[str, dict[str, bool]]) -> int:
        return sum(not done for unit in workload.values() for done in unit.values())

    def _assign_work_unit(self, node: Worker) -> None:
        scope, unit = self.workqueue.popitem(last=False)
        self.assigned_work[node][scope] = unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(nodeid) for nodeid, done in unit.items() if not done])

    def _reschedule(self, node: Worker) -> None:
        """Another scope once the worker is down to ``TOP_UP`` tests, and more until it holds that many.

        The second part is what a fresh worker needs: given just the one test left
        of a dead worker's scope, it would idle until the queue is empty."""
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) <= TOP_UP:
            self._assign_work_unit(node)
        while self.workqueue and self._pending_of(self.assigned_work[node]) < TOP_UP:
            self._assign_work_unit(node)


def _collection_diff(expected: Sequence[str], collected: Sequence[str], node: Worker,
                     first_node: Worker | None = None) -> str:
    first = first_node.gateway.id if first_node is not None else "the run"
    diff = difflib.unified_diff(list(expected), list(collected), first, node.gateway.id, lineterm="")
    return f"Different tests were collected between {first} and {node.gateway.id}:\n" + "\n".join(diff)
