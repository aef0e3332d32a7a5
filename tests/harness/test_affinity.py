"""kept_cpu_affinity: the harness thread gets its cores back after a connector pins it (NIXL on CPU does)."""

from __future__ import annotations

import os
import threading

import pytest

from kvconform.conformance.harness.affinity import kept_cpu_affinity

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                                reason="needs os.sched_setaffinity and at least two usable CPUs to pin to one")


def _pin_like_nixl() -> set[int]:
    """What vLLM's NIXL worker does on CPU: pin the calling thread to the last core."""
    core = {max(os.sched_getaffinity(0))}
    os.sched_setaffinity(0, core)
    return core


def test_the_calling_thread_gets_its_cores_back_and_threads_started_inside_stay_pinned():
    before = os.sched_getaffinity(0)
    seen = {}

    def worker_thread():  # a connector's thread, started after the pin: it keeps the connector's core
        seen["thread"] = os.sched_getaffinity(0)

    with kept_cpu_affinity():
        core = _pin_like_nixl()
        thread = threading.Thread(target=worker_thread)
        thread.start()
        thread.join()
        assert os.sched_getaffinity(0) == core
    assert os.sched_getaffinity(0) == before
    assert seen["thread"] == core


def test_it_restores_when_the_block_raises():
    before = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError, match="construction failed"):
        with kept_cpu_affinity():
            _pin_like_nixl()
            raise RuntimeError("construction failed")
    assert os.sched_getaffinity(0) == before
