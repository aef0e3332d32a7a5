"""engine/closing.py: a shutdown runs inline unless a test claimed the closes, and then nothing it does is lost."""

from __future__ import annotations

import threading

import pytest

from kvconform.conformance.engine import closing


@pytest.fixture(autouse=True)
def _inline_afterwards():
    yield
    closing.release()


def test_unclaimed_close_runs_inline_and_raises():
    calls = []
    closing.close(lambda: calls.append(threading.current_thread()), "inline")
    assert calls == [threading.current_thread()]

    def fails():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        closing.close(fails, "inline")


def test_claimed_close_returns_before_the_shutdown_ends():
    claimed = closing.claim()
    gate = threading.Event()
    closing.close(gate.wait, "slow")
    [record] = claimed
    assert record.what == "slow" and not record.done()
    assert record.thread.name == closing.THREAD_PREFIX + "slow" and record.thread.daemon
    gate.set()
    record.thread.join(5)
    assert record.done() and record.error is None


def test_claimed_close_keeps_what_the_shutdown_raised():
    claimed = closing.claim()

    def fails():
        raise RuntimeError("the listener would not stop")

    closing.close(fails, "failing")
    claimed[0].thread.join(5)
    assert "RuntimeError: the listener would not stop" in claimed[0].error
    assert "Traceback" in claimed[0].error


def test_release_makes_closes_inline_again():
    claimed = closing.claim()
    closing.release()
    ran = []
    closing.close(lambda: ran.append(1), "after release")
    assert ran == [1] and claimed == []
