"""The harness thread keeps its share of the CPU when a connector's threads would take it.

What a connector's worker side (and vLLM's distributed world) does while it is built is
a worker process's own business in vLLM, where the worker has its cores to itself, but
not here, where one harness thread plays the scheduler, both sides of a pair and every
test after this one:

* Affinity. vLLM's NIXL worker side on CPU calls ``os.sched_setaffinity(0, [last core
  of each NUMA node])`` while it is constructed, to reserve that core for its transfers.
  On Linux that pins the calling thread, and the threads it starts from then on inherit
  the pin. Left pinned, the harness ran on one core beside the connector's threads, and
  two xdist workers pinned themselves to the same last core while the other idled. So
  the harness thread's affinity is restored as soon as the worker side is built; the
  connector's own threads stay where vLLM put them, as long as that is among the cores
  this process was given. An xdist worker owns its share of the cores
  (``xdist_devices.share_cpus``), and vLLM's choice, the machine's last core, may be
  another worker's: there a connector's threads move to the worker's own cores, so a
  worker's polling threads take CPU only from the worker that drives them.
* Busy polling. Each NIXL agent starts a progress thread that polls UCX without pause
  (NIXL's Python API sets ``pthrDelay = 0``): a whole core per agent, measured at 99 of
  100 clock ticks a second on an idle agent. A live pair has two; with ``-n 2`` on two
  cores, four such threads beside two harness threads left the second worker with next
  to no CPU (``-n 2`` ran 1.13x faster than serial). The native threads a worker side
  starts while it is built run at the lowest priority (nice 19) instead: they still poll
  whenever a core has nothing else to run, as a reserved core would let them, and no
  longer take CPU from the harness that drives them. Nothing about the connector's
  configuration or transfers changes.
* Idle wakeups. vLLM's world of one (``distributed.py``) has 15 gloo process groups, and
  torch starts a TCP loop thread for each that wakes every 10 ms with nothing to serve:
  about 1,500 wakeups a second per test process, each of which preempted whatever ran on
  its core. Under ``-n 2`` that is the other worker's harness thread: in a traced run
  those wakeups preempted the two harness threads 9,039 times, 2.1 s of waiting between
  them, the largest share of the 7.8 s they waited after preemptions. The world is built
  inside ``harness_keeps_cpu`` too, so these threads run at nice 19: a busy loop sharing
  a core with a world ran 8% slower than alone with them at nice 0, 3% at nice 19. (A
  waking nice-19 thread still preempts under EEVDF, for less: 1.1 s of waiting in a
  second trace.)
* Locks. UCX guards a worker that several threads use with a spin lock, taken by
  the progress thread on every poll. Preempted while it held it (nice 19, beside a
  busy core), it left the harness thread spinning for the lock in each transfer
  check: beside a busy process, the harness thread spent 2.2 s of CPU waiting for a
  NixlConnector run's transfers (0.3 s alone). So a conformance run sets
  ``UCX_USE_MT_MUTEX=y`` (UCX's own setting: a mutex, whose waiters sleep) when it
  starts, before any UCX context reads it, unless the user set it; the xdist
  workers inherit it. Measured beside a busy process: 0.2 s of such waiting, and
  the run took 20.9 s instead of 23.9 s (17.1 s alone).
* Birth. Threads inherit their creator's priority, so a connector's threads start at the
  harness thread's nice 0 and poll at it until the block ends. NIXL starts its progress
  thread early in building an agent, and the build then takes 60-110 ms more on this
  machine (UCX's reachability checks read sysfs and the routing table thousands of
  times): under ``-n 2`` that thread took half the harness thread's core for all of it;
  in a 5 s trace (``perf sched``) threads still at nice 0 ran 2.0 s while a harness
  thread waited for its core (0.3 s in 6 s since). So once a build of a connector has
  started native threads (``builds``: the block says what it builds), later builds of it
  have a watcher that lowers each new native thread within a millisecond or two of its
  start (NIXL releases the GIL while it builds, so the watcher runs meanwhile); the
  block's end still lowers whatever it missed. Builds that start none (most connectors,
  built in well under a millisecond) are spared the watcher's start and join.
  A Python thread is told apart by ``threading``, which registers it a few microseconds
  after it starts: a thread counts as native only when two scans, a millisecond apart,
  both find it unregistered.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

TASKS = "/proc/self/task"  # Linux: one entry per thread of this process
CONNECTOR_THREAD_NICE = 19  # the lowest CFS priority an unprivileged process may set
UCX_SLEEPING_LOCKS = ("UCX_USE_MT_MUTEX", "y")
WATCH_INTERVAL_S = 0.001  # how often a build's watcher looks for new threads
_BUILDS_STARTING_THREADS: set[str] = set()  # what this process saw start native threads while built


def ucx_locks_sleep() -> dict[str, str]:
    """At the start of a conformance run: UCX's thread locks sleep instead of spinning (the user's choice kept)."""
    name, value = UCX_SLEEPING_LOCKS
    if name in os.environ:
        return {}
    os.environ[name] = value
    return {name: value}


def thread_ids() -> set[int]:
    """The OS ids of this process's threads, Python's and native ones (empty where /proc is not Linux's)."""
    try:
        return {int(tid) for tid in os.listdir(TASKS)}
    except OSError:
        return set()


def lower_priority(tids: set[int]) -> None:
    """Threads that only serve the harness (or, in an xdist controller, the workers) at nice 19."""
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, CONNECTOR_THREAD_NICE)
        except OSError:  # the thread ended meanwhile
            pass


def keep_within(tids: set[int], cores: set[int]) -> None:
    """Threads pinned outside ``cores`` keep what they share with them, or move onto all of them (tid 0: the
    calling thread)."""
    for tid in tids:
        try:
            pinned = os.sched_getaffinity(tid)
            if not pinned <= cores:
                os.sched_setaffinity(tid, (pinned & cores) or cores)
        except OSError:  # the thread ended meanwhile
            pass


def _python_thread_ids() -> set[int | None]:
    """The OS ids of Python's threads; None among them for one that is starting (``threading`` lists it before
    its OS thread has said its id)."""
    return {thread.native_id for thread in threading.enumerate()}


class _LowerAsStarted:
    """A watcher thread that lowers the priority of each native thread started after it, as it starts."""

    def __init__(self, known: set[int]):
        self._known = set(known)
        self._unregistered: set[int] = set()  # found once, not (yet) a Python thread
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="kvconform-lower-as-started", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL_S):
            present = thread_ids()  # first: a Python thread found here is in threading's list by the next line
            python = _python_thread_ids()
            if None in python:  # a Python thread is starting (on a busy host, for many scans): any new id may be it
                continue
            new = present - self._known - python
            native = new & self._unregistered  # unregistered in two scans: not a Python thread ending
            lower_priority(native)
            self._known |= native
            self._unregistered = new - native

    def stop(self) -> None:
        self._stop.set()
        self._watcher.join()


@contextmanager
def harness_keeps_cpu(builds: str | None = None) -> Iterator[None]:
    """Around building what starts threads the harness does not drive (a connector's worker side, vLLM's
    world of one): restore the calling thread's CPU affinity when the block exits, however it exits, keep
    the threads it started meanwhile within the cores it had, and lower the priority of the native
    (non-Python) ones among them: as they start where an earlier build of the same ``builds`` started
    some, else when the block ends."""
    saved = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    before = thread_ids()
    watcher = _LowerAsStarted(before) if before and builds in _BUILDS_STARTING_THREADS else None
    try:
        yield
    finally:
        if watcher is not None:
            watcher.stop()
        started = thread_ids() - before
        if saved is not None:
            if os.sched_getaffinity(0) != saved:
                os.sched_setaffinity(0, saved)
            keep_within(started, saved)
        native = started - _python_thread_ids()
        lower_priority(native)
        if native and builds is not None:
            _BUILDS_STARTING_THREADS.add(builds)
