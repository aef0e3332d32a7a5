"""Connector scopes for xdist: which tests go together (a connector's, of one module), and what a dead worker's
scope becomes (fake workers)."""

from __future__ import annotations

import types

import pytest

from kvconform.conformance.plugin.scheduling import ConnectorScheduling, worker_count
from kvconform.reports.identity import connector_in_nodeid

CONNECTORS = ("ExampleConnector", "NixlConnector", "NixlConnector@device-buffer")


class FakeWorker:
    def __init__(self, name: str) -> None:
        self.name = name
        self.gateway = types.SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.extend(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True

    def __repr__(self) -> str:
        return self.name


def _test(name: str, connector: str, case: str = "") -> str:
    return f"conformance/test_{name}.py::test_{name}[cpu-CPU_ATTN-{connector}{case}]"


def _scope(connector: str, name: str) -> str:
    return f"connector {connector} in conformance/test_{name}.py"


# as pytest collects them: module by module, the connectors interleaved; one module with no connector
COLLECTION = [
    _test("roundtrip", "ExampleConnector", "-float16"), _test("roundtrip", "NixlConnector", "-float16"),
    _test("roundtrip", "ExampleConnector", "-bfloat16"), _test("roundtrip", "NixlConnector", "-bfloat16"),
    _test("roundtrip", "ExampleConnector", "-float32"),
    _test("fill", "ExampleConnector"), _test("fill", "NixlConnector"), _test("fill", "NixlConnector@device-buffer"),
    _test("workload", "NixlConnector@device-buffer"),
    _test("contract", "ExampleConnector"), _test("contract", "NixlConnector"),
    "conformance/test_engine.py::test_engine_tier",
]


class FakeConfig:
    """What the scheduler reads of pytest's config: ``-n 2`` (xdist sets two ``popen`` specs), and the
    scope-reordering option it must leave alone."""

    def __init__(self, tx: list[str] | None = None) -> None:
        self.option = types.SimpleNamespace(tx=["popen", "popen"] if tx is None else tx, loadscopereorder=True)

    def getoption(self, name: str):
        return getattr(self.option, name)


def _scheduling(*workers: FakeWorker) -> ConnectorScheduling:
    sched = ConnectorScheduling(FakeConfig(), CONNECTORS)
    for worker in workers:
        sched.add_node(worker)
    for worker in workers:
        sched.add_node_collection(worker, COLLECTION)
    sched.schedule()
    return sched


def _ids(worker: FakeWorker) -> list[str]:
    return [COLLECTION[i] for i in worker.sent]


def _of(connector: str, name: str) -> list[str]:
    """A connector's tests of one module, as collected."""
    return [t for t in COLLECTION
            if t.startswith(f"conformance/test_{name}.py::") and connector_in_nodeid(t, CONNECTORS) == connector]


def test_each_worker_gets_a_connectors_tests_of_one_module_whole_in_collection_order():
    first, second = FakeWorker("gw0"), FakeWorker("gw1")
    sched = _scheduling(first, second)
    assert _ids(first) == _of("ExampleConnector", "roundtrip")  # three tests: enough to start on
    assert _ids(second) == _of("NixlConnector", "roundtrip") + _of("ExampleConnector", "fill")
    assert list(sched.workqueue) == [_scope("NixlConnector", "fill"), _scope("NixlConnector@device-buffer", "fill"),
                                     _scope("NixlConnector@device-buffer", "workload"),
                                     _scope("ExampleConnector", "contract"), _scope("NixlConnector", "contract"),
                                     "conformance/test_engine.py"]
    assert sched.config.option.loadscopereorder is True  # the user's option, untouched


def test_a_dead_workers_test_is_not_sent_again_and_the_rest_of_its_scope_goes_first():
    first, second = FakeWorker("gw0"), FakeWorker("gw1")
    sched = _scheduling(first, second)
    example = _ids(first)
    sched.mark_test_complete(first, COLLECTION.index(example[0]))
    assert sched.remove_node(first) == example[1]  # the test it was running
    roundtrip = _scope("ExampleConnector", "roundtrip")
    assert list(sched.workqueue)[0] == roundtrip
    assert list(sched.workqueue[roundtrip].items()) == [(example[0], True), (example[1], True), (example[2], False)]
    replacement = FakeWorker("gw2")
    sched.add_node(replacement)
    sched.add_node_collection(replacement, COLLECTION)
    sched.schedule()
    # the test not run yet, and the next scope: a worker runs a test once it knows the next one
    assert _ids(replacement) == [example[2], *_of("NixlConnector", "fill")]
    assert example[1] not in _ids(replacement) + _ids(second)


def test_workers_that_finish_leave_nothing_queued():
    first, second = FakeWorker("gw0"), FakeWorker("gw1")
    sched = _scheduling(first, second)
    done: set[tuple[str, int]] = set()
    while len(done) < len(first.sent) + len(second.sent):  # completing tests hands out the next scopes
        for worker in (first, second):
            for index in [i for i in worker.sent if (worker.name, i) not in done]:
                done.add((worker.name, index))
                sched.mark_test_complete(worker, index)
    assert sorted(first.sent + second.sent) == list(range(len(COLLECTION)))
    assert sched.tests_finished
    assert sched.remove_node(first) is None and sched.remove_node(second) is None


# what xdist's session (dsession.py, pytest-xdist 3.5 to 3.8) reads and calls on the scheduler it is given
CONTRACT = ("nodes", "collection_is_completed", "tests_finished", "has_pending", "add_node", "add_node_collection",
            "mark_test_complete", "mark_test_pending", "remove_pending_tests_from_node", "remove_node", "schedule")


def test_the_scheduler_has_every_member_of_xdists_scheduler_contract():
    missing = [name for name in CONTRACT if not hasattr(ConnectorScheduling, name)]
    assert not missing
    protocol = pytest.importorskip("xdist.scheduler.protocol", reason="pytest-xdist before 3.6 has no "
                                   "Scheduling protocol; CONTRACT above lists what its session uses")
    declared = {name for name in vars(protocol.Scheduling) if not name.startswith("_")}
    assert declared <= set(CONTRACT), declared - set(CONTRACT)


@pytest.mark.parametrize(("tx", "count"), [(["popen", "popen"], 2), (["2*popen"], 2), (["3*popen", "ssh=host"], 4)])
def test_worker_count_reads_xdists_tx_specs(tx, count):
    assert worker_count(FakeConfig(tx)) == count


def test_scheduling_waits_for_every_workers_collection():
    first, second = FakeWorker("gw0"), FakeWorker("gw1")
    sched = ConnectorScheduling(FakeConfig(), CONNECTORS)
    sched.add_node(first)
    sched.add_node(second)
    sched.add_node_collection(first, COLLECTION)
    assert not sched.collection_is_completed and not sched.tests_finished
    sched.add_node_collection(second, COLLECTION)
    assert sched.collection_is_completed and not sched.has_pending  # xdist says "scheduling tests via ..."
    sched.schedule()
    assert sched.has_pending and first.sent and second.sent


def test_a_replacement_that_collected_other_tests_gets_none():
    first, second = FakeWorker("gw0"), FakeWorker("gw1")
    sched = _scheduling(first, second)
    sched.mark_test_complete(first, first.sent[0])
    sched.remove_node(first)
    replacement = FakeWorker("gw2")
    sched.add_node(replacement)
    sched.add_node_collection(replacement, COLLECTION[:-1])
    assert replacement not in sched.registered_collections


def test_more_workers_than_scopes_stops_the_extra_ones():
    workers = [FakeWorker(f"gw{i}") for i in range(3)]
    sched = ConnectorScheduling(FakeConfig(["3*popen"]), CONNECTORS)
    two_scopes = COLLECTION[:5] + COLLECTION[-1:]  # ExampleConnector and NixlConnector round trips, test_engine
    two_scopes = [t for t in two_scopes if "NixlConnector" not in t]
    for worker in workers:
        sched.add_node(worker)
    for worker in workers:
        sched.add_node_collection(worker, two_scopes)
    sched.schedule()
    assert [w.shutting_down for w in workers] == [True, True, True]  # everything sent: all told to stop
    assert workers[2] not in sched.nodes and workers[2].sent == []
    assert sorted(workers[0].sent + workers[1].sent) == list(range(len(two_scopes)))
