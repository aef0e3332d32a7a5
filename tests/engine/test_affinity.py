"""restore_harness_affinity: the harness thread gets its cores back after a connector pins it (NIXL on CPU does)."""

from __future__ import annotations

import os
import threading

import pytest

from kvconform.conformance.engine.affinity import restore_harness_affinity

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                                reason="needs os.sched_setaffinity and at least two usable CPUs to pin to one")


def _pin_like_nixl() -> set[int]:
    """What vLLM's NIXL worker does on CPU: pin the calling thread to the last core."""
    core = {max(os.sched_getaffinity(0))}
    os.sched_setaffinity(0, core)
    return core


def test_the_calling_thread_gets_its_cores_back_and_the_connectors_threads_stay_where_it_put_them():
    before = os.sched_getaffinity(0)
    seen = {}
    release = threading.Event()

    def connector_thread():  # started after the pin: it inherits the connector's core and keeps it
        seen["started"] = os.sched_getaffinity(0)
        release.wait(5)
        seen["after"] = os.sched_getaffinity(0)

    with restore_harness_affinity():
        core = _pin_like_nixl()
        thread = threading.Thread(target=connector_thread)
        thread.start()
        assert os.sched_getaffinity(0) == core
    assert os.sched_getaffinity(0) == before
    release.set()
    thread.join()
    assert seen == {"started": core, "after": core}


def test_it_restores_when_the_block_raises():
    before = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError, match="construction failed"):
        with restore_harness_affinity():
            _pin_like_nixl()
            raise RuntimeError("construction failed")
    assert os.sched_getaffinity(0) == before
