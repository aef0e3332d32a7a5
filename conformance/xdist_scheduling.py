"""Under pytest-xdist, each worker runs one connector's tests of one test module at a time (issue 20).

Why: xdist's default (``--dist load``) deals tests out in collection order, where
pytest interleaves the connectors, so each worker switched connector at nearly
every test. Before another connector's test a worker waits for the P/D shutdowns
still running in the background (``reliability/deferred.py``): about five waits,
4 s, per worker in a ``-n 2`` run. Here a scope is one connector's tests (its id:
name and variant) in one test module, handed out whole in the order they were
collected (xdist's scope scheduling, without its re-sorting by size). A worker
moves to another connector only where a scope ends, and waits about 1 s in all.

Scopes of whole connectors (the first version) waited once a run, but put all of
NixlConnector's 90 tests, a third of a serial run, on one worker: that worker
ended last, its pairs' transfers slowed by the other worker on the second core.
Per module, both workers take their share of every connector's pairs: measured
back to back on two cores (``benchmarks/suite_timing.py``,
``benchmarks/HISTORY.md``), ``-n 2`` took 28.7-34.0 s against 31.2-35.1 s with whole connectors
(1.46-1.63x the serial run beside it, against 1.30-1.42x), together with UCX's
sleeping locks (``harness/affinity.py``) and before ``released.py`` froze what
each test leaves.

Tests with no connector keep xdist's own scope (their module or class). Only
``--dist load`` (what ``-n`` picks when ``--dist`` is not given) is replaced; any
other ``--dist`` is xdist's own.

Two differences from xdist's scope scheduling. When a worker dies, the test it was
running has its result (the crash, reported by xdist and ``reliability/crashes.py``)
and is not sent again; the rest of its scope goes back to the front of the queue,
so the scope's tests stay together. xdist's own requeues the crashed test too,
which would give it two results. And a worker is always topped up to two tests
(``_reschedule``), which the replacement of a dead worker needs.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from xdist.scheduler import LoadScopeScheduling

from kvconform.conformance.reliability.crashes import connector_in_nodeid


class ConnectorScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with a connector's tests in one module as one scope, queued in collection order."""

    def __init__(self, config: pytest.Config, connector_ids: Iterable[str], log=None) -> None:
        super().__init__(config, log)
        self.connector_ids = tuple(connector_ids)

    def _split_scope(self, nodeid: str) -> str:
        connector = connector_in_nodeid(nodeid, self.connector_ids)
        if connector is None:
            return super()._split_scope(nodeid)
        return f"connector {connector} in {nodeid.split('::', 1)[0]}"

    def schedule(self) -> None:
        """xdist's, with the scopes kept in collection order (``--loadscope-reorder`` sorts them by size)."""
        reorder, self.config.option.loadscopereorder = self.config.option.loadscopereorder, False
        try:
            super().schedule()
        finally:
            self.config.option.loadscopereorder = reorder

    def _reschedule(self, node) -> None:
        """xdist's, then more scopes until the worker holds two tests or the queue is empty.

        A worker runs a test only once it knows the next one (or is told to stop). A
        fresh worker given just the one test left of a dead worker's scope would wait
        for ever; xdist tops a worker up to two tests only when the run starts."""
        super()._reschedule(node)
        while self.workqueue and not node.shutting_down and self._pending_of(self.assigned_work[node]) < 2:
            self._assign_work_unit(node)

    def remove_node(self, node) -> str | None:
        """Forget a worker; if it died mid-scope, return the test it was running and requeue the rest, first."""
        workload = self.assigned_work.pop(node)
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
