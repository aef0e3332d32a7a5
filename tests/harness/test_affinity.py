"""harness_keeps_cpu: the harness thread gets its cores back after a connector pins it (NIXL on CPU does)."""

from __future__ import annotations

import os
import threading

import pytest

from kvconform.conformance.harness.affinity import harness_keeps_cpu

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

    with harness_keeps_cpu():
        core = _pin_like_nixl()
        thread = threading.Thread(target=worker_thread)
        thread.start()
        thread.join()
        assert os.sched_getaffinity(0) == core
    assert os.sched_getaffinity(0) == before
    assert seen["thread"] == core


def test_threads_pinned_outside_the_harness_cores_move_onto_them():
    """In an xdist worker that owns the first core, vLLM's choice (the last core) is another worker's: the
    connector's threads run on the worker's own core instead."""
    before = os.sched_getaffinity(0)
    own = {min(before)}
    seen = {}
    release = threading.Event()

    def connector_thread():
        seen["started"] = os.sched_getaffinity(0)
        release.wait(5)
        seen["after"] = os.sched_getaffinity(0)

    os.sched_setaffinity(0, own)
    try:
        with harness_keeps_cpu():
            os.sched_setaffinity(0, {max(before)})  # as vLLM's NIXL worker does: the machine's last core
            thread = threading.Thread(target=connector_thread)
            thread.start()
        assert os.sched_getaffinity(0) == own
        release.set()
        thread.join()
    finally:
        os.sched_setaffinity(0, before)
    assert seen == {"started": {max(before)}, "after": own}


def test_it_restores_when_the_block_raises():
    before = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError, match="construction failed"):
        with harness_keeps_cpu():
            _pin_like_nixl()
            raise RuntimeError("construction failed")
    assert os.sched_getaffinity(0) == before


class NativeThread:
    """A thread started as a connector's C++ code starts one: ``pthread_create``, invisible to ``threading``."""

    def __init__(self, seconds: float):
        import ctypes
        import time

        self.tid = 0
        self._started = threading.Event()
        libc = ctypes.CDLL(None)

        @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
        def body(_arg):
            self.tid = threading.get_native_id()  # the OS thread's id; threading does not register this thread
            self._started.set()
            time.sleep(seconds)
            return None

        self._body = body  # kept alive while the thread runs
        self._handle = ctypes.c_ulong()
        assert libc.pthread_create(ctypes.byref(self._handle), None, body, None) == 0
        self._libc = libc
        assert self._started.wait(5)

    def join(self) -> None:
        self._libc.pthread_join(self._handle, None)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="harness_keeps_cpu finds native threads in Linux's "
                    "/proc/self/task")
def test_native_threads_started_inside_run_at_the_lowest_priority_and_the_harness_keeps_its_own():
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    outside = NativeThread(0.5)
    with harness_keeps_cpu():
        inside = NativeThread(0.5)
        python_thread = threading.Thread(target=lambda: __import__("time").sleep(0.5))
        python_thread.start()
    try:
        assert os.getpriority(os.PRIO_PROCESS, inside.tid) == 19
        assert os.getpriority(os.PRIO_PROCESS, outside.tid) == own  # started before the block: not the connector's
        assert os.getpriority(os.PRIO_PROCESS, python_thread.native_id) == own  # a Python thread does not poll
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own
    finally:
        for thread in (inside, outside, python_thread):
            thread.join()


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="the world's threads are found in Linux's "
                    "/proc/self/task")
def test_the_one_rank_worlds_polling_threads_run_at_the_lowest_priority():
    """vLLM's world of one starts torch's gloo threads (a TCP loop per group, waking every 10 ms): nice 19."""
    from vllm.config import VllmConfig
    from vllm.distributed.parallel_state import model_parallel_is_initialized

    from kvconform.conformance.harness.distributed import single_rank_parallel_state

    assert not model_parallel_is_initialized(), "this test builds the world itself"
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    config = VllmConfig()  # may start threads of its own (torch's), before the world is built
    before = {int(tid) for tid in os.listdir("/proc/self/task")}
    with single_rank_parallel_state(config):
        started = {int(tid) for tid in os.listdir("/proc/self/task")} - before
        python_threads = {thread.native_id for thread in threading.enumerate()}
        native = started - python_threads
        assert native, "the world started no native thread: nothing here to check"
        assert {tid: os.getpriority(os.PRIO_PROCESS, tid) for tid in native} == dict.fromkeys(native, 19)
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own


def _priority_inside(name: str) -> tuple[dict[str, int], int]:
    """Build ``name`` once, a native and a Python thread started in the block: the priorities seen while the block
    still runs (having waited up to 0.5 s for the native one's to drop), and how many more Python threads than
    the build's own ran in the block (a watcher)."""
    import time

    threads_outside = threading.active_count()
    with harness_keeps_cpu(builds=name):
        native = NativeThread(0.6)
        python_thread = threading.Thread(target=lambda: time.sleep(0.6))
        python_thread.start()
        deadline = time.monotonic() + 0.5
        while os.getpriority(os.PRIO_PROCESS, native.tid) != 19 and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.02)  # many scans more: a Python thread is never taken for a native one
        inside = {who: os.getpriority(os.PRIO_PROCESS, tid) for who, tid in
                  (("native", native.tid), ("python", python_thread.native_id), ("harness", threading.get_native_id()))}
        extra = threading.active_count() - threads_outside - 1  # other than the build's own Python thread
    try:
        assert os.getpriority(os.PRIO_PROCESS, native.tid) == 19  # the block's end lowers it in any case
    finally:
        native.join()
        python_thread.join()
    return inside, extra


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="harness_keeps_cpu finds native threads in Linux's "
                    "/proc/self/task")
def test_a_python_thread_slow_to_report_its_id_is_never_taken_for_a_native_one():
    """On a busy host a Python thread's OS thread can exist for many of the watcher's scans before ``threading``
    knows its id (a CI run lowered one so); the watcher judges new threads only once none is starting."""
    import time
    import uuid

    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    name = f"connector-{uuid.uuid4()}"
    _priority_inside(name)  # its first build started a native thread: the next one has a watcher
    with harness_keeps_cpu(builds=name):
        python_thread = threading.Thread(target=lambda: time.sleep(0.6))
        python_thread.start()
        tid = python_thread.native_id
        python_thread._native_id = None  # threading's own record, as before the OS thread reports its id
        try:
            native = NativeThread(0.6)
            time.sleep(0.05)  # fifty scans
            python_while_starting = os.getpriority(os.PRIO_PROCESS, tid)
        finally:
            python_thread._native_id = tid
        deadline = time.monotonic() + 0.5
        while os.getpriority(os.PRIO_PROCESS, native.tid) != 19 and time.monotonic() < deadline:
            time.sleep(0.001)
        native_once_reported = os.getpriority(os.PRIO_PROCESS, native.tid)
    native.join()
    python_thread.join()
    assert python_while_starting == own
    assert native_once_reported == 19


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="harness_keeps_cpu finds native threads in Linux's "
                    "/proc/self/task")
def test_a_build_that_started_native_threads_once_has_them_lowered_as_they_start_the_next_time():
    """NIXL's progress thread polls from its start and the build goes on for 100 ms after it: from the second
    build of a connector on, lowered meanwhile; the first build, and builds that start none, have no watcher."""
    import uuid

    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    name = f"connector-{uuid.uuid4()}"
    first, watchers_first = _priority_inside(name)
    second, watchers_second = _priority_inside(name)
    assert (first, watchers_first) == ({"native": own, "python": own, "harness": own}, 0)
    assert (second, watchers_second) == ({"native": 19, "python": own, "harness": own}, 1)
    quiet = f"quiet-{uuid.uuid4()}"
    with harness_keeps_cpu(builds=quiet):
        pass
    before = threading.active_count()
    with harness_keeps_cpu(builds=quiet):  # its first build started no native thread: no watcher
        assert threading.active_count() == before
