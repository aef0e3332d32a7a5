"""ucx_locks_sleep: a conformance run asks UCX for locks whose waiters sleep, unless the user chose already."""

from __future__ import annotations

import os

from kvconform.conformance.harness.affinity import ucx_locks_sleep


def test_a_run_sets_ucx_mutex_locks(monkeypatch):
    monkeypatch.delenv("UCX_USE_MT_MUTEX", raising=False)
    assert ucx_locks_sleep() == {"UCX_USE_MT_MUTEX": "y"}
    assert os.environ["UCX_USE_MT_MUTEX"] == "y"


def test_a_users_choice_is_left_alone(monkeypatch):
    monkeypatch.setenv("UCX_USE_MT_MUTEX", "n")
    assert ucx_locks_sleep() == {}
    assert os.environ["UCX_USE_MT_MUTEX"] == "n"
