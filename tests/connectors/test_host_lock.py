"""The per-connector host lock (conformance/reliability/host_lock.py): which tests take it, and how it is held.

Two ``HostLocks`` on one folder play two xdist workers (``flock`` locks of two open files exclude each other
within one process too). The suite run under ``-n 2`` is tests/connectors/test_host_lock_selftest.py.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from kvconform.conformance.connectors import selection
from kvconform.conformance.connectors.profiles import ConnectorProfile, ProfileError, load_profiles, profile_for
from kvconform.conformance.engine.closing import BackgroundClose
from kvconform.conformance.plugin import _no_profile_lines
from kvconform.conformance.reliability import host_lock
from kvconform.conformance.reliability.host_lock import HostLocks, exclusive_connector
from kvconform.conformance.session.target import TARGET_KEY

NODEID = "test_contract.py::test_contract_scheduler[cpu-CPU_ATTN-FixedPortConnector]"


class FakeItem:
    """What ``exclusive_connector`` reads of a pytest item: its connector parameter and its markers."""

    def __init__(self, connector: object, check: str = "contract", skipped: bool = False,
                 locks: HostLocks | None = None) -> None:
        self.callspec = SimpleNamespace(params={"connector": connector})
        self.markers = {"check": pytest.mark.check(check).mark, **({"skip": pytest.mark.skip.mark} if skipped else {}),
                        "timeout": pytest.mark.timeout(0.3).mark}
        self.nodeid = f"test_contract.py::test_contract_worker[{getattr(connector, 'name', '')}]"
        self.stash = pytest.Stash()
        self.config = SimpleNamespace(stash=pytest.Stash())
        if locks is not None:
            self.config.stash[host_lock._LOCKS_KEY] = locks

    def get_closest_marker(self, name: str) -> object:
        return self.markers.get(name)


def _param(name: str) -> selection.ConnectorParam:
    return selection.ConnectorParam(name=name, class_name=name, module_path=None, profile=profile_for(name))


def test_a_connector_no_profile_names_keeps_the_host_to_itself():
    assert profile_for("NobodysConnector").host == "exclusive"
    assert profile_for("ExampleConnector").host == "shared"
    assert exclusive_connector(FakeItem(_param("NobodysConnector"))) == "NobodysConnector"
    assert exclusive_connector(FakeItem(_param("ExampleConnector"))) is None


def test_tests_that_cannot_build_it_take_no_lock():
    nobody = _param("NobodysConnector")
    assert exclusive_connector(FakeItem(nobody, check="lint")) is None  # reads source only
    assert exclusive_connector(FakeItem(nobody, skipped=True)) is None  # skipped before its setup
    assert exclusive_connector(FakeItem(None)) is None  # not a conformance test


def test_a_profile_says_exclusive_or_shared_and_nothing_else(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("connectors:\n  Mine:\n    host: exclusive\n  Theirs: {}\n")
    assert load_profiles(good).connectors["Mine"].host == "exclusive"
    assert load_profiles(good).connectors["Theirs"].host == "shared"
    bad = tmp_path / "bad.yaml"
    bad.write_text("connectors:\n  Mine:\n    host: alone\n")
    with pytest.raises(ProfileError, match=r"bad.yaml:3: connectors.Mine.host: .*'shared' or 'exclusive'"):
        load_profiles(bad)


def test_a_second_worker_waits_and_then_fails_naming_the_holder(tmp_path):
    first, second = HostLocks(tmp_path, "gw0"), HostLocks(tmp_path, "gw1")
    assert first.acquire("Mine", NODEID, 30) is None
    assert first.acquire("Mine", "the next test", 30) is None  # held already: kept
    started = time.monotonic()
    failure = second.acquire("Mine", "test_b", 0.3)
    assert time.monotonic() - started >= 0.3
    assert failure == (f"not run: Mine keeps the host to itself (host: exclusive) and its lock was still held "
                       f"after 0.3 s (the test's timeout), by gw0 running {NODEID}")
    assert second.acquire("Other", "test_c", 0.3) is None  # one lock per connector
    first.leave("Mine", [])
    assert second.acquire("Mine", "test_b", 0.3) is None
    assert "gw1 running test_b" == second.path("Mine").read_text()


def test_the_lock_outlives_the_tests_background_shutdowns(tmp_path):
    first, second = HostLocks(tmp_path, "gw0"), HostLocks(tmp_path, "gw1")
    assert first.acquire("Mine", NODEID, 30) is None
    ending = threading.Event()
    close = BackgroundClose("Mine's scheduler shutdown()", threading.Thread(target=ending.wait, daemon=True))
    close.thread.start()
    first.leave("Mine", [close])
    assert "Mine" in first.held
    assert second.acquire("Mine", "test_b", 0.2) is not None  # its shutdown still runs: the port may be bound
    ending.set()
    close.thread.join()
    first.release_ended(keep=None)
    assert not first.held
    assert second.acquire("Mine", "test_b", 0.2) is None


def test_a_close_that_never_returns_is_waited_for_as_long_as_held_reports_waits(tmp_path, monkeypatch):
    monkeypatch.setattr(host_lock, "CLOSE_WAIT_S", 2.0)  # long enough that a loaded host still sees it held first
    locks = HostLocks(tmp_path, "gw0")
    assert locks.acquire("Mine", NODEID, 30) is None
    hung = BackgroundClose("a hung shutdown()", threading.Thread(target=threading.Event().wait, daemon=True))
    hung.thread.start()
    locks.leave("Mine", [hung])
    assert "Mine" in locks.held
    started = time.monotonic()
    locks.release_all()
    assert not locks.held and time.monotonic() - started < 10


def test_a_waiting_worker_releases_what_it_holds_only_for_ended_closes(tmp_path):
    """No deadlock: a worker that waits for one connector's lock lets go of another whose closes have ended."""
    first, second = HostLocks(tmp_path, "gw0"), HostLocks(tmp_path, "gw1")
    assert second.acquire("B", "test_b", 30) is None
    done = BackgroundClose("B's shutdown()", threading.Thread(target=lambda: None))
    done.thread.start()
    done.thread.join()
    second.held["B"].closes.append(done)
    assert first.acquire("A", NODEID, 30) is None
    assert second.acquire("A", "test_a", 0.2) is not None
    assert not second.held  # B let go while it waited for A
    assert first.acquire("B", "test_b2", 0.2) is None


def test_a_test_holds_the_lock_from_before_its_setup_to_after_its_teardown(tmp_path):
    first, second = HostLocks(tmp_path, "gw0"), HostLocks(tmp_path, "gw1")
    running = FakeItem(_param("NobodysConnector"), locks=first)
    protocol = host_lock.pytest_runtest_protocol(running, None)
    next(protocol)  # pytest's protocol (setup, call, teardown) runs here
    assert "NobodysConnector" in first.held
    waiting = FakeItem(_param("NobodysConnector"), locks=second)
    other = host_lock.pytest_runtest_protocol(waiting, None)
    next(other)  # its timeout (0.3 s) ran out while the first test held the lock
    with pytest.raises(pytest.fail.Exception, match="still held after 0.3 s .*, by gw0 running test_contract.py"):
        host_lock.pytest_runtest_setup(waiting)
    with pytest.raises(StopIteration):
        other.send(True)
    with pytest.raises(StopIteration):
        protocol.send(True)
    assert not first.held
    host_lock.pytest_runtest_setup(running)  # it had the lock: its setup goes on


def test_the_header_says_who_keeps_the_host(monkeypatch):
    [line] = [line for line in _no_profile_lines(SimpleNamespace(connectors=("m:Mine",), profiles=()))
              if "Mine" in line]
    assert "never on two workers at once (it may bind fixed ports)" in line and "host: shared" in line
    params = [SimpleNamespace(name="Leader", profile=ConnectorProfile(host="exclusive")),
              SimpleNamespace(name="ExampleConnector", profile=profile_for("ExampleConnector")),
              SimpleNamespace(name="NobodysConnector", profile=profile_for("NobodysConnector"))]
    monkeypatch.setattr(selection, "connector_params", lambda config: params)
    assert host_lock.pytest_report_header(SimpleNamespace(stash={TARGET_KEY: object()})) == [
        "kvconform: Leader keeps the host to itself (host: exclusive): under -n N its tests that build it never run "
        "on two workers at once"]
